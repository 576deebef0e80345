"""CUDA checks: a short SFT and a 2-step GRPO of a tiny Qwen3-MoE student on the GPU in bf16, budget-forced and
tail-batched rollouts there, eval generation and the serving engine on the GPU, and the stage-2 math returning
tensors on its inputs' device.

Skipped where torch sees no CUDA device (CI is CPU-only). On a GPU machine: ``python -m pytest -q tests/models/test_cuda.py``
(``benchmarks/gpu_check.sh`` runs it too).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.support.students import RuleJudge, grpo_setup, opens_thinking

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: torch.cuda.is_available() is False (CI is CPU-only)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, liveshop_small):
    return grpo_setup(tmp_path_factory.mktemp("cuda"), liveshop_small)


def _on_cuda(model) -> bool:
    return all(p.device.type == "cuda" for p in model.parameters())


def test_sft_bf16_on_cuda(tiny, liveshop_small):
    """Stage-1 trainer (Muon + grounded-token loss + MoE aux loss) on the GPU under bf16: finite losses."""
    from livethink.models.student import create_student
    from livethink.rft_distill.acceptance import JudgedSample
    from livethink.rft_distill.config import RFTConfig
    from livethink.rft_distill.sft import sft_dataset, train_sft
    from livethink.rft_distill.teachers.base import SamplingConfig
    from livethink.rft_distill.teachers.scripted import ScriptedTeacher

    tasks = liveshop_small.tasks["train"][:16]
    teacher = ScriptedTeacher(error_rate=0.0)
    selected = [JudgedSample(t.id, 0, teacher.sample(t, 0, SamplingConfig(temperature=0.0)).completion, True, True)
                for t in tasks]
    args = RFTConfig(output_dir=str(tiny["root"] / "sft"), use_cpu=False, bf16=True, max_steps=4,
                     per_device_train_batch_size=4, learning_rate=4e-3, muon=True, grounded_token_weight=4.0,
                     max_length=1024, router_aux_loss_coef=0.01, lr_scheduler_type="warmup_stable_decay",
                     lr_scheduler_kwargs={"num_decay_steps": 0.25, "decay_type": "linear"}, warmup_steps=0.05,
                     logging_steps=1, save_strategy="no", report_to="none", dataloader_num_workers=0, seed=0)
    model = create_student(tiny["config"], tiny["tokenizer"])
    trainer = train_sft(model, tiny["tokenizer"], sft_dataset(selected, {t.id: t for t in tasks}), args)
    assert trainer.args.bf16 and trainer.accelerator.device.type == "cuda"
    assert _on_cuda(trainer.model)
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses), losses
    assert trainer.state.global_step == 4


@pytest.mark.parametrize("variant", ["drpo", "dot"])
def test_grpo_bf16_on_cuda(tiny, variant):
    """Stage 2, two real GRPO steps on the GPU under bf16 with calculator-assisted transformers rollouts."""
    from livethink.length_rl.config import GRPOVariantConfig
    from livethink.length_rl.rewards import RewardContext, make_reward_funcs
    from livethink.length_rl.script import build_dataset
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    extra = {"dot_alpha": 0.0, "dot_margin": 1} if variant == "dot" else {}
    cfg = GRPOVariantConfig(
        variant=variant, model_name_or_path=str(tiny["student"]), data_dir=str(tiny["data"]),
        output_dir=str(tiny["root"] / f"grpo_{variant}"), n_prompts=16, max_steps=2, per_device_train_batch_size=8,
        num_generations=4, max_completion_length=12, learning_rate=1e-3, use_cpu=False, bf16=True, use_vllm=False,
        calculator=True, gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to="none",
        seed=0, l_ref=8.0, dataloader_num_workers=0, temperature=1.0, **extra)
    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    tokenizer.padding_side = "left"
    ctx = RewardContext(l_ref=cfg.l_ref, zero_reward_if_cut=cfg.zero_reward_if_cut)
    # drpo: mixed groups (odd/even text length); dot: every finished reply correct, so all-correct groups get cut
    rule = (lambda text: len(text) % 2 == 0) if variant == "drpo" else (lambda text: True)
    funcs = make_reward_funcs(cfg.spec.rewards, ctx, RuleJudge(rule))
    trainer = LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=funcs, args=cfg,
                              train_dataset=build_dataset(cfg), processing_class=tokenizer, reward_context=ctx)
    trainer.train()
    assert trainer.accelerator.device.type == "cuda" and _on_cuda(trainer.model)
    rows = [json.loads(line) for line in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["loss"] is not None and math.isfinite(row["loss"]), row
        assert row["completions/mean_length"] > 0
        assert "calculator/forced_share" in row
    if variant == "drpo":
        assert all(math.isfinite(r["kl"]) and math.isfinite(r["drpo/objective"]) for r in rows)
    else:
        assert all("dot/truncated_share" in r for r in rows)


def test_grpo_budget_forced_tail_batched_rollouts_on_cuda(tiny):
    """Stage 2's rollout options on the GPU: budget-forced transformers rollouts (the cut, the forced end out of the
    loss) under tail batching (short rounds defer, a long round brings the tail back), bf16, with the generation timed
    (``rollout/engine_busy_s``)."""
    from livethink.length_rl.config import GRPOVariantConfig
    from livethink.length_rl.rewards import RewardContext, make_reward_funcs
    from livethink.length_rl.script import build_dataset
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    student = opens_thinking(tiny, "student-think")
    cfg = GRPOVariantConfig(
        variant="band", model_name_or_path=str(student), data_dir=str(tiny["data"]),
        output_dir=str(tiny["root"] / "grpo_band_bf_tail"), n_prompts=16, max_steps=4, per_device_train_batch_size=4,
        num_generations=2, max_completion_length=16, learning_rate=1e-3, use_cpu=False, bf16=True, use_vllm=False,
        gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to="none", seed=0, l_ref=8.0,
        dataloader_num_workers=0, temperature=1.0, budget_forcing=True, budget_caps="choice:2",
        budget_reply_reserve=2, tail_batching=True, tail_short_tokens=5, tail_overprovision=3.0)
    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    tokenizer.padding_side = "left"
    ctx = RewardContext(l_ref=cfg.l_ref, zero_reward_if_cut=cfg.zero_reward_if_cut)
    funcs = make_reward_funcs(cfg.spec.rewards, ctx, RuleJudge(lambda text: len(text) % 2 == 0),
                              **cfg.spec.reward_options())
    trainer = LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=funcs, args=cfg,
                              train_dataset=build_dataset(cfg), processing_class=tokenizer, reward_context=ctx)
    trainer.train()
    assert trainer.accelerator.device.type == "cuda" and _on_cuda(trainer.model)
    rows = [json.loads(line) for line in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["loss"] is not None and math.isfinite(r["loss"]) for r in rows), rows
    assert any(r.get("budget/cut_share", 0) > 0 for r in rows) and all(r.get("budget/cap_mean") == 2 for r in rows)
    assert any(r["tail/deferred"] > 0 for r in rows) and any(r["tail/long_round"] == 1 for r in rows)
    assert rows[-1]["rollout/engine_busy_s"] > 0


def test_eval_generator_on_cuda(tiny, liveshop_small):
    """The eval harness's transformers engine runs on the accelerator (``--device auto``), in bf16 if asked."""
    from livethink.eval.generation import TransformersGenerator
    from livethink.models.loading import resolve_device

    assert resolve_device("auto") == "cuda"
    tasks = liveshop_small.tasks["test"][:3]
    for dtype in ("float32", "bfloat16"):
        generator = TransformersGenerator(tiny["student"], batch_size=3, calculator=True, dtype=dtype)
        assert generator.device.type == "cuda" and _on_cuda(generator.model)
        assert generator.model.dtype == getattr(torch, dtype)
        generations = generator.generate(tasks, max_tokens=6)
        assert [g.task_id for g in generations] == [t.id for t in tasks]
        probes = generator.probe_latency(tasks[:1], max_tokens=3)
        assert probes[0].e2e_s > 0


