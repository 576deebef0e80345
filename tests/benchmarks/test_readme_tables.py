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
                 "speech_goodput_brief", "ab_checks", "training")


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
