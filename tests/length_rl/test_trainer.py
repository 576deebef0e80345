"""Real-TRL smoke tests of every variant (1–2 steps on a tiny random Qwen3-MoE), resume after a kill, the CLI,
the reward columns and the batching helpers. CPU, offline, transformers rollouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from livethink.length_rl.config import GRPOVariantConfig
from livethink.length_rl.rewards import CachedJudge, RewardContext, is_cut, make_reward_funcs
from livethink.length_rl.trainer import router_logits_off, select_rows, shuffle_groups
from livethink.rewards.judge import RubricJudge
from tests.support.students import RuleJudge, grpo_setup, opens_thinking

torch.set_num_threads(1)  # the CI box is shared: one thread avoids OpenMP spin-waiting under load


@pytest.fixture(scope="module")
def setup(tmp_path_factory, liveshop_small):
    return grpo_setup(tmp_path_factory.mktemp("grpo"), liveshop_small, tokenizer_tasks=60)


def make_config(setup, variant: str, name: str, **overrides) -> GRPOVariantConfig:
    values = dict(variant=variant, model_name_or_path=str(setup["student"]), data_dir=str(setup["data"]),
                  output_dir=str(setup["root"] / name), n_prompts=16, max_steps=2, per_device_train_batch_size=4,
                  num_generations=2, max_completion_length=12, learning_rate=1e-3, use_cpu=True, bf16=False,
                  gradient_checkpointing=False, logging_steps=1, save_strategy="steps", save_steps=1,
                  report_to="none", seed=0, l_ref=8.0, dataloader_num_workers=0)
    values.update(overrides)
    return GRPOVariantConfig(**values)


def train(cfg, judge=None):
    from livethink.length_rl.script import build_dataset
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    tokenizer.padding_side = "left"
    ctx = RewardContext(l_ref=cfg.l_ref or None, zero_reward_if_cut=cfg.zero_reward_if_cut)
    funcs = make_reward_funcs(cfg.spec.rewards, ctx, judge, **cfg.spec.reward_options())
    trainer = LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=funcs, args=cfg,
                              train_dataset=build_dataset(cfg), processing_class=tokenizer, reward_context=ctx)
    trainer.train()
    return trainer


def metrics(cfg) -> list[dict]:
    return [json.loads(line) for line in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- variants end to end


def test_cli_baseline_runs_saves_and_resumes_after_kill(setup, capsys):
    from livethink.length_rl.cli import main

    out = setup["root"] / "baseline"
    args = ["--config", str(Path(__file__).resolve().parents[2] / "configs/tiny/grpo_baseline.yaml"),
            "--model_name_or_path", str(setup["student"]), "--data_dir", str(setup["data"]), "--output_dir", str(out),
            "--n_prompts", "16", "--max_steps", "2", "--per_device_train_batch_size", "4", "--num_generations", "2",
            "--max_completion_length", "12", "--save_steps", "1", "--l_ref", "0",
            "--use_vllm", "false"]  # the config's vLLM rollouts: tests/length_rl/test_vllm.py
    assert main(args) == 0
    assert (out / "final" / "config.json").is_file() and (out / "checkpoint-2").is_dir()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("rewards/correctness/mean", "rewards/helpfulness/mean", "rewards/brevity/mean", "accuracy",
                "completions/mean_length", "completions/max_length", "completions/clipped_ratio", "l_ref"):
        assert key in rows[0], key
    summary = json.loads((out / "grpo_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["l_ref"] > 0
    state = json.loads((out / "checkpoint-1" / "length_rl_state.json").read_text())
    assert state["l_ref"] == summary["l_ref"]
    # "kill" after step 1: drop what step 2 wrote, run again -> resumes from checkpoint-1
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoint-2")
    assert main(args) == 0
    summary = json.loads((out / "grpo_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-1") and summary["global_step"] == 2
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_siri_caps_follow_schedule_and_phase_checkpoints(setup):
    cfg = make_config(setup, "siri", "siri", siri_l_max=12, siri_l_min=4, siri_period=2, siri_schedule="cosine")
    train(cfg, RubricJudge())
    rows = metrics(cfg)
    assert [r["siri/cap"] for r in rows] == [12, 4]
    assert rows[1]["completions/max_length"] <= 4
    out = Path(cfg.output_dir)
    assert (out / "phases" / "compression-1" / "config.json").is_file()
    assert (out / "phases" / "expansion-1" / "config.json").is_file()


def test_dot_truncates_masks_and_rescores(setup):
    # every finished completion is correct: groups are all-correct unless one was cut by the 12-token cap
    cfg = make_config(setup, "dot", "dot", dot_alpha=0.0, dot_margin=1, num_generations=4,
                      per_device_train_batch_size=8, max_steps=2, temperature=1.0)
    trainer = train(cfg, RuleJudge(lambda text: True))
    rows = metrics(cfg)
    assert all("dot/truncated_share" in r and "dot/full_correct_group_share" in r for r in rows)
    assert any(r["dot/truncated_share"] > 0 for r in rows)  # (seeded: step 2 has an all-correct group to cut)
    assert any(r.get("dot/rescored_accuracy") == 0 for r in rows)  # truncated text has no EOS: cut -> 0
    assert trainer.variant.new_lengths is None


def test_dot_dynamic_sampling_keeps_batch_shape(setup):
    cfg = make_config(setup, "dot", "dot_ds", dot_dynamic_sampling=True, max_steps=1, save_steps=10)
    judge = RuleJudge(lambda text: len(text) % 2 == 0)
    trainer = train(cfg, judge)
    rows = metrics(cfg)
    assert rows[0]["dot/oversample_factor"] == pytest.approx(1.5) and "dot/pass_rate" in rows[0]
    assert len(trainer.pass_rates) == 1


def test_drpo_replaces_the_loss(setup):
    # positives weighted by where their thinking states the answer (the default, by length, runs in the variant sweep)
    cfg = make_config(setup, "drpo", "drpo", drpo_positive="correct", drpo_weight_by="answer_point", max_steps=2,
                      save_steps=10)
    before = {n: p.detach().clone() for n, p in
              __import__("transformers").AutoModelForCausalLM.from_pretrained(cfg.model_name_or_path).named_parameters()}
    trainer = train(cfg, RuleJudge(lambda text: len(text) % 2 == 0))
    rows = metrics(cfg)
    for key in ("drpo/objective", "drpo/weight_entropy", "drpo/mixed_group_share", "drpo/answer_tokens", "kl"):
        assert key in rows[0], key
    assert all("clip_ratio/region_mean" not in r for r in rows)  # TRL's surrogate did not run
    if any(r["drpo/mixed_group_share"] > 0 for r in rows):
        changed = any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
        assert changed


def test_length_penalty_runs(setup):
    cfg = make_config(setup, "length_penalty", "lp", max_steps=1, save_steps=10)
    train(cfg, RubricJudge())
    row = metrics(cfg)[0]
    # C = 0 for a random model: the column is −α·L/L_max
    assert row["rewards/length_penalty/mean"] == pytest.approx(-0.5 * row["completions/mean_length"] / 12, abs=1e-4)


def test_freeze_router_keeps_routing_weights(setup):
    from transformers import AutoModelForCausalLM

    from livethink.models.freezing import router_modules

    before = AutoModelForCausalLM.from_pretrained(str(setup["student"])).state_dict()
    cfg = make_config(setup, "length_penalty", "frozen-router", max_steps=2, save_steps=10, freeze_router=True)
    after = train(cfg, RubricJudge()).model
    routers = list(router_modules(after))
    assert routers and all(not p.requires_grad for name in routers for p in after.get_submodule(name).parameters())
    state = after.state_dict()
    assert all(torch.equal(state[f"{name}.weight"], before[f"{name}.weight"]) for name in routers)
    assert not torch.equal(state["model.layers.0.self_attn.q_proj.weight"], before["model.layers.0.self_attn.q_proj.weight"])


# ---------------------------------------------------------------- config, dry-run


def test_colocated_vllm_on_cpu_refused_for_moe(setup):
    from livethink.length_rl.script import build_trainer

    cfg = make_config(setup, "baseline", "colocate", use_vllm=True, vllm_mode="colocate")
    with pytest.raises(ValueError, match="stale policy"):
        build_trainer(cfg)


def test_colocated_vllm_on_cpu_allowed_for_moe_when_experts_and_routers_stay_frozen(setup):
    from livethink.length_rl.vllm_sync import check_cpu_colocate, trained_stale_parameters

    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.gate.weight",
             "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.3.down_proj.weight", "lm_head.weight"]
    assert trained_stale_parameters(names, None, False) == names[2:5]
    assert trained_stale_parameters(names, None, True) == names[3:5]
    assert trained_stale_parameters(names, ["lm_head", "self_attn"], False) == []
    assert trained_stale_parameters(names, ["lm_head", r"layers\.0\.mlp"], True) == names[3:5]
    assert trained_stale_parameters(names, ["@head"], False) == []  # the output layer
    assert trained_stale_parameters(names, ["@all"], True) == names[3:5]
    tied = names[:-1] + ["model.norm.weight"]  # no lm_head: @head is the top layer (its experts too) and the norm
    assert trained_stale_parameters(tied, ["@head"], False) == names[2:5]
    # the checkpoint's own names are read: lm_head only passes, the last layer's experts do not
    check_cpu_colocate(make_config(setup, "baseline", "x", use_vllm=True, vllm_mode="colocate",
                                   trainable_parameters=["lm_head"]), str(setup["student"]))
    with pytest.raises(ValueError, match=r"trains \d+ of them \(e\.g\. model\.layers\.0\.mlp\.experts"):
        check_cpu_colocate(make_config(setup, "baseline", "x", use_vllm=True, vllm_mode="colocate",
                                       trainable_parameters=["lm_head", "experts"]), str(setup["student"]))


def test_config_validation(setup):
    with pytest.raises(ValueError, match="variant"):
        make_config(setup, "ppo", "x")
    with pytest.raises(ValueError, match="num_generations"):  # TRL (1 process) or ours (groups per process)
        make_config(setup, "baseline", "x", per_device_train_batch_size=3, num_generations=2)
    with pytest.raises(ValueError, match="micro-batch"):
        make_config(setup, "drpo", "x", per_device_train_batch_size=2, num_generations=4, steps_per_generation=2)
    with pytest.raises(ValueError, match="l_min"):
        make_config(setup, "siri", "x", siri_l_min=64)
    with pytest.raises(ValueError, match="length_gate"):
        make_config(setup, "baseline", "x", length_gate="always")
    cfg = make_config(setup, "length_penalty", "x")
    assert cfg.reward_weights == [0.0, 1.0, 1.0] and cfg.penalty_l_max == 12


@pytest.mark.parametrize("option, value", [("loss_type", "grpo"), ("epsilon", 0.3), ("beta", 0.04),
                                           ("importance_sampling_level", "sequence"), ("top_entropy_quantile", 0.2),
                                           ("entropy_coef", 0.01), ("off_policy_mask_threshold", 0.5),
                                           ("delta", 2.0)])
def test_drpo_rejects_the_trl_options_it_ignores(setup, option, value):
    with pytest.raises(ValueError, match=rf"^{option}: variant drpo ignores this GRPOConfig option"):
        make_config(setup, "drpo", "x", **{option: value})
    make_config(setup, "band", "x", **{option: value})  # the GRPO-loss variants use it


@pytest.mark.parametrize("variant", ["band", "baseline", "siri", "dot", "drpo", "length_penalty", "gdpo", "dapo_overlong",
                                     "cosine", "dler"])
def test_configs_dry_run(variant, capsys):
    from livethink.length_rl.cli import main
    from livethink.length_rl.variants import canonical_name

    root = Path(__file__).resolve().parents[2]
    for tier in ("tiny", "prod"):
        assert main(["--config", str(root / f"configs/{tier}/grpo_{variant}.yaml"), "--dry-run"]) == 0, tier
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] and report["variant"] == canonical_name(variant)
    assert report["rollouts"] == "vllm-server" and report["bf16"] is True


# ---------------------------------------------------------------- reward columns and helpers


def test_reward_columns_share_one_judge_call_and_zero_cut(liveshop_small):
    from livethink.data.io import task_to_row

    task = liveshop_small.tasks["train"][0]
    calls = []

    class Counting(RuleJudge):
        def score_many(self, items):
            calls.append(len(items))
            return super().score_many(items)

    ctx = RewardContext(eos_ids={2}, l_ref=10.0)
    funcs = make_reward_funcs(["correctness", "helpfulness", "brevity", "length_penalty"], ctx,
                              Counting(lambda t: True), penalty={"alpha": 0.5, "l_max": 20})
    columns = {k: [v, v] for k, v in task_to_row(task).items()}
    completions, ids = ["done", "cut off"], [[5, 6, 2], [5, 6, 7, 8]]
    out = [f(completions, completion_ids=ids, **columns) for f in funcs]
    assert out[0] == [1.0, 0.0] and out[1] == [1.0, 0.0]  # the cut completion scores 0
    assert out[2] == pytest.approx([1.0, 1.0])  # 3 and 4 tokens lie in the band [2, 4]
    assert out[3] == pytest.approx([1 - 0.5 * 3 / 20, -0.5 * 4 / 20])
    assert calls == [2]  # memoised across the columns
    assert [f.__name__ for f in funcs] == ["correctness", "helpfulness", "brevity", "length_penalty"]


def test_gated_brevity_column(liveshop_small):
    from livethink.data.io import task_to_row

    task = liveshop_small.tasks["train"][0]
    ctx = RewardContext(eos_ids={2}, l_ref=10.0)
    columns = {k: [v, v, v] for k, v in task_to_row(task).items()}
    # "ok" replies are correct and helpful; the cut one is neither; all three lie in the band [2, 4]
    completions, ids = ["ok", "wrong", "ok cut"], [[5, 2], [5, 6, 2], [5, 6, 7]]
    ctx.group_size = 3
    for gate, expected in (("none", [1.0, 1.0, 1.0]), ("correct", [1.0, 0.0, 0.0]),
                           ("correct_helpful", [1.0, 0.0, 0.0]), ("solved_group", [1.0, 1.0, 1.0])):
        (brevity,) = make_reward_funcs(["brevity"], ctx, RuleJudge(lambda t: t.startswith("ok")),
                                       band={"gate": gate})
        assert brevity(completions, completion_ids=ids, **columns) == pytest.approx(expected), gate


def test_cached_judge_and_is_cut(liveshop_small):
    task = liveshop_small.tasks["train"][0]
    judge = CachedJudge(RubricJudge())
    assert judge.score(task, "x") == judge.score(task, "x") and len(judge._cache) == 1
    assert is_cut([1, 2], {2}) is False and is_cut([1, 3], {2}) is True and is_cut([], {2}) is True


def test_shuffle_groups_keeps_groups_whole():
    batch = {"ids": torch.arange(12).view(6, 2), "rows": list("abcdef"), "n": torch.tensor(7)}
    out = shuffle_groups(batch, 2, torch.Generator().manual_seed(0))
    firsts = out["ids"][:, 0].tolist()
    assert sorted(firsts) == [0, 2, 4, 6, 8, 10]
    for i in range(0, 6, 2):  # consecutive pairs are one original group, in order
        assert firsts[i + 1] - firsts[i] == 2 and firsts[i] % 4 == 0
    assert out["n"].item() == 7 and "".join(out["rows"]) != "" and len(out["rows"]) == 6
    picked = select_rows(batch, torch.tensor([4, 5]), 6)
    assert picked["rows"] == ["e", "f"] and picked["ids"].tolist() == [[8, 9], [10, 11]]


def test_router_logits_off_restores():
    class Cfg:
        output_router_logits = True

    class M:
        config = Cfg()

    with router_logits_off(M()):
        assert M.config.output_router_logits is False
    assert M.config.output_router_logits is True


def test_calculator_assisted_rollouts(setup):
    from livethink.length_rl.script import build_dataset
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    with pytest.raises(ValueError, match="colocate mode only"):
        make_config(setup, "baseline", "calc-vllm", calculator=True, use_vllm=True, vllm_mode="server")
    colocated = make_config(setup, "baseline", "calc-vllm", calculator=True, use_vllm=True, vllm_mode="colocate",
                            generation_kwargs={"extra_args": {"other": 1}})
    assert colocated.generation_kwargs == {"extra_args": {"other": 1, "calculator": True}}  # every vLLM request
    cfg = make_config(setup, "baseline", "calc", calculator=True)
    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    ctx = RewardContext(l_ref=cfg.l_ref)
    trainer = LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=make_reward_funcs(cfg.spec.rewards, ctx, RubricJudge()),
                              args=cfg, train_dataset=build_dataset(cfg), processing_class=tokenizer, reward_context=ctx)
    # TRL's rollouts call model.generate(**inputs, generation_config=...): the calculator rides along
    enc = tokenizer(["Subtotal: 12.50 × 3 = "], return_tensors="pt", add_special_tokens=False)
    out = trainer.model.generate(**enc, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert tokenizer.decode(out[0, enc["input_ids"].shape[1]:]) == "37.50"
    # the forced digits are tool output: left out of the loss (tool_mask 0), the model's own tokens stay in
    prompt = enc["input_ids"][0].tolist()
    completion = out[0, len(prompt):].tolist() + tokenizer.encode(" ok", add_special_tokens=False)
    batch = {"prompt_ids": torch.tensor([prompt, prompt]), "prompt_mask": torch.ones(2, len(prompt), dtype=torch.long),
             "completion_ids": torch.tensor([completion, completion]),
             "completion_mask": torch.tensor([[1] * len(completion), [1, 1] + [0] * (len(completion) - 2)])}
    trainer._mask_calculator_tokens(batch)
    assert batch["tool_mask"].tolist() == [[0] * 5 + [1] * (len(completion) - 5), [0, 0] + [1] * (len(completion) - 2)]
    assert trainer._count_loss_tokens(batch).item() == len(completion) - 5


def test_forced_digits_get_nan_sampling_logprobs():
    import math

    from livethink.length_rl.vllm_calculator import nan_forced_logprobs

    out = nan_forced_logprobs([[[-0.5], [0.0, -3.0], [-1.0]]], [[False, True, False]])
    assert out[0][0] == [-0.5] and out[0][2] == [-1.0] and len(out[0][1]) == 2 and all(map(math.isnan, out[0][1]))
    with pytest.raises(ValueError):  # a mask that does not fit the completion is a bug, not something to skip
        nan_forced_logprobs([[[-0.5]]], [[False, True]])


# ---------------------------------------------------------------- baselines end to end


def test_dapo_overlong_runs_with_trls_punishment(setup):
    cfg = make_config(setup, "dapo_overlong", "dapo", max_steps=1, save_steps=10, dapo_overlong_l_max=12,
                      dapo_overlong_cache=12)
    train(cfg, RubricJudge())
    row = metrics(cfg)[0]
    # L_max = L_cache = 12: the punishment is −L/12 for every length up to the cap
    assert row["rewards/overlong/mean"] == pytest.approx(-row["completions/mean_length"] / 12, abs=1e-4)


def test_cosine_runs(setup):
    cfg = make_config(setup, "cosine", "cosine", max_steps=1, save_steps=10)
    train(cfg, RubricJudge())
    row = metrics(cfg)[0]
    assert row["accuracy"] == 0 and -1.0 <= row["rewards/cosine/mean"] <= -0.5  # wrong replies: [−1, −0.5]
    assert cfg.reward_weights == [0.0, 1.0, 1.0]


def test_gdpo_normalises_each_reward_then_sums(setup):
    cfg = make_config(setup, "gdpo", "gdpo", max_steps=1, save_steps=10)
    trainer = train(cfg, RuleJudge(lambda text: len(text) % 2 == 0))
    assert trainer.multi_objective_aggregation == "normalize_then_sum"
    assert "rewards/brevity/mean" in metrics(cfg)[0]
    with pytest.raises(ValueError, match="multi_objective_aggregation: variant gdpo needs"):
        make_config(setup, "gdpo", "x", multi_objective_aggregation="bogus")


def test_dler_caps_samples_dynamically_and_normalises_over_the_batch(setup):
    cfg = make_config(setup, "dler", "dler", max_steps=2, save_steps=10, dler_length_limit=6, dler_oversample=2.0)
    assert cfg.scale_rewards == "batch"
    trainer = train(cfg, RuleJudge(lambda text: len(text) % 2 == 0))
    rows = metrics(cfg)
    assert all(r["completions/max_length"] <= 6 for r in rows)  # the hard limit
    assert all(r["dler/oversample_factor"] == 2.0 and "dler/pass_rate" in r and "dler/truncated_share" in r for r in rows)
    assert len(trainer.pass_rates) == 2
    with pytest.raises(ValueError, match="dler_length_limit"):
        make_config(setup, "dler", "x", dler_length_limit=64)


# ---------------------------------------------------------------- budget-forced rollouts


def test_budget_forced_rollouts_cut_at_the_cap_and_leave_the_forced_tokens_out_of_the_loss(setup):
    from livethink.data.budget_forcing import ForcingTokens
    from livethink.data.reasoning_format import THINK

    student = opens_thinking(setup, "student-think")
    with pytest.raises(ValueError, match="budget_caps"):
        make_config(setup, "baseline", "bf-bad", budget_forcing=True, budget_caps="choice:40")  # > max_completion
    cfg = make_config(setup, "baseline", "bf", model_name_or_path=str(student), budget_forcing=True,
                      budget_caps="choice:3", budget_reply_reserve=3, max_completion_length=16, max_steps=2)
    trainer = train(cfg, RuleJudge(lambda text: len(text) % 2 == 0))
    tok = trainer.text_tokenizer
    tokens = ForcingTokens.of(tok, THINK, eos=trainer.eos_token_ids[0])
    # TRL's rollouts call model.generate(**inputs, generation_config=...): the cut rides along, one cap per row
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Is it waterproof?"}], tokenize=False,
                                                add_generation_prompt=True), add_special_tokens=False)
    ids = torch.tensor([prompt, prompt])  # one GRPO group of 2: one drawn cap
    trainer.budget_sampler.active = True
    out = trainer.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=14,
                                 do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    completion = out[0, len(prompt):].tolist()
    assert trainer.budget_sampler.last == [3, 3]
    n_end = len(tokens.forced_end)
    # "<think>\n" pre-filled = 1 thinking token: 2 more, the forced end, 3 reply tokens, EOS
    assert completion[2:2 + n_end] == list(tokens.forced_end), tok.decode(completion)
    assert completion[2 + n_end + 3] == tok.eos_token_id and len(completion) == 2 + n_end + 4
    assert trainer.budget_sampler.masks([prompt] * 2, [completion] * 2)[0] == [False] * 2 + [True] * n_end + [False] * 3 + [True]
    rows = metrics(cfg)
    assert any(r.get("budget/cut_share", 0) > 0 for r in rows) and any(r.get("budget/cap_mean") == 3 for r in rows)