def test_stage2_math_keeps_the_input_device():
    """The pure tensor functions of length_rl return tensors on their inputs' device (here CUDA)."""
    from livethink.length_rl import advantages, dot, drpo, length_rewards

    dev = torch.device("cuda")
    lengths = torch.tensor([10, 40, 12, 30], device=dev)
    assert length_rewards.band(lengths, 40.0).device.type == "cuda"
    assert length_rewards.linear(lengths, 64).device.type == "cuda"
    assert dot.truncation_thresholds(lengths, 1).device.type == "cuda"
    assert advantages.group_stats(lengths.float(), 1)[1].device.type == "cuda"
    assert dot.truncated_lengths(lengths, torch.ones(4, device=dev), 2, 0.0, 1).device.type == "cuda"
    mask = dot.truncation_mask(torch.ones(4, 50, device=dev, dtype=torch.long), lengths)
    assert mask.device.type == "cuda" and mask.dtype == torch.long
    weights = drpo.positive_weights(lengths, torch.tensor([True, False, True, True], device=dev), 2, 64)
    for positive in ([True, False, True, True], [True, True, False, False]):  # mixed groups, then none
        entropy = drpo.weight_entropy(weights, torch.tensor(positive, device=dev), 2)
        assert entropy.device.type == "cuda"
    logps = torch.randn(4, 50, device=dev, dtype=torch.bfloat16, requires_grad=True)
    out = drpo.drpo_loss(logps, logps.detach(), mask, torch.tensor([True, False, True, False], device=dev), 2, 64)
    out.loss.backward()
    assert out.loss.device.type == "cuda" and torch.isfinite(out.loss) and torch.isfinite(logps.grad).all()
    assert out.weight_entropy.device.type == "cuda"


