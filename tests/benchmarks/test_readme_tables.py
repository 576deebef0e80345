"""The README's (and docs') results blocks equal what their results JSON says, and the README quotes no benchmark
figure outside them (benchmarks/readme_tables.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks/readme_tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)

README_BLOCKS = ("holdout_students", "holdout_students_summary", "serve_goodput", "serve_summary",
                 "speech_goodput_brief", "shipped_seeds", "ab_checks")


def _outside_blocks_and_code(text: str) -> str:
    """``text`` without its generated blocks, code (fenced and inline) and stage names ("stage 2")."""
    text = re.sub(r"<!-- (\w+) -->\n.*?<!-- /\1 -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"[Ss]tage[- ]\d", "", text)


@pytest.mark.parametrize("path", tables.documents(), ids=lambda p: p.name)
def test_every_results_block_equals_its_json(path):
    assert tables.stale_tables(path.read_text()) == [], "run python benchmarks/readme_tables.py"


def test_the_readme_holds_every_results_block():
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in README_BLOCKS if f"<!-- {name} -->" not in readme or f"<!-- /{name} -->" not in readme]
    assert missing == []


def test_the_readme_quotes_no_benchmark_figure_by_hand():
    readme = _outside_blocks_and_code((ROOT / "README.md").read_text())
    results = readme[readme.index("## Results"):]
    results = results[:results.index("\n## ", 1)]
    assert re.findall(r"[^\n]*\d[^\n]*", results) == [], "a figure in the README's results outside a generated block"
    assert re.findall(r"[^\n]*\d\s?%[^\n]*", readme) == [], "a percentage in the README outside a generated block"


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_bytes()) <= 15_000


def test_a_table_is_rewritten_from_its_json_and_a_stale_one_is_named(tmp_path):
    cell = {"mean": 0.4, "low": 0.3, "high": 0.5}
    report = {"rft": {"caps": [0, 64], "correct_at_cap": [0.1, 0.25], "correct": 0.44, "tokens": 248.6, "floor": 192},
              "methods": [{"method": "drpo_budget", "correct_at_cap": {"0": cell, "64": cell}, "correct": cell,
                           "tokens": {"mean": 130.4}, "floors": [64, 96]}]}
    (tmp_path / "budget_training.json").write_text(json.dumps(report))
    stale = "intro\n<!-- budget_training -->\nold\n<!-- /budget_training -->\nend\n"
    assert tables.stale_tables(stale, tmp_path) == ["budget_training"]
    fresh = tables.render(stale, tmp_path)
    assert fresh == ("intro\n<!-- budget_training -->\n"
                     "| model | cap 0 | cap 64 | uncapped | tokens | floor |\n|---|---:|---:|---:|---:|---:|\n"
                     "| RFT student | 10.0 | 25.0 | 44.0 | 249 | 192 |\n"
                     "| DRPO trained for the cut, one run | 40.0 [30.0, 50.0] | 40.0 [30.0, 50.0] | 40.0 [30.0, 50.0] | 130 | 64, 96 |\n"
                     "<!-- /budget_training -->\nend\n")
    assert tables.stale_tables(fresh, tmp_path) == []


def test_a_figure_changed_by_hand_is_caught_and_named(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(tables.render("<!-- ab_checks -->\n<!-- /ab_checks -->\n"))
    assert tables.main(["--check", str(readme)]) == 0
    readme.write_text(readme.read_text().replace("events/s", "events/s (fast)"))
    assert tables.main(["--check", str(readme)]) == 1
    assert "block ab_checks differs from benchmarks/results/ab_assignment.json" in capsys.readouterr().err
    assert tables.main([str(readme)]) == 0 and tables.main(["--check", str(readme)]) == 0


def test_the_shipped_recipe_over_seeds_from_its_per_seed_results():
    goals = {"correct_at_64_vs_rft_uncapped": 0.27, "floor_tokens": 64, "uncapped_correct": 0.28,
             "uncapped_helpful": 0.30, "token_reduction": 0.5}  # what budget_training.verdicts asks, against rft
    names = iter(list(goals) * 2)

    def target(value: float | int | None, met: bool) -> dict:
        return {"value": value, "target": goals[next(names)], "met": met}

    rft = {"n": 500, "correct": 0.30, "helpful": 0.30, "tokens": 230.0, "false_claim": 0.594}
    targets = {"0": {"correct_at_64_vs_rft_uncapped": target(0.28, True), "floor_tokens": target(64, True),
                     "uncapped_correct": target(0.29, True), "uncapped_helpful": target(0.30, True),
                     "token_reduction": target(0.52, True)},
               "1": {"correct_at_64_vs_rft_uncapped": target(0.20, False), "floor_tokens": target(128, False),
                     "uncapped_correct": target(0.25, False), "uncapped_helpful": target(0.25, False),
                     "token_reduction": target(0.40, False)}}
    cell = {"difference": -2.5, "low": -6.0, "high": 1.25, "excludes_zero": False}
    report = {"rft": rft, "targets": targets,
              "per_seed": [{"method": "s", "seed": 0, "tokens": 110.4, "false_claim": 0.4},
                           {"method": "s", "seed": 1, "tokens": 138.0, "false_claim": 0.45}],
              "target_tally": {"s": {"seeds": 2, "all_met": ["0"], "all_met_rate": {"low": 0.0126, "high": 0.987}}},
              "paired_vs_rft": {"s": {"correct": cell, "correct_at_64": cell | {"difference": 10.0, "low": 6.0,
                                                                                 "high": 14.0, "excludes_zero": True}}},
              "meta": {"shipped_method": "s", "split": "holdout", "loadavg_before": [0.5], "loadavg_after": [2.0]}}
    lines = tables.shipped_seeds(report)
    assert lines[0] == ("| stage-2 seed | correct at cap 64 (≥ 27.0%) | floor ≤ 64 | correct (≥ 28.0%) | helpful (≥ 30.0%) "
                        "| tokens (≤ 115) | false claim (RFT 59.4%) |")
    assert lines[2] == "| 0 | 28.0% ✓ | 64 ✓ | 29.0% ✓ | 30.0% ✓ | 110 ✓ | 40.0% |"
    assert lines[3] == "| 1 | 20.0% ✗ | 128 ✗ | 25.0% ✗ | 25.0% ✗ | 138 ✗ | 45.0% |"
    assert ("Every target met on 1 of 2 seeds (95%: 1–99%). Against RFT, paired over tasks and seeds (points): "
            "+10.0 [+6.0, +14.0] at cap 64, −2.5 [−6.0, +1.2] uncapped.") in lines[-1]
