"""The budget-training benchmark's pure analysis (benchmarks/budget_training.py) on hand-made results, and its run order."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from livethink.data.schema import ProductDoc, Reference, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import budget_training as bench  # noqa: E402
import budget_training_report as report_mod  # noqa: E402

CAPS = [0, 32, 64, 96, 128, 192]
RFT = {"name": "rft", "n": 500, "correct": 0.50, "helpful": 0.40, "tokens": 240.0, "caps": CAPS,
       "correct_at_cap": [0.1, 0.2, 0.25, 0.3, 0.4, 0.48], "helpful_at_cap": [0.0] * 6, "floor": 192,
       "answer_within_cap": 0.05, "answer_tokens_median": 180.0}


def model(c64: float, correct: float, helpful: float, tokens: float, floor: int | None, within: float = 0.5,
          to_answer: float = 60.0) -> dict:
    return {"name": "m", "n": 500, "correct": correct, "helpful": helpful, "tokens": tokens, "caps": CAPS,
            "correct_at_cap": [0.3, 0.4, c64, 0.5, 0.5, 0.5], "helpful_at_cap": [0.0] * 6, "floor": floor,
            "answer_within_cap": within, "answer_tokens_median": to_answer}


def test_where_the_thinking_states_the_answer():
    price = Task(id="p", split="test", product_docs=(ProductDoc(product_id="p1", title="Hoodie", text="$74.70"),),
                 question="How much for two?", reference=Reference(kind="number", value=149.40, unit="usd"),
                 kind="price", difficulty=1)
    rows = [{"task_id": "p", "completion": "<think>\nUnit 74.70 x 2 = 149.40. Done.\n</think>\n\n$149.40."},
            {"task_id": "p", "completion": "<think>\nNo idea at all\n</think>\n\n$149.40."}]
    words = lambda text: len(text.split())  # noqa: E731 (a stand-in tokenizer: one token per word)
    # "Unit" "74.70" "x" "2" "=" come before 149.40; the second thinking never states it: all 4 of its words count
    assert bench.answer_tokens(rows, {"p": price}, words) == [5, 4]
    assert bench.share_within([10, 64, 65, 200], 64) == 0.5


def test_targets_against_the_rft_student():
    good = bench.verdicts(model(0.45, 0.49, 0.41, 110.0, 64), RFT)  # 0.45 ≥ 0.9·0.50; 0.49 ≥ 0.48; 110 ≤ 120
    assert all(v["met"] for v in good.values())
    bad = bench.verdicts(model(0.44, 0.47, 0.39, 121.0, None), RFT)
    assert not any(v["met"] for v in bad.values())
    assert bad["token_reduction"]["value"] == pytest.approx(1 - 121 / 240, abs=1e-4)


def test_aggregate_over_seeds_and_the_report():
    from scipy.stats import beta

    models = [model(0.40, 0.48, 0.40, 100.0, 64, 0.6, 50.0), model(0.44, 0.50, 0.42, 120.0, 32, 0.8, 40.0)]
    row = bench.aggregate("drpo_budget", models, RFT)
    assert row["answer_within_cap"]["mean"] == pytest.approx(0.7) and row["answer_tokens_median"]["mean"] == 45.0
    assert row["correct_at_cap"]["64"]["mean"] == pytest.approx(0.42)
    # shares of tasks: Clopper–Pearson of the count pooled over tasks × seeds (200 + 220 of 1,000 at cap 64)
    c64 = row["correct_at_cap"]["64"]
    assert c64["low"] == pytest.approx(beta.ppf(0.025, 420, 581)) and c64["high"] == pytest.approx(beta.ppf(0.975, 421, 580))
    # tokens and their cut: the range over seeds; ΔC against RFT: the per-seed values, and Newcombe's interval
    assert (row["tokens"]["low"], row["tokens"]["high"]) == (100.0, 120.0)
    assert row["d_correct_pts"]["values"] == pytest.approx([-2.0, 0.0]) and row["d_correct_pts"]["mean"] == pytest.approx(-1.0)
    assert row["d_correct_pts"]["low"] < -1.0 < row["d_correct_pts"]["high"]
    assert row["token_reduction"]["mean"] == pytest.approx(1 - 110 / 240)
    assert row["floors"] == [64, 32]
    report = {"rft": RFT, "methods": [row], "targets": {"0": bench.verdicts(models[0], RFT)},
              "runs": [{"method": "drpo_budget", "seed": 0, "steps": 96, "train_wall_s": None, "train_step_s": 600.0}],
              "meta": {"seeds": [0, 1], "loadavg_before": [0.5], "loadavg_after": [1.0], "wall_s": 10.0,
                       "command": "python benchmarks/budget_training.py"}}
    text = bench.markdown(report)
    assert "| rft | 10.0 | 20.0 | 25.0 | 30.0 | 40.0 | 48.0 | 50.0 | 192 |" in text
    assert "| drpo_budget | rft | 0 | 96 | reused | 600.0 |" in text
    assert "Clopper–Pearson 95%, pooled over tasks × seeds" in text
    assert "| rft | 5.0 | 180 | 25.0 |" in text
    # 700 of 1,000 within the cap: [67.1, 72.8]; median tokens to the answer 40 and 50: their range
    assert "| drpo_budget | 70.0 [67.1, 72.8] | 45 [40, 50] | 42.0 [38.9, 45.1] |" in text
    assert "| 0 | 40.0% ✗ (≥ 45.0%)" in text
    # every method trained for the cut gets its targets table; the header says what ran here and what was read back
    report["targets_by_method"] = {"drpo_budget": report["targets"], "drpo_budget64": {"1": bench.verdicts(models[1], RFT)}}
    report["meta"].update(trained_here=1, evaluated_here=2, rft_dir="runs/tiny/rft_early/final")
    text = bench.markdown(report)
    assert "## Targets of the budget-trained student (drpo_budget64), per seed" in text
    # the targets say which RFT student they are measured against (``--rft``)
    assert "Against the RFT student `runs/tiny/rft_early/final` (uncapped 50.0% correct" in text
    assert "| 1 | 44.0% ✗ (≥ 45.0%) | 32 ✓" in text
    assert "1 runs trained and 2 models evaluated here" in text
    # how many seeds meet every target (a pass rate with its Clopper–Pearson interval: 0 of 1 is [0, 97.5]%), and each
    assert ("| drpo_budget | 0 of 1 (none), 0 [0, 98]% | 0 of 1 (none) | 1 of 1 (0) | 1 of 1 (0) | 1 of 1 (0) | "
            "1 of 1 (0) |") in text
    assert "| drpo_budget64 | 0 of 1 (none), 0 [0, 98]% | 0 of 1 (none) | 1 of 1 (1) |" in text


def test_report_only_redoes_the_summary_from_the_per_seed_rows(tmp_path):
    models = {s: model(0.40 + 0.06 * s, 0.48, 0.40, 100.0 + 20 * s, 64) for s in (0, 1)}
    published = {"meta": {"command": "python benchmarks/budget_training.py --seeds 0,1", "seeds": [0, 1],
                          "loadavg_before": [0.5], "loadavg_after": [1.0], "wall_s": 10.0,
                          "shipped_method": "drpo_budget"},
                 "rft": RFT, "methods": [{"method": "drpo_budget", "correct": {"mean": 0.48, "low": -0.2, "high": 1.1}}],
                 "per_seed": [m | {"method": "drpo_budget", "seed": s} for s, m in models.items()],
                 "targets": {str(s): bench.verdicts(m, RFT) for s, m in models.items()},
                 "targets_by_method": {"drpo_budget": {str(s): bench.verdicts(m, RFT) for s, m in models.items()}},
                 "runs": []}
    (tmp_path / "budget_training.json").write_text(json.dumps(published))
    assert bench.main(["--report-only", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "budget_training.json").read_text())
    assert report["methods"] == [bench.aggregate("drpo_budget", list(models.values()), RFT)]
    assert 0 <= report["methods"][0]["correct"]["low"] <= report["methods"][0]["correct"]["high"] <= 1
    assert report["per_seed"] == published["per_seed"] and report["meta"]["statistics"] == report_mod.STATISTICS
    tally = report["target_tally"]["drpo_budget"]
    assert tally["all_met"] == ["1"] and tally["all_met_rate"]["mean"] == 0.5
    assert (tmp_path / "budget_training.md").is_file() and (tmp_path / "budget_training.png").stat().st_size > 0


def test_task_verdicts_and_the_paired_comparison_against_rft(tmp_path):
    samples = tmp_path / "m.jsonl"
    rows = [{"cap": cap, "task_id": tid, "correct": ok, "helpful": ok and cap is None}
            for tid, ok in (("t2", True), ("t1", False)) for cap in (None, 64)]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # in task-id order: t1 then t2
    assert bench.task_verdicts(samples) == {"task_ids": ["t1", "t2"], "correct": [0, 1], "helpful": [0, 1],
                                            "correct_at_64": [0, 1]}
    assert bench.task_verdicts(tmp_path / "missing.jsonl") is None
    ids = [f"t{i}" for i in range(4)]
    rft = RFT | {"verdicts": {"task_ids": ids, "correct": [1, 0, 0, 0], "helpful": [1, 0, 0, 0],
                              "correct_at_64": [0, 0, 0, 0]}}
    seeds = [model(0.5, 0.5, 0.5, 100.0, 64) | {"verdicts": {"task_ids": ids, "correct": c, "helpful": c,
                                                             "correct_at_64": c}}
             for c in ([1, 1, 0, 0], [1, 1, 1, 0])]
    paired = report_mod.paired_vs_rft(seeds, rft)
    # uncapped: 0.625 against 0.25, at 64: 0.625 against 0 (points, mean over seeds and tasks)
    assert paired["correct"]["difference"] == pytest.approx(37.5) and paired["correct_at_64"]["difference"] == pytest.approx(62.5)
    assert paired["correct_at_64"]["low"] <= 62.5 <= paired["correct_at_64"]["high"]
    assert paired["correct"]["method"] == "paired bootstrap over tasks and seeds"
    assert report_mod.paired_vs_rft(seeds, RFT) is None  # no per-task verdicts to pair
    with pytest.raises(ValueError, match="different tasks"):
        report_mod.paired_vs_rft([seeds[0] | {"verdicts": {**seeds[0]["verdicts"], "task_ids": ids[::-1]}}], rft)


def test_target_tally_counts_the_seeds_that_meet_each_target():
    targets = {"0": bench.verdicts(model(0.45, 0.49, 0.41, 110.0, 64), RFT),  # meets all
               "1": bench.verdicts(model(0.45, 0.47, 0.41, 110.0, 96), RFT),  # uncapped C and floor miss
               "2": bench.verdicts(model(0.44, 0.49, 0.41, 121.0, 64), RFT)}  # C at 64 and tokens miss
    tally = bench.target_tally(targets)
    assert tally["seeds"] == 3 and tally["all_met"] == ["0"]
    assert tally["met_by_target"] == {"correct_at_64_vs_rft_uncapped": ["0", "1"], "floor_tokens": ["0", "2"],
                                      "uncapped_correct": ["0", "2"], "uncapped_helpful": ["0", "1", "2"],
                                      "token_reduction": ["0", "1"]}
    assert bench.target_tally({}) == {"seeds": 0, "all_met": [], "met_by_target": {}}


def test_a_method_after_another_starts_from_that_methods_student_of_the_same_seed(tmp_path, monkeypatch):
    commands = []

    def fake_run(cmd, log):  # records the grpo command and leaves the run's outputs
        commands.append(cmd)
        out = Path(cmd[cmd.index("--output_dir") + 1])
        (out / "final").mkdir(parents=True)
        (out / "final" / "config.json").write_text("{}")
        (out / "metrics.jsonl").write_text('{"step_time": 2.0}\n')
        return 1.0

    monkeypatch.setattr(bench, "run", fake_run)
    args = argparse.Namespace(runs_dir=str(tmp_path), rft="runs/rft/final", data_dir="data")
    run = bench.train(args, "drpo_then_budget64", 2)
    first, second = commands
    assert first[first.index("--model_name_or_path") + 1] == "runs/rft/final"
    assert second[second.index("--model_name_or_path") + 1] == str(tmp_path / "drpo" / "seed2" / "final")
    assert second[second.index("--config") + 1] == bench.METHODS["drpo_then_budget64"].config
    assert run["starts_from"] == "drpo" and run["trained_here"] and run["steps"] == 1
    assert bench.train(args, "drpo_then_budget64", 2)["trained_here"] is False  # both reused now
    assert len(commands) == 2
    # after_seed: seed 2 of the budget stage from seed 0's DRPO student (trained first)
    run = bench.train(args, "drpo0_then_budget64", 2)
    parent, child = commands[2:]
    assert parent[parent.index("--output_dir") + 1] == str(tmp_path / "drpo" / "seed0")
    assert child[child.index("--model_name_or_path") + 1] == str(tmp_path / "drpo" / "seed0" / "final")
    assert child[child.index("--seed") + 1] == "2" and run["starts_from"] == "drpo seed 0"