def test_serve_transformers_engine_on_cuda(tiny):
    """The serving fallback engine (``engine.transformers_device: auto``) loads the student on the GPU and decodes a
    budgeted reply there (bf16), the token sampled on the host each step."""
    import asyncio

    from livethink.serve.budget.plan import TokenBudget
    from livethink.serve.config import parse_config
    from livethink.serve.engines import build_engines
    from livethink.serve.engines.base import GenerationRequest, SamplingOptions

    config = parse_config({"models": {"rft": {"path": str(tiny["student"])}}, "default_model": "rft",
                           "engine": {"kind": "transformers", "transformers_dtype": "bfloat16", "warmup": False},
                           "auth": {"api_key_env": None, "admin_key_env": None}})
    engine = build_engines(config).engines["rft"]
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        assert engine.device == "cuda" and _on_cuda(engine.model)
        prompt = engine.tokenizer.encode("How much is it?", add_special_tokens=False)
        request = GenerationRequest("cuda-1", "rft", prompt, SamplingOptions(temperature=0.7, ignore_eos=True, seed=1))

        async def collect():
            return [d async for d in engine.generate(request, TokenBudget(thinking_cap=4, reply_reserve=4))]

        deltas = loop.run_until_complete(collect())
        assert sum(d.tokens for d in deltas) > 4 and deltas[-1].finish_reason == "length"
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()


def test_cuda_graph_decode_matches_the_eager_loop():
    """The decode step captured as a CUDA graph (``engine.enforce_eager: false``) gives the eager loop's greedy tokens
    on a dense Llama (float32), and a forced multi-token feed steps through the graph."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from livethink.serve.engines.decoders import DynamicDecoder, GraphDecoder

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = LlamaForCausalLM(config).to("cuda").eval()
    graph = GraphDecoder(model, 128, capture=True)
    assert graph.captured

    def greedy(decoder):
        out, pending = [], list(range(3, 20))
        with torch.inference_mode():
            for i in range(32):
                out.append(int(decoder.feed(pending).argmax()))
                pending = [out[-1]] + ([7, 8, 9] if i == 5 else [])
        return out

    eager = greedy(DynamicDecoder(model, "cuda"))
    assert greedy(graph.begin()) == eager
    assert greedy(graph.begin()) == eager  # the next sequence starts from an empty cache


def test_serve_transformers_engine_replays_a_cuda_graph(tiny):
    """The serving engine with ``cuda_graph`` captures the tiny student's decode step (bf16) and replies with the same
    tokens, budget forcing included, as the same static-cache step run eagerly."""
    import asyncio

    from livethink.serve.budget.plan import TokenBudget
    from livethink.serve.engines.base import GenerationRequest, SamplingOptions
    from livethink.serve.engines.decoders import GraphDecoder
    from livethink.serve.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine("rft", tiny["student"], dtype="bfloat16", cuda_graph=True, max_len=256)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        assert engine.stats().extra["decode"] == "cuda_graph", engine.stats().extra
        prompt = engine.tokenizer.encode("How much is it?", add_special_tokens=False)

        def reply(rid):
            request = GenerationRequest(rid, "rft", prompt, SamplingOptions(temperature=0.0, ignore_eos=True))

            async def collect():
                return [d async for d in engine.generate(request, TokenBudget(thinking_cap=12, reply_reserve=8))]

            return [(d.text, d.token_ids) for d in loop.run_until_complete(collect())]

        replayed = reply("graph")
        engine._graph = GraphDecoder(engine.model, 256, capture=False)
        assert reply("eager") == replayed and sum(len(ids) for _, ids in replayed) > 12
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()
