"""The GPU real-model recipe's report (benchmarks/gpu_smollm2_report.py) from hand-made run files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gpu_smollm2_report", Path(__file__).resolve().parents[2] / "benchmarks/gpu_smollm2_report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _eval(root: Path, folder: str, name: str, correct: float, at_cap: list[float], floor: int) -> None:
    result = {"name": name, "overall": {"n": 200, "correctness": correct, "helpfulness": 0.2, "total_tokens": 150.0,
                                        "reasoning_tokens": 120.0, "truncated_rate": 0.0},
              "latency": {"e2e_ms_p50": 900.0},
              "thinking_curve": {"caps": [0, 64, 128], "correct": at_cap, "min_thinking_tokens": floor}}
    (root / folder).mkdir(parents=True)
    (root / folder / "eval.json").write_text(json.dumps({"meta": {"command": f"livethink eval {name}"},
                                                         "results": [result]}))


def test_report_tables_come_from_the_run_files(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "results"
    (runs / "logs").mkdir(parents=True)
    (runs / "times.jsonl").write_text(json.dumps({"stage": "rft", "wall_s": 61.5, "rc": 0, "command": "livethink rft"}) + "\n")
    (runs / "load_before.json").write_text(json.dumps({"load": [0.1, 0.2, 0.3]}))
    (runs / "rft").mkdir()
    (runs / "rft/rft_summary.json").write_text(json.dumps(
        {"timings": {"sft_s": 40.0}, "acceptance": {"acceptance_rate": 0.672, "selected": 3300}}))
    (runs / "logs/rft.log").write_text("{'loss': '2.5'}\n{'loss': '0.75'}\n{'train_runtime': '38.2', "
                                       "'train_steps_per_second': '6.5'}\n")
    (runs / "grpo_drpo_budget64").mkdir()
    (runs / "grpo_drpo_budget64/grpo_summary.json").write_text(json.dumps(
        {"global_step": 2, "train_runtime_s": 20.0, "wall_s": 31.0}))
    (runs / "grpo_drpo_budget64/metrics.jsonl").write_text(
        "\n".join(json.dumps({"completions/mean_length": n, "accuracy": a, "reward": 0.1, "step_time": 20.5})
                  for n, a in ((140, 0.25), (120, 0.5))))
    _eval(runs, "eval_rft", "rft", 0.30, [0.05, 0.10, 0.28], 128)
    _eval(runs, "eval_budget64", "budget64", 0.29, [0.10, 0.27, 0.29], 64)
    out.mkdir()
    (out / "serve_load_gpu_smollm2.json").write_text(json.dumps({
        "command": "python benchmarks/serve_load.py --tag gpu_smollm2", "environment": {"cpus": 16},
        "deployment": {"controller": {"rft": {"capacity": 1, "observations": 28, "estimated_tpot_ms": 49.5,
                                              "estimated_tpot_hi_ms": 81.5}},
                       "engines": {"rft": {"decode": "cuda_graph"}}},
        "deadline_sweep": {"load_rate": 2.0, "rows": [
            {"server": "livethink", "model": "budget64", "load": "unloaded", "deadline_ms": 1000, "sent": 8, "good": 2,
             "goodput": 0.25, "goodput_ci95": [0.07, 0.59], "fallback": 1, "refused": 0, "late": 0,
             "client_ms": {"p50": 700.0, "p95": 950.0}},
            {"server": "vllm", "model": "rft", "load": "unloaded", "deadline_ms": 1000, "sent": 8, "good": 0,
             "goodput": 0.0, "goodput_ci95": [0.0, 0.3], "fallback": 0, "refused": 0, "late": 8,
             "client_ms": {"p50": 1700.0, "p95": 1950.0}}]}}))
    (out / "decode_speed_gpu_smollm2.json").write_text(json.dumps({
        "command": "python benchmarks/decode_speed.py --tag gpu_smollm2", "tokens": 64, "reps": 3, "modes": [
            {"mode": "eager", "decode": "eager", "ms_per_token_p50": 45.1, "ms_per_token_min": 44.0,
             "ms_per_token_max": 47.2},
            {"mode": "cuda_graph", "decode": "cuda_graph", "ms_per_token_p50": 2.5, "ms_per_token_min": 2.4,
             "ms_per_token_max": 2.7}]}))

    assert report.main(["--runs", str(runs), "--out", str(out)]) == 0
    md = (out / "gpu_smollm2.md").read_text()
    assert "accepted (C ∧ H): 67.2%, 3300 SFT targets" in md
    assert "38.2 s, 6.5 steps/s; 2 logged losses, all finite: True (first 2.5, last 0.75)" in md
    assert "rollout mean length per step (tokens): 140, 120" in md
    assert "- 2 steps, 20.0 s of training (31.0 s with loading)" in md and "seconds per step: 20.5, 20.5" in md
    assert ("Engine `rft` as its controller measured it: capacity 1, 49.5 ms per token (tail 81.5 ms) after 28 "
            "observations; decoding: cuda_graph." in md)
    assert "| eager | eager | 45.1 [44.0, 47.2] |" in md and "| cuda_graph | cuda_graph | 2.5 [2.4, 2.7] |" in md
    assert "| rft | 200 | 5.0 | 10.0 | 28.0 | 30.0 | 20.0 | 150.0 | 128 | 900.0 |" in md
    assert "| budget64 | 200 | 10.0 | 27.0 | 29.0 | 29.0 | 20.0 | 150.0 | 64 | 900.0 |" in md
    assert "| budget64 | unloaded | 1000 | 8 | 25.0 [7.0, 59.0] | 1 | 0 | 0 | 700.0 / 950.0 |" in md
    assert "| rft | unloaded | 1000 | 8 | 0.0" not in md  # plain vLLM rows are not the server's
    data = json.loads((out / "gpu_smollm2.json").read_text())
    assert data["load_before"] == [0.1, 0.2, 0.3] and data["curves"]["budget64"]["floor"] == 64
    assert (out / "gpu_smollm2.png").stat().st_size > 0


def test_a_stage_2_stopped_before_its_checkpoint_is_reported_as_such(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "results"
    (runs / "grpo_drpo_budget64").mkdir(parents=True)
    (runs / "grpo_drpo_budget64/metrics.jsonl").write_text(
        "\n".join(json.dumps({"completions/mean_length": n, "accuracy": 0.1, "step_time": t})
                  for n, t in ((164, 20.2), (174, 21.0), (209, 20.9))))

    assert report.main(["--runs", str(runs), "--out", str(out)]) == 0
    md = (out / "gpu_smollm2.md").read_text()
    assert "stopped at its time limit after 3 logged steps, before a checkpoint was saved" in md
    assert "seconds per step: 20.2, 21.0, 20.9" in md and "rollout mean length per step (tokens): 164, 174, 209" in md
    assert json.loads((out / "gpu_smollm2.json").read_text())["stage2"]["finished"] is False
