"""MuonAdamW: parameter split, equivalence with torch's Muon and AdamW, schedules, checkpoints; the WSD decay."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from livethink.rft_distill.muon import MuonAdamW, is_muon_matrix
from livethink.rft_distill.sft import decay_steps


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = nn.Embedding(10, 6)
        self.proj = nn.Linear(6, 6)  # weight: Muon, bias: AdamW
        self.experts = nn.Parameter(torch.randn(2, 6, 6))  # 3-D expert stack: AdamW
        self.lm_head = nn.Linear(6, 10, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        h = torch.tanh(self.proj(h)) @ self.experts[0] @ self.experts[1]
        return self.lm_head(h)


def _loss(model: nn.Module) -> torch.Tensor:
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    logits = model(ids)
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 10), ids[:, 1:].reshape(-1))


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    _loss(model).backward()
    opt.step()
    opt.zero_grad()


def test_only_hidden_matrices_go_to_muon():
    model = Tiny()
    muon = [name for name, p in model.named_parameters() if is_muon_matrix(name, p)]
    assert muon == ["proj.weight"]
    opt = MuonAdamW(model.named_parameters(), lr=1e-2, weight_decay=0.1, decay_names={"proj.weight", "experts"})
    assert [p for g in opt.muon.param_groups for p in g["params"]] == [model.proj.weight]
    adamw = {id(p) for g in opt.adamw.param_groups for p in g["params"]}
    assert adamw == {id(model.embed_tokens.weight), id(model.proj.bias), id(model.experts), id(model.lm_head.weight)}
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert decay[id(model.proj.weight)] == 0.1 and decay[id(model.experts)] == 0.1
    assert decay[id(model.proj.bias)] == 0.0 and decay[id(model.embed_tokens.weight)] == 0.0


def test_updates_equal_torch_muon_and_adamw():
    ours, ref = Tiny(), Tiny()
    opt = MuonAdamW(ours.named_parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, momentum=0.9)
    hidden = [ref.proj.weight]
    rest = [p for p in ref.parameters() if all(p is not h for h in hidden)]
    ref_muon = torch.optim.Muon(hidden, lr=1e-2, weight_decay=0.1, momentum=0.9, adjust_lr_fn="match_rms_adamw")
    ref_adamw = torch.optim.AdamW(rest, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    for _ in range(3):
        _step(ours, opt)
        _loss(ref).backward()
        ref_muon.step(), ref_adamw.step()
        ref_muon.zero_grad(), ref_adamw.zero_grad()
    for (name, a), b in zip(ours.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert not torch.equal(ours.proj.weight, Tiny().proj.weight)  # it did train


def test_scheduler_drives_both_halves():
    model = Tiny()
    opt = MuonAdamW(model.named_parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
    _step(model, opt)
    sched.step()
    assert [g["lr"] for g in opt.muon.param_groups + opt.adamw.param_groups] == [0.5] * len(opt.param_groups)


def test_state_dict_round_trip_resumes_identically():
    model = Tiny()
    opt = MuonAdamW(model.named_parameters(), lr=1e-2, weight_decay=0.01)
    _step(model, opt)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    _step(model, opt)
    expected = copy.deepcopy(model.state_dict())

    resumed = Tiny()
    resumed.load_state_dict(saved_model)
    opt2 = MuonAdamW(resumed.named_parameters(), lr=1e-2, weight_decay=0.01)
    opt2.load_state_dict(saved_opt)
    assert opt2.muon.param_groups[0] is opt2.param_groups[0]  # still shared after loading
    _step(resumed, opt2)
    for name, value in resumed.state_dict().items():
        torch.testing.assert_close(value, expected[name], msg=name)


def test_frozen_parameters_are_left_out_and_empty_model_is_an_error():
    model = Tiny()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        MuonAdamW(model.named_parameters(), lr=1e-2)
    model.lm_head.weight.requires_grad_(True)
    opt = MuonAdamW(model.named_parameters(), lr=1e-2)
    assert opt.muon is None and [len(g["params"]) for g in opt.param_groups] == [1]


@pytest.mark.parametrize(("given", "steps", "expected"), [
    ({"num_decay_steps": 0.25}, 800, 200),  # a fraction of training
    ({"num_decay_steps": 0.001}, 100, 1),  # at least one step
    ({"num_decay_steps": 50}, 800, 50),  # already steps: unchanged
    ({"num_decay_steps": 50, "decay_type": "linear"}, 800, 50),
])
def test_decay_steps(given, steps, expected):
    out = decay_steps(given, steps)
    assert out["num_decay_steps"] == expected
    assert {k: v for k, v in out.items() if k != "num_decay_steps"} == {k: v for k, v in given.items() if k != "num_decay_steps"}
