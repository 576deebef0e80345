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


def test_pareto_front_and_nearest_length_penalty_point():
    assert bench.pareto_front([(100, 40), (120, 35), (80, 30), (80, 20)]) == [2, 0]
    lp = [row("length_penalty@8", 180.0, 0.4, 0.3), row("length_penalty", 120.0, 0.3, 0.2)]
    drpo = row("drpo", 170.0, 0.42, 0.31)
    assert bench.nearest_in_tokens(drpo, lp)["name"] == "length_penalty@8"
    assert bench.versus(drpo, lp[0]).startswith("matches or beats length_penalty@8")
    assert bench.versus(row("dot", 190.0, 0.3, 0.2), lp[0]).startswith("loses to length_penalty@8")
    assert bench.versus(row("dot", 100.0, 0.3, 0.2), lp[0]).startswith("trade-off with length_penalty@8")


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-eval-midpoint"], False)])
def test_midpoint_evaluation_is_on_by_default(flag, expected):
    assert bench.parse(flag).eval_midpoint is expected
