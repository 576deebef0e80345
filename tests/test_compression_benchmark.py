"""The compression benchmark's pure analysis (benchmarks/compression.py) on hand-computed rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("compression_bench", Path(__file__).resolve().parents[1] / "benchmarks/compression.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

RFT = {"name": "rft", "kind": "rft", "tokens": 200.0, "correctness": 0.40, "helpfulness": 0.30}


def row(name, tokens, c, h, variant=None, kind="variant"):
    return {"name": name, "kind": kind, "variant": variant or name.split("@")[0], "tokens": tokens,
            "correctness": c, "helpfulness": h}


def test_compare_and_pick_best():
    rows = [row("a", 80.0, 0.385, 0.30), row("b", 60.0, 0.37, 0.35), row("c", 150.0, 0.41, 0.31)]
    bench.compare(rows, RFT)
    assert [r["token_reduction"] for r in rows] == [0.6, 0.7, 0.25]
    assert [r["d_correctness_pts"] for r in rows] == [-1.5, -3.0, 1.0]
    assert [r["meets_target"] for r in rows] == [True, False, False]  # b loses 3 points; c compresses 25%
    assert bench.pick_best(rows)["name"] == "a"
    assert bench.pick_best(rows[1:])["name"] == "c"  # none meets it: the most compressed that keeps quality
    assert bench.pick_best(rows[1:2])["name"] == "b"  # none keeps quality: the most compressed


def test_pareto_front():
    assert bench.pareto_front([(100, 40), (120, 35), (80, 30), (80, 20)]) == [2, 0]


def test_dot_and_drpo_against_the_length_penalty_curve_at_equal_tokens():
    lp_mid, lp = row("length_penalty@8", 150.0, 0.30, 0.20), row("length_penalty", 100.0, 0.20, 0.10)
    # halfway between the RFT student (200 tokens, 40% / 30%) and the midpoint (150, 30% / 20%)
    at_175 = bench.interpolate_at(175.0, [RFT, lp_mid, lp])
    assert at_175["correctness"] == pytest.approx(0.35) and at_175["helpfulness"] == pytest.approx(0.25)
    assert "between length_penalty@8 and rft" in at_175["name"]
    assert bench.interpolate_at(90.0, [RFT, lp_mid, lp]) is lp  # beyond the curve: its nearest end
    rows = [lp_mid, lp, row("drpo", 175.0, 0.36, 0.26), row("dot", 125.0, 0.20, 0.10), row("dot@8", 120.0, 0.3, 0.1)]
    vs = bench.versus_length_penalty(rows, RFT)
    assert vs["drpo"].startswith("matches or beats")  # 36% / 26% vs 35% / 25% at 175 tokens
    assert vs["dot"].startswith("loses")  # 20% / 10% vs 25% / 15% at 125 tokens
    assert vs["dot@8"].startswith("trade-off")  # more correct (30% vs 23%), less helpful (10% vs 13%)
    assert bench.versus_length_penalty(rows[2:], RFT) == {}  # no length-penalty run: nothing to compare with


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-eval-midpoint"], False)])
def test_midpoint_evaluation_is_on_by_default(flag, expected):
    assert bench.parse(flag).eval_midpoint is expected


def test_report_only_redoes_the_analysis_of_a_finished_run(tmp_path):
    import json

    meta = {"command": "python benchmarks/compression.py", "machine": "x", "threads": 2, "date": "d", "total_wall_min": 1.0,
            "steps": 2, "prompts_per_step": 8, "generations": 4, "max_completion_length": 384, "lr": 0.002,
            "rollouts": "transformers", "eval_tasks": 200, "eval_max_tokens": 768, "calculator": True}
    rows = [dict(RFT, truncated_rate=0.0), dict(row("length_penalty", 100.0, 0.2, 0.1), truncated_rate=0.0),
            dict(row("drpo", 150.0, 0.35, 0.25), truncated_rate=0.0)]
    (tmp_path / "compression.json").write_text(json.dumps({"meta": meta, "rows": rows, "rollout_timing": {}}))
    assert bench.main(["--report-only", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "compression.json").read_text())
    assert report["best"]["name"] == "length_penalty" and report["rows"][2]["token_reduction"] == 0.25
    assert report["vs_length_penalty"]["drpo"].startswith("matches or beats")  # 35% / 25% vs 30% / 20% at 150
    assert "**Best variant**: length_penalty" in (tmp_path / "compression.md").read_text()
    assert (tmp_path / "compression_correctness.png").stat().st_size > 0
    assert bench.main(["--report-only", "--out", str(tmp_path / "none")]) == 2


def test_paired_deltas_match_tasks_by_id_and_show_in_the_table():
    def s(task, c, h):
        return {"task_id": task, "correct": c, "helpful": h}

    rft = [s("t1", True, True), s("t2", False, False), s("t3", True, False), s("t4", False, False)]
    # listed in another order, plus a task the RFT student was not scored on (left out of the pairs)
    variant = [s("t4", False, False), s("t3", True, True), s("t2", True, False), s("t1", True, True), s("t9", True, True)]
    out = bench.paired_deltas(rft, variant)
    # ΔC per task: 0, +1, 0, 0 -> 25 ± 3.182446 × 25 points; ΔH: 0, 0, +1, 0 -> the same
    assert out["d_correctness_ci_pts"] == [-54.6, 104.6] == out["d_helpfulness_ci_pts"]
    r = dict(row("baseline", 80.0, 0.5, 0.4), truncated_rate=0.0, **out)
    bench.compare([r], RFT)
    meta = {"command": "c", "machine": "x", "threads": 2, "date": "d", "total_wall_min": 1.0, "steps": 2,
            "prompts_per_step": 8, "generations": 4, "max_completion_length": 384, "lr": 0.002,
            "rollouts": "vllm", "eval_tasks": 4, "eval_max_tokens": 768}
    md = bench.markdown({"meta": meta, "rows": [dict(RFT, truncated_rate=0.0), r], "best": None})
    assert md.count("| +10.0 [-54.6, +104.6] |") == 2  # ΔC and ΔH (50% / 40% against 40% / 30%)
