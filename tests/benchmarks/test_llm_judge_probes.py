"""benchmarks/llm_judge_probes.py: Cohen's κ on hand-computed tables and the replies it reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import llm_judge_probes as bench  # noqa: E402


def _pairs(table: list[list[int]]) -> tuple[list[int], list[int]]:
    a, b = [], []
    for x in (0, 1):
        for y in (0, 1):
            a += [x] * table[x][y]
            b += [y] * table[x][y]
    return a, b


def test_kappa_on_a_hand_computed_table():
    # p_o = 0.85, p_e = 0.5 * 0.45 + 0.5 * 0.55 = 0.5: κ = (0.85 - 0.5) / (1 - 0.5) = 0.7
    k = bench.kappa(*_pairs([[40, 10], [5, 45]]))
    assert k["n"] == 100 and k["table"] == [[40, 10], [5, 45]]
    assert k["agreement"] == pytest.approx(0.85) and k["kappa"] == pytest.approx(0.7)
    low, high = k["kappa_ci95"]
    assert low < 0.7 < high and low >= -1 and high <= 1


def test_kappa_of_a_judge_that_always_says_yes_is_undefined_not_a_number():
    k = bench.kappa([0, 1, 1, 0], [1, 1, 1, 1])
    assert k["kappa"] is None and k["agreement"] == 0.5 and "same verdict" in k["note"]


def test_replies_are_interleaved_and_an_unknown_task_is_named(tmp_path):
    tasks = {"t1": "task-1", "t2": "task-2"}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(json.dumps({"task_id": t, "completion": f"a{t}"}) for t in ("t1", "t2")))
    b.write_text("\n".join(json.dumps({"task_id": t, "completion": f"b{t}"}) for t in ("t1", "t2")))
    rows = bench.read_replies([a, b], tasks, limit=3)
    assert [(s, c) for s, _, c in rows] == [("a", "at1"), ("b", "bt1"), ("a", "at2")]
    b.write_text(json.dumps({"task_id": "t9", "completion": "x"}))
    with pytest.raises(SystemExit, match="t9"):
        bench.read_replies([a, b], tasks, limit=10)
