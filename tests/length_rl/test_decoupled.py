"""Rollout–train decoupling (``rollout_mode: decoupled``): config checks and the prefetcher's staleness bound (fast),
and in miniature with real processes (slow): a vLLM server process beside the stage-2 CLI, the next batch generated
while this one trains, staleness within its bound, TRL's importance-sampling correction applied, and a run killed
mid-way resuming from its checkpoint.

Slow: ``pytest -m slow tests/length_rl/test_decoupled.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from livethink.length_rl.config import GRPOVariantConfig
from livethink.length_rl.decoupled import (
    Lookahead,
    Request,
    RolloutPrefetcher,
    concat,
    truncate,
    window_optimizer_steps,
)

ROOT = Path(__file__).resolve().parents[2]
SERVER = dict(use_vllm=True, vllm_mode="server", vllm_server_base_url="http://127.0.0.1:1",
              vllm_importance_sampling_correction=True, rollout_mode="decoupled")


def _config(**overrides):
    base = dict(variant="band", output_dir="/tmp/unused", per_device_train_batch_size=4, num_generations=2,
                use_cpu=True, bf16=False, report_to="none") | SERVER
    return GRPOVariantConfig(**(base | overrides))


@pytest.mark.parametrize(("overrides", "field"), [
    ({"rollout_mode": "async"}, "rollout_mode"),
    ({"max_staleness": 0}, "max_staleness"),
    ({"vllm_mode": "colocate"}, "vllm_mode: server"),
    ({"vllm_importance_sampling_correction": False}, "vllm_importance_sampling_correction"),
    ({"budget_forcing": True, "max_completion_length": 256}, "budget_forcing"),
    ({"steps_per_generation": 4, "gradient_accumulation_steps": 1}, "max_staleness 1"),
])
def test_config_refuses_unsupported_decoupled_settings_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _config(**overrides)


def test_config_defaults_to_sync_and_accepts_a_decoupled_server_run():
    assert GRPOVariantConfig(output_dir="/tmp/unused", report_to="none", use_cpu=True, bf16=False).rollout_mode == "sync"
    assert _config(steps_per_generation=4, gradient_accumulation_steps=1, max_staleness=4).max_staleness == 4
    assert _config(tail_batching=True, max_completion_length=64).tail_batching  # both: tail rounds, prefetched
    assert window_optimizer_steps(4, 1, 1) == 4 and window_optimizer_steps(2, 1, 2) == 1


def test_lookahead_reads_ahead_without_changing_the_order():
    look = Lookahead(iter(range(10)))
    first = [next(look), next(look)]
    assert look.peek(5) == 5 and look.peek(20) is None
    assert first + list(look) == list(range(10))


def _fake_server(order: list[str]):
    """A generation function that records its calls and answers one 3-token completion per row."""
    def generate(request: Request):
        order.append("gen" + "".join(str(p[0]) for p in request.prompts) + f"@{request.cap}")
        rows = [[p[0]] * 3 for p in request.prompts for _ in range(request.n)]
        return [list(p) for p in request.prompts], rows, [[[-1.0]] * 3 for _ in rows], [[[t] for t in r] for r in rows]
    return generate


def test_prefetcher_serves_the_prefetch_within_the_bound_and_regenerates_over_it():
    order: list[str] = []
    pre = RolloutPrefetcher(max_staleness=1, generate=_fake_server(order))

    def req(first: int) -> Request:
        return Request(((first,),), 2, 3)

    pre.sync(0, lambda: order.append("reload0"))
    pre.launch(req(1))
    pre.sync(1, lambda: order.append("reload1"))
    taken = pre.take(req(1), version_now=1)
    assert (taken.staleness, taken.hit, taken.payload[1]) == (1, True, [[1, 1, 1]] * 2)
    pre.launch(req(2))  # generated with the weights of step 1 ...
    pre.sync(3, lambda: order.append("reload3"))
    taken = pre.take(req(2), version_now=3)  # ... trained at 3: over the bound, regenerated with step 3's
    assert (taken.staleness, taken.hit) == (0, False)
    assert order == ["reload0", "gen1@3", "reload1", "gen2@3", "reload3", "gen2@3"]  # queue order
    pre.launch(req(4))
    with pytest.raises(AssertionError, match="above max_staleness"):  # trained at 5, the server never got 4 or 5
        pre.take(req(5), version_now=5)
    pre.close()


def test_prefetch_serves_a_smaller_cap_and_a_top_up_of_extra_prompts():
    order: list[str] = []
    pre = RolloutPrefetcher(max_staleness=1, generate=_fake_server(order))
    pre.launch(Request(((7,),), 2, 3))
    pre.sync(1, lambda: None)
    taken = pre.take(Request(((7,), (8,)), 2, 2), version_now=1)  # cap 2 < 3: cut; prompt 8: generated now
    assert taken.hit and taken.staleness == 1
    assert taken.payload[0] == [[7], [8]] and taken.payload[1] == [[7, 7]] * 2 + [[8, 8, 8]] * 2
    assert order == ["gen7@3", "gen8@2"]
    pre.launch(Request(((9,),), 2, 2))
    assert not pre.take(Request(((9,),), 2, 3), version_now=1).hit  # a larger cap: generated now
    assert pre.pending is not None  # ... and the prefetch stays claimable
    assert truncate(([[1]], [[1, 2, 3]], None, None), 1) == ([[1]], [[1]], None, None)
    assert concat(([[1]], [[1]], None, None), ([[2]], [[2]], None, None)) == ([[1], [2]], [[1], [2]], None, None)
    pre.close()


def _grpo_command(model_dir: Path, data_dir: Path, out: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "livethink.length_rl.cli", "--variant", "length_penalty", "--model_name_or_path", str(model_dir),
            "--data_dir", str(data_dir), "--output_dir", str(out), "--n_prompts", "24", "--max_steps", "6",
            "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "16",
            "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--logging_steps", "1",
            "--save_strategy", "steps", "--save_steps", "2", "--learning_rate", "0.05", "--l_ref", "8",
            "--trainable_parameters", "lm_head", "--use_vllm", "true", "--vllm_mode", "server",
            "--vllm_server_base_url", url, "--vllm_importance_sampling_correction", "true",
            "--rollout_mode", "decoupled", "--max_staleness", "1", "--seed", "0"]


@pytest.mark.slow
@pytest.mark.vllm
def test_decoupled_rollouts_on_a_vllm_server_stay_within_the_bound_and_resume(vllm_moe_student, tmp_path):
    from livethink.server_process import ServerProcess, free_port

    root, model_dir = vllm_moe_student
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_SERVER_DEV_MODE="1",
               PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    port = free_port()
    server = ServerProcess([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                            "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--max-model-len",
                            "512", "--enforce-eager", "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"],
                           port=port, log_path=tmp_path / "vllm.log", ready_path="/health", env=env, name="vLLM",
                           startup_timeout_s=240)
    out = tmp_path / "run"
    command = _grpo_command(model_dir, root / "data", out, server.url)
    try:
        log = (tmp_path / "first.log").open("w")
        first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while not (out / "checkpoint-2" / "trainer_state.json").is_file() and first.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint-2 in time"
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)  # killed mid-way: no final/, the newest checkpoint is where it resumes
        first.wait()
        assert first.returncode == -signal.SIGKILL, (tmp_path / "first.log").read_text()[-3000:]
        assert not (out / "final").exists()
        second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    finally:
        server.close()
    summary = json.loads((out / "grpo_summary.json").read_text())
    assert summary["global_step"] == 6 and summary["resumed_from"] and "checkpoint-" in summary["resumed_from"]
    history = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    steps = [h for h in history if "decoupled/staleness" in h]
    assert [h["step"] for h in steps] == [1, 2, 3, 4, 5, 6]  # one batch per logged step (logging_steps 1)
    assert all(h["decoupled/staleness"] <= 1 for h in steps)  # the bound held for every batch
    assert any(h["decoupled/hit"] > 0 for h in steps)  # batches were generated while the previous one trained
    resumed_at = int(summary["resumed_from"].rsplit("-", 1)[1])
    assert resumed_at < 6 and steps[resumed_at]["decoupled/hit"] == 0  # the resumed run's first batch: on demand
    assert any(h["decoupled/staleness"] == 1 for h in steps)
    assert any(h["grad_norm"] > 0 for h in steps)  # the policy moved, so a prefetched batch was really off-policy
    assert all(0.0 <= h["decoupled/idle_share"] <= 1.0 for h in steps)
    # TRL's importance-sampling ratios were computed for every batch, and they carry the staleness: wider on the
    # prefetched (one step old) batches than on the ones generated on demand with the current weights
    spread = [(h["decoupled/hit"], h["sampling/importance_sampling_ratio/max"] - h["sampling/importance_sampling_ratio/min"])
              for h in steps]
    assert max(s for hit, s in spread if hit) > max(s for hit, s in spread if not hit), spread
    assert (out / "final" / "config.json").is_file()
