"""The opening-habits benchmark (benchmarks/opening_habits.py): its count on hand-made samples, its report, and
its refusal of a model that is not a checkpoint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("opening_habits", Path(__file__).resolve().parents[2] / "benchmarks/opening_habits.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_openings_are_counted_per_task_kind():
    kinds = ["price", "price", "attribute"]
    samples = [["\nThey want the price", "Unit price 9"], ["They want it", "They want more"], ["Colour: red"]]
    shares = bench.opening_shares(kinds, samples, "They want")
    # price: 3 of 4 samples (a leading newline does not count); attribute: 0 of 1
    assert shares == {"attribute": {"hits": 0, "n": 1, "share": 0.0}, "price": {"hits": 3, "n": 4, "share": 0.75}}
    report = {"meta": {"phrase": "They want", "samples": 2, "tasks": 3, "data": "test.jsonl", "loadavg_before": [0.1],
                       "loadavg_after": [0.2], "wall_s": 5.0, "command": "python benchmarks/opening_habits.py"},
              "models": [{"name": "m", "path": "p", "by_kind": shares},
                         {"name": "n", "path": "q", "by_kind": {"price": {"hits": 0, "n": 4, "share": 0.0}}}]}
    text = bench.markdown(report)
    assert "| model | attribute | price |" in text
    assert "| m | 0.0 | 75.0 |" in text and "| n | – | 0.0 |" in text


def test_a_model_that_is_not_a_checkpoint_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.parse(["--phrase", "x", "--model", f"a={tmp_path}"])
    err = capsys.readouterr().err
    assert f"--model 'a={tmp_path}': {tmp_path} has no config.json" in err
    with pytest.raises(SystemExit):
        bench.parse(["--phrase", "x", "--model", "no-path"])
    assert "--model 'no-path': expected NAME=PATH" in capsys.readouterr().err
