"""The rollout benchmark (benchmarks/rollouts*.py): its records, analysis and report on hand-made metrics, the
engine timer, and a miniature end-to-end run (sync and tail, 2 steps, 1 seed, 4 test tasks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their helpers by name
import rollouts as bench  # noqa: E402
import rollouts_report as report  # noqa: E402
import rollouts_runs as runs  # noqa: E402

from livethink.length_rl.rollout_timing import EngineTimer  # noqa: E402


def steps(mode: str, n: int = 4, loop: float = 40.0, busy: float = 30.0, **extra) -> list[dict]:
    rows = [{"step": i + 1, "completions/mean_length": 100.0 + 10 * i, "elapsed_s": loop * (i + 1) / n,
             "rollout/engine_busy_s": busy * (i + 1) / n, **extra} for i in range(n)]
    return rows


def test_run_record_derives_idle_shares_per_mode():
    sync = runs.run_record("sync", 0, 50.0, steps("sync"), 32)
    # colocated: the trainer idles exactly while the engine generates (30 of 40 s)
    assert sync["engine_idle_share"] == 0.25 and sync["trainer_idle_share"] == 0.75
    assert sync["completions"] == 128 and sync["completions_per_s"] == 3.2 and sync["staleness_ok"]
    dec = runs.run_record("decoupled", 0, 60.0, steps("decoupled", busy=36.0, **{"decoupled/wait_s": 2.0,
                                                                                   "decoupled/staleness": 1,
                                                                                   "decoupled/hit": 1.0}), 32)
    # the server generates 36 of 40 s (idle 10%); the trainer waited 4 × 2 s on it (20%)
    assert dec["engine_idle_share"] == 0.1 and dec["trainer_idle_share"] == 0.2
    assert dec["staleness_max"] == 1 and dec["staleness_bound"] == 1 and dec["staleness_ok"]
    assert dec["decoupled"] == {"prefetch_hits": 4, "trainer_wait_s": 8.0}
    over = runs.run_record("decoupled", 0, 60.0, steps("decoupled", **{"decoupled/staleness": 2}), 32)
    assert not over["staleness_ok"]
    rows = steps("tail")
    for r, long, deferred in zip(rows, (0, 0, 1, 0), (2, 1, 0, 0), strict=True):
        r.update({"tail/long_round": long, "tail/deferred": deferred, "tail/staleness_max": 2 * long})
        r["tail/kept_length_mean" if not long else "tail/long_length_mean"] = 300.0 if long else 80.0
    tail = runs.run_record("tail", 1, 45.0, rows, 32)["tail"]
    assert tail["deferred_prompts"] == 3 and tail["long_rounds"] == 1 and tail["queue_wait_max"] == 2
    assert tail["kept_lengths"] == [80.0, 80.0, 80.0] and tail["deferred_lengths"] == [300.0]
    with pytest.raises(ValueError, match="no metrics"):
        runs.run_record("sync", 0, 1.0, [], 32)


def record(mode, seed, wall, tokens, c, h, loop=None, staleness=0):
    return {"mode": mode, "seed": seed, "train_wall_s": wall, "loop_s": loop or wall - 10, "completions_per_s": 1.0,
            "engine_idle_share": 0.5, "trainer_idle_share": 0.5, "tokens": tokens, "correctness": c,
            "helpfulness": h, "staleness_max": staleness, "staleness_bound": runs.staleness_bound(mode),
            "staleness_ok": staleness <= runs.staleness_bound(mode), "step_lengths": [100.0, 120.0], "eval_tasks": 200}


def test_aggregate_speedup_and_quality_against_syncs_interval():
    records = [record("sync", 0, 100.0, 80.0, 0.40, 0.30), record("sync", 1, 110.0, 70.0, 0.38, 0.31),
               record("sync", 2, 120.0, 90.0, 0.36, 0.32),
               record("decoupled", 0, 60.0, 85.0, 0.39, 0.30, staleness=1),
               record("decoupled", 1, 50.0, 80.0, 0.37, 0.31, staleness=1),
               record("decoupled", 2, 55.0, 75.0, 0.20, 0.31, staleness=1)]
    out = report.analyse(records)
    sync, dec = out["summary"]
    # sync tokens 80, 70, 90: their range; correctness 80 + 76 + 72 of 600 tasks × seeds: Clopper–Pearson
    from scipy.stats import beta

    assert sync["train_wall_s"] == 110.0 and sync["ci"]["tokens"] == [70.0, 90.0]
    assert sync["ci"]["correctness"] == [round(beta.ppf(0.025, 228, 373), 4), round(beta.ppf(0.975, 229, 372), 4)]
    assert dec["speedup"] == 2.0 and sync["speedup"] == 1.0  # 110 / 55
    assert dec["correctness"] == 0.32  # (.39 + .37 + .20) / 3: below sync's interval
    assert dec["inside_sync_ci"] == {"tokens": True, "correctness": False, "helpfulness": True}
    assert dec["staleness_max"] == 1 and out["staleness_ok"] and out["best_mode"] == "decoupled"
    assert dec["lengths"] == {"n": 6, "mean": 110.0, "p10": 100.0, "p50": 110.0, "p90": 120.0}
    one_seed = report.analyse([record("sync", 0, 100.0, 80.0, 0.4, 0.3), record("tail", 0, 80.0, 82.0, 0.4, 0.3)])
    # one seed: no range of tokens, but C and H are shares of the tasks, with their Clopper–Pearson interval
    assert one_seed["summary"][1]["inside_sync_ci"] == {"tokens": None, "correctness": True, "helpfulness": True}
    assert one_seed["summary"][1]["speedup"] == 1.25


def test_markdown_reports_every_mode_and_the_unsupported_one(tmp_path):
    records = [record("sync", 0, 100.0, 80.0, 0.4, 0.3), record("tail", 0, 80.0, 82.0, 0.4, 0.3)]
    records[1]["tail"] = {"deferred_prompts": 3, "long_rounds": 1, "kept_lengths": [80.0], "deferred_lengths": [300.0],
                          "queue_wait_max": 2}
    meta = {"command": "python benchmarks/rollouts.py", "machine": "x", "threads": 1, "date": "d",
            "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": [2.0, 1.0, 1.0], "wall_min": 3.0,
            "config": "configs/tiny/grpo_band.yaml", "rft": "runs/tiny/rft/final", "steps": 2, "prompts_per_step": 2,
            "generations": 2, "max_completion_length": 32, "seeds": [0], "max_staleness": 1, "eval_tasks": 4,
            "eval_max_tokens": 64, "idle_note": bench.IDLE_NOTE, "out": str(tmp_path / "rollouts")}
    assert runs.unsupported("both", "configs/tiny/grpo_band.yaml") is None  # tail batching composes with it
    assert runs.unsupported("decoupled", "configs/tiny/grpo_band.yaml") is None
    why = "rollout_mode: decoupled does not support calculator: true"  # how a config error is reported
    full = {"tiny": {"records": records, **report.analyse(records)}, "unsupported": {"both": why},
            "staleness_ok": True, "meta": meta}
    text = report.markdown(full)
    assert f"| both | not supported: {why} |" in text
    assert "| tail | 1.3 [" not in text and "| tail | 1.3 |" in text and "1.25×" in text
    assert "deferred, in their long rounds: 300.0" in text and "load average" in text
    report.plot(full, tmp_path / "rollouts.png")
    assert (tmp_path / "rollouts.png").stat().st_size > 0


def test_merge_pools_seeds_of_one_setting_and_pairs_speedups_by_seed(tmp_path):
    def invocation(seed, sync_wall, tail_wall, **meta):
        records = [record("sync", seed, sync_wall, 80.0, 0.4, 0.3), record("tail", seed, tail_wall, 82.0, 0.4, 0.3)]
        base = {"command": f"rollouts --seeds {seed}", "machine": f"gpu{seed}", "date": "d", "seeds": [seed],
                "loadavg_before": [0.1] * 3, "loadavg_after": [1.0] * 3, "wall_min": 4.0, "modes": ["sync", "tail"],
                "config": "c", "steps": 12, "prompts_per_step": 8, "generations": 4, "max_completion_length": 384,
                "tail_short_tokens": 320, "max_staleness": 1, "device": "cuda", "rollout_engine": "transformers",
                "eval_tasks": 100, "eval_max_tokens": 768, "calculator": False, "threads": 1, "rft": "r",
                "idle_note": bench.IDLE_NOTE, "out": "o"}
        return {"tiny": {"records": records}, "unsupported": {}, "failed_runs": [], "meta": {**base, **meta}}

    merged = report.merge([invocation(1, 120.0, 100.0), invocation(0, 90.0, 100.0)], "rollouts --merge", "out")
    assert [(r["mode"], r["seed"]) for r in merged["tiny"]["records"]] == [("sync", 0), ("tail", 0), ("sync", 1),
                                                                           ("tail", 1)]
    sync, tail = merged["tiny"]["summary"]
    assert sync["train_wall_s"] == 105.0 and tail["train_wall_s"] == 100.0 and tail["speedup"] == 1.05
    assert tail["speedup_by_seed"] == {0: 0.9, 1: 1.2}  # 90 / 100 on one machine, 120 / 100 on the other
    m = merged["meta"]
    assert m["seeds"] == [0, 1] and m["machine"] == "gpu1; gpu0" and m["wall_min"] == 8.0 and len(m["sources"]) == 2
    text = report.markdown(merged)
    assert "`rollouts --seeds 1`" in text and "`rollouts --seeds 0`" in text
    assert "tail 0.90× (seed 0), 1.20× (seed 1)" in text
    with pytest.raises(ValueError, match="steps differs"):
        report.merge([invocation(0, 90.0, 100.0), invocation(1, 90.0, 100.0, steps=24)], "m", "o")
    with pytest.raises(ValueError, match="sync seed 0 is in two reports"):
        report.merge([invocation(0, 90.0, 100.0), invocation(0, 90.0, 100.0)], "m", "o")
    # the command line: a bad file is named, no traceback
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert bench.main(["--merge", str(bad), str(bad), "--out", str(tmp_path / "m")]) == 2


def test_arguments_and_engine_timer():
    args = bench.parse([])
    assert args.modes == list(runs.MODES) and args.seeds == [0, 1, 2] and args.steps == 96
    assert args.out == "benchmarks/results/rollouts" and not args.reuse
    assert bench.parse(["--seeds", "0 1", "--modes", "sync,tail"]).seeds == [0, 1]
    assert bench.parse(["--smoke"]).steps == 2
    with pytest.raises(SystemExit):
        bench.parse(["--modes", "sync,turbo"])
    timer = EngineTimer()
    slow = timer.wrap(lambda s: time.sleep(s))
    threads = [threading.Thread(target=slow, args=(0.05,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0.15 <= timer.busy_s < 1.0


@pytest.mark.slow
@pytest.mark.vllm
def test_smoke_run_of_both_modes_together(vllm_moe_student, tmp_path):
    """The benchmark end to end in miniature (train, evaluate, report) on ``both``: tail batching's rounds generated
    on the rollout server while the previous step trains, the mode with the most plumbing (sync, tail and decoupled
    are its parts; the report math is pinned above)."""
    root, model_dir = vllm_moe_student
    out = tmp_path / "rollouts"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/rollouts.py"), "--smoke", "--modes", "both",
                           "--seeds", "0", "--rft", str(model_dir), "--data-dir", str(root / "data"),
                           "--runs-dir", str(tmp_path / "runs"), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(out.with_suffix(".json").read_text())
    (both,) = result["tiny"]["records"]
    assert both["steps"] == 2 and both["eval_tasks"] == 4 and both["staleness_max"] <= 1 and both["staleness_ok"]
    assert both["engine_busy_s"] > 0 and 0 <= both["engine_idle_share"] < 1 and 0 <= both["trainer_idle_share"] <= 1
    assert both["tail"]["long_rounds"] + len(both["tail"]["kept_lengths"]) >= 1
    assert both["decoupled"]["prefetch_hits"] >= 1  # the second step's round came from the prefetch
    assert out.with_suffix(".md").is_file() and out.with_suffix(".png").stat().st_size > 0
