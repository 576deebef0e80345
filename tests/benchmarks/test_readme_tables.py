"""The README's generated results tables equal what their results JSON says (benchmarks/readme_tables.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks/readme_tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


def test_the_readme_tables_equal_the_results_json():
    readme = (ROOT / "README.md").read_text()
    assert "<!-- budget_training -->" in readme
    assert tables.stale_tables(readme) == [], "run python benchmarks/readme_tables.py"


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
                     "| DRPO trained for the cut | 40.0 [30.0, 50.0] | 40.0 [30.0, 50.0] | 40.0 [30.0, 50.0] | 130 | 64, 96 |\n"
                     "<!-- /budget_training -->\nend\n")
    assert tables.stale_tables(fresh, tmp_path) == []
