"""The budget-training benchmark's pure analysis (benchmarks/budget_training.py) on hand-made results, and its run order."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from livethink.data.schema import ProductDoc, Reference, Task

_spec = importlib.util.spec_from_file_location("budget_bench", Path(__file__).resolve().parents[2] / "benchmarks/budget_training.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

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
    models = [model(0.40, 0.48, 0.40, 100.0, 64, 0.6, 50.0), model(0.44, 0.50, 0.42, 120.0, 32, 0.8, 40.0)]
    row = bench.aggregate("drpo_budget", models, RFT)
    assert row["answer_within_cap"]["mean"] == pytest.approx(0.7) and row["answer_tokens_median"]["mean"] == 45.0
    assert row["correct_at_cap"]["64"]["mean"] == pytest.approx(0.42)
    assert row["d_correct_pts"]["values"] == pytest.approx([-2.0, 0.0])
    assert row["token_reduction"]["mean"] == pytest.approx(1 - 110 / 240)
    assert row["floors"] == [64, 32]
    report = {"rft": RFT, "methods": [row], "targets": {"0": bench.verdicts(models[0], RFT)},
              "runs": [{"method": "drpo_budget", "seed": 0, "steps": 96, "train_wall_s": None, "train_step_s": 600.0}],
              "meta": {"seeds": [0, 1], "loadavg_before": [0.5], "loadavg_after": [1.0], "wall_s": 10.0,
                       "command": "python benchmarks/budget_training.py"}}
    text = bench.markdown(report)
    assert "| rft | 10.0 | 20.0 | 25.0 | 30.0 | 40.0 | 48.0 | 50.0 | 192 |" in text
    assert "| drpo_budget | rft | 0 | 96 | reused | 600.0 |" in text
    # 0.7 ± 12.706·0.1414/√2 = [-0.571, 1.971]; 45 ± 12.706·7.071/√2 = [-18.53, 108.53]
    assert "| rft | 5.0 | 180 | 25.0 |" in text
    assert "| drpo_budget | 70.0 [-57.1, 197.1] | 45 [-19, 109] | 42.0 [16.6, 67.4] |" in text
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
    # how many seeds meet every target, and each target
    assert "| drpo_budget | 0 of 1 (none) | 0 of 1 (none) | 1 of 1 (0) | 1 of 1 (0) | 1 of 1 (0) | 1 of 1 (0) |" in text
    assert "| drpo_budget64 | 0 of 1 (none) | 0 of 1 (none) | 1 of 1 (1) |" in text


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
