"""The compression benchmark's pure analysis and report (benchmarks/compression*.py) on hand-computed rows."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import compression as bench  # noqa: E402
import compression_analysis as analysis  # noqa: E402
import compression_report  # noqa: E402
import compression_runs as runs  # noqa: E402

RFT = {"name": "rft", "kind": "rft", "variant": "rft", "tokens": 200.0, "correctness": 0.40, "helpfulness": 0.30,
       "truncated_rate": 0.0}
META = {"command": "python benchmarks/compression.py --seeds 0,1,2", "machine": "x", "threads": 2, "date": "d",
        "total_wall_min": 1.0, "steps": 2, "prompts_per_step": 8, "generations": 4, "max_completion_length": 384,
        "lr": 0.002, "rollouts": "transformers", "eval_tasks": 200, "eval_max_tokens": 768, "calculator": True,
        "rft": "runs/tiny/rft/final", "seeds": [0, 1, 2]}


def row(name, tokens, c, h, variant=None, kind="variant", seed=0):
    return {"name": name, "kind": kind, "variant": variant or name.split("@")[0], "tokens": tokens,
            "correctness": c, "helpfulness": h, "seed": seed, "truncated_rate": 0.0}


def test_compare_per_seed_rows():
    rows = [row("band", 80.0, 0.385, 0.30), row("dot", 60.0, 0.37, 0.35), row("drpo", 150.0, 0.41, 0.31)]
    analysis.compare(rows, RFT)
    assert [r["token_reduction"] for r in rows] == [0.6, 0.7, 0.25]
    assert [r["d_correctness_pts"] for r in rows] == [-1.5, -3.0, 1.0]
    assert [r["meets_target"] for r in rows] == [True, False, False]  # dot loses 3 points; drpo compresses 25%


def test_aggregate_over_seeds_and_target_verdicts():
    per_seed = [row("band", 80.0, 0.40, 0.30, seed=0), row("band", 70.0, 0.38, 0.31, seed=1),
                row("band", 90.0, 0.36, 0.32, seed=2), row("cosine", 150.0, 0.4, 0.3, seed=0)]
    for seed in (0, 1, 2):
        analysis.compare([r for r in per_seed if r["seed"] == seed], RFT)
    band, cosine = analysis.aggregate(per_seed, RFT, 200)
    # reductions .60, .65, .55 and tokens 80, 70, 90: their range over seeds
    assert band["seeds"] == [0, 1, 2] and band["token_reduction"] == 0.6 and band["tokens"] == 80.0
    assert band["ci"]["token_reduction"] == [0.55, 0.65] and band["ci"]["tokens"] == [70.0, 90.0]
    # correctness 80 + 76 + 72 of 600 pooled tasks x seeds: Clopper–Pearson
    from livethink.eval.intervals import pass_rate, rate_difference

    pooled = pass_rate(228, 600)
    assert band["ci"]["correctness"] == [round(pooled.low, 4), round(pooled.high, 4)]
    # ΔC against RFT (80 of 200): Newcombe's unpaired interval of 228/600 − 80/200, in points
    newcombe = rate_difference([0.40, 0.38, 0.36], 200, [0.40], 200)
    assert band["d_correctness_pts"] == -2.0
    assert band["ci"]["d_correctness_pts"] == [round(100 * newcombe.low, 2), round(100 * newcombe.high, 2)]
    assert band["meets_target_seeds"] == 2  # seed 2: 55% shorter and −4 points
    assert cosine["ci"]["tokens"] is None and cosine["meets_target_seeds"] == 0  # one seed: no range
    assert 0 <= cosine["ci"]["correctness"][0] <= 0.4 <= cosine["ci"]["correctness"][1] <= 1
    verdicts = analysis.target_verdicts(per_seed, "band", RFT)
    assert [v["met"] for v in verdicts.values()] == [True, True, False]
    assert verdicts["2"] == {"token_reduction": 0.55, "d_correctness_pts": -4.0, "d_helpfulness_pts": 2.0,
                             "shorter_60": False, "correctness_kept": False, "helpfulness_kept": True, "met": False}
    assert analysis.pick_best_livethink([band, cosine])["name"] == "band"  # cosine is a baseline


def test_challengers_against_each_baseline_curve_at_equal_tokens():
    lp_mid, lp = row("length_penalty@8", 150.0, 0.30, 0.20), row("length_penalty", 100.0, 0.20, 0.10)
    rows = [lp_mid, lp, row("dler", 120.0, 0.30, 0.30), row("drpo", 175.0, 0.36, 0.26), row("dot", 125.0, 0.20, 0.10),
            row("dot@8", 120.0, 0.3, 0.1, kind="midpoint"), row("band", 90.0, 0.4, 0.4)]
    vs = analysis.versus_baselines(rows, RFT)
    assert set(vs) == {"drpo", "dot"}  # band is not a challenger; midpoints are not compared
    # on the means only: no "beats" (the baseline's point is interpolated, and nothing is paired)
    assert vs["drpo"]["length_penalty"].startswith("at or above")  # 36% / 26% vs 35% / 25% at 175 tokens
    assert "not a tested difference" in vs["drpo"]["length_penalty"]
    assert vs["dot"]["length_penalty"].startswith("below")  # 20% / 10% vs 25% / 15% at 125 tokens
    assert vs["dot"]["dler"].startswith("below")  # dler's curve at 125: between dler (120) and rft (200)
    assert vs["drpo"]["dler"].startswith("below")  # 36% / 26% vs 36.9% / 30% at 175 tokens
    assert analysis.versus_baselines(rows[2:3] + rows[6:], RFT) == {}  # no challenger


def test_seeds_argument():
    assert bench.parse(["--seeds", "0,1,2"]).seeds == [0, 1, 2] and bench.parse([]).seeds == [0]
    for bad in ("a,b", "1,1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_seeds(bad)
    assert bench.parse([]).eval_midpoint is True and bench.parse(["--no-eval-midpoint"]).eval_midpoint is False
    assert bench.parse([]).jobs == 1 and bench.parse(["--jobs", "2"]).jobs == 2
    assert set(runs.VARIANTS) == {"band", "siri", "dot", "drpo", "length_penalty", "gdpo", "dapo_overlong", "cosine",
                                   "dler"}
    root = Path(__file__).resolve().parents[2]
    assert all((root / f"configs/tiny/grpo_{v}.yaml").is_file() for v in runs.VARIANTS)


def test_report_only_redoes_the_analysis_of_a_finished_run(tmp_path):
    per_seed = [dict(row("band", 80.0 + 10 * s, 0.40, 0.30 + 0.01 * s, seed=s), d_correctness_ci_pts=[-5.0, 5.0],
                     d_helpfulness_ci_pts=[-4.0, 6.0]) for s in (0, 1, 2)]
    per_seed += [row("length_penalty", 100.0, 0.2, 0.1, seed=s) for s in (0, 1, 2)]
    per_seed += [row("drpo", 150.0, 0.35, 0.25, seed=s) for s in (0, 1, 2)]
    (tmp_path / "compression.json").write_text(json.dumps({"meta": META, "rows": [RFT], "per_seed": per_seed,
                                                           "rollout_timing": {}}))
    assert bench.main(["--report-only", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "compression.json").read_text())
    assert report["meta"]["seeds"] == [0, 1, 2] and report["best"]["name"] == "band"
    assert [v["met"] for v in report["best_verdicts"].values()] == [True, False, False]  # 60%, 55%, 50% shorter
    assert report["vs_baselines"]["drpo"]["length_penalty"].startswith("at or above")
    md = (tmp_path / "compression.md").read_text()
    assert "stage-2 seeds (GRPO sampling and data order, `--seed`) on one RFT draw" in md
    # tokens 80/90/100 and their cut: the range over seeds; ΔC 0 and ΔH +1: Newcombe against RFT's 200 tasks
    # (240 of 600 against 80 of 200: Newcombe, wider than a paired interval would be); correctness 240 of 600 pooled
    assert ("| band | livethink | 90.0 [80.0, 100.0] | 55.0% [50.0, 60.0] | +0.0 [-7.9, +7.7] | +1.0 [-6.6, +8.1] | "
            "40.0% [36.0, 44.0] |") in md
    assert "| band | 0 | 80.0 | 60.0% | +0.0 [-5.0, +5.0] | +0.0 [-4.0, +6.0] |" in md
    assert "## Best livethink variant: band (target met on 1 of 3 seeds)" in md
    assert (tmp_path / "compression_pareto.png").stat().st_size > 0
    assert bench.main(["--report-only", "--out", str(tmp_path / "none")]) == 2
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "compression.json").write_text(json.dumps({"meta": META, "rows": [RFT]}))
    assert bench.main(["--report-only", "--out", str(tmp_path / "old")]) == 2  # a report from before --seeds


def test_paired_deltas_match_tasks_by_id():
    def s(task, c, h):
        return {"task_id": task, "correct": c, "helpful": h}

    rft = [s("t1", True, True), s("t2", False, False), s("t3", True, False), s("t4", False, False)]
    # listed in another order, plus a task the RFT student was not scored on (left out of the pairs)
    variant = [s("t4", False, False), s("t3", True, True), s("t2", True, False), s("t1", True, True), s("t9", True, True)]
    out = analysis.paired_deltas(rft, variant)
    # ΔC per task: 0, +1, 0, 0; ΔH: 0, 0, +1, 0. A paired bootstrap over the 4 tasks: a resample's mean gain is
    # (times the +1 task is drawn) / 4, so the interval runs from 0 to 3/4, never outside [-100, 100] points
    assert out["d_correctness_ci_pts"] == [0.0, 75.0] == out["d_helpfulness_ci_pts"]


def test_merge_runs_keeps_published_runs_beside_new_ones():
    budget = {k: META[k] for k in analysis.SAME_BUDGET}
    published = {"meta": dict(META), "rows": [dict(RFT)],
                 "per_seed": [row("band", 80.0, 0.40, 0.30, seed=0), row("cosine", 150.0, 0.4, 0.3, seed=0),
                              row("band", 70.0, 0.38, 0.31, seed=1)]}
    new = [row("cosine", 120.0, 0.41, 0.3, seed=0), row("dler", 90.0, 0.35, 0.3, seed=0)]
    merged = analysis.merge_runs(published, new, dict(RFT), budget)
    # cosine seed 0 was run again: the new run replaces the published one; the rest is kept, in order
    assert [(r["name"], r["seed"], r["tokens"]) for r in merged] == [
        ("band", 0, 80.0), ("band", 1, 70.0), ("cosine", 0, 120.0), ("dler", 0, 90.0)]
    # siri's two rows (low, high) belong to one run: both are replaced together
    siri = [row("siri-low", 100.0, 0.4, 0.3, variant="siri"), row("siri-high", 110.0, 0.4, 0.3, variant="siri")]
    again = analysis.merge_runs({**published, "per_seed": siri}, [row("siri-high", 105.0, 0.4, 0.3, variant="siri")],
                             dict(RFT), budget)
    assert [(r["name"], r["tokens"]) for r in again] == [("siri-high", 105.0)]


def test_merge_runs_refuses_another_reference_or_budget():
    budget = {k: META[k] for k in analysis.SAME_BUDGET}
    published = {"meta": dict(META), "rows": [dict(RFT)], "per_seed": []}
    with pytest.raises(ValueError) as err:
        analysis.merge_runs(published, [], {**RFT, "tokens": 201.0, "correctness": 0.41}, {**budget, "steps": 96})
    message = str(err.value)
    assert "steps: 2 there, 96 here" in message
    assert "RFT student's tokens: 200.0 there, 201.0 here" in message and "correctness: 0.4 there, 0.41 here" in message
    assert "helpfulness" not in message


def test_what_stage_2_trains_is_a_method_suffix():
    assert runs.split_method("band") == ("band", "head")
    assert runs.split_method("band+lora") == ("band", "lora")
    assert runs.method_rollouts("band", "vllm") == "vllm"
    assert runs.method_rollouts("band+all", "vllm") == "transformers"  # vLLM on CPU can't refresh trained experts
    args = argparse.Namespace(rft=Path("rft"), data_dir=Path("data"), generations=4, prompts_per_step=8,
                              max_completion_length=384, lr=2e-3, calculator=True, siri_l_min=96, max_model_len=1024,
                              extra=["--logging_steps", "1"])
    lora = runs.grpo_cmd(args, "band+lora", Path("out"), 96, "transformers")
    assert lora[lora.index("--config") + 1].endswith("configs/tiny/grpo_band.yaml")
    assert lora[lora.index("--use_vllm") + 1] == "false"
    assert lora[-6:] == ["--use_peft", "true", "--trainable_parameters", "@all", "--logging_steps", "1"]
    siri_all = runs.grpo_cmd(args, "siri+all", Path("out"), 96, "transformers")
    assert "--siri_period" in siri_all and siri_all[-4:-2] == ["--trainable_parameters", "@all"]
    head = runs.grpo_cmd(args, "band", Path("out"), 96, "vllm")
    assert "--use_peft" not in head and "--trainable_parameters" not in head and "--vllm_mode" in head


def test_report_names_what_each_method_trains_and_its_rollouts(tmp_path):
    per_seed = [row("band", 90.0, 0.40, 0.30), dict(row("band+lora", 120.0, 0.41, 0.31), rollouts="transformers",
                                                     training="lora")]
    (tmp_path / "compression.json").write_text(json.dumps({"meta": META | {"rollouts": "vllm", "seeds": [0]},
                                                           "rows": [RFT], "per_seed": per_seed, "rollout_timing": {}}))
    assert bench.main(["--report-only", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "compression.md").read_text()
    assert "| band+lora | livethink, lora | 120.0 |" in md and "| band | livethink | 90.0 |" in md
    assert "rollouts on vllm (dler also rolls out its dynamic-sampling extras); band+lora on transformers (" in md
    assert "Evaluation: 200 test tasks" in md and "{m[" not in md
    assert json.loads((tmp_path / "compression.json").read_text())["best"]["name"] == "band"  # 55% vs 40% shorter


def test_added_runs_name_every_earlier_invocation_and_the_total_wall_time():
    first = {"command": "c1", "date": "d1", "total_wall_min": 55.3}
    second = {"command": "c2", "date": "d2", "total_wall_min": 30.0,
              "extends": {"invocations": compression_report.published_invocations(first), "runs_kept": ["band seed 0"]}}
    assert compression_report.published_invocations(second) == [{"command": "c1", "date": "d1", "wall_min": 55.3},
                                                   {"command": "c2", "date": "d2", "wall_min": 30.0}]
    third = {"command": "c3", "date": "d3", "total_wall_min": 14.7,
             "extends": {"invocations": compression_report.published_invocations(second), "runs_kept": ["band seed 0", "band seed 1"]}}
    lines = compression_report.added_statement(third)
    assert lines[2:4] == ["- `c1` (d1, 55.3 min)", "- `c2` (d2, 30.0 min)"]
    assert lines[5].endswith("under the same budget. Wall time of all 3 invocations: 100.0 min.")
    older = {"command": "c2", "date": "d2", "total_wall_min": 30.0,  # written before invocations were chained
             "extends": {"command": "c1", "date": "d1", "runs_kept": ["band seed 0"]}}
    assert compression_report.published_invocations(older)[0] == {"command": "c1", "date": "d1", "wall_min": None}
    assert "Wall time" not in compression_report.added_statement(older)[-2]
