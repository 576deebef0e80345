"""The judge-probes benchmark (benchmarks/judge_probes.py): a slice of its probes against the rubric, so a rubric
that lets a false claim, a promise, a hedge or a bag of keywords through (or rejects a true reply) fails CI; and its
Clopper–Pearson summary on hand-counted rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("judge_probes", Path(__file__).resolve().parents[2] / "benchmarks/judge_probes.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def scored():
    from livethink.data.liveshop.generate import generate

    tasks = generate(seed=0).tasks["validation"][:40]
    probes = [probe for task in tasks for probe in bench.build(task)]
    return bench.score(tasks, probes)


def test_probe_slice_covers_every_kind(scored):
    kinds = {row["kind"] for row in scored}
    assert kinds == set(bench.PROBE_KINDS) | set(bench.CONTROL_KINDS)


def test_rubric_rejects_every_probe_of_the_slice(scored):
    accepted = [(r["kind"], r["reply"], r["reason"]) for r in scored if r["kind"] in bench.PROBE_KINDS and r["C"]]
    assert accepted == []
    assert not [r for r in scored if r["kind"] == "stuffing" and r["H"]]


def test_rubric_accepts_every_true_control_of_the_slice(scored):
    rejected = [(r["kind"], r["reply"], r["reason"]) for r in scored if r["kind"] in bench.CONTROL_KINDS and not r["C"]]
    assert rejected == []


def test_summary_uses_clopper_pearson():
    rows = [{"kind": "hedge", "C": 0, "H": 0}] * 50 + [{"kind": "control_teacher", "C": 1, "H": 1}] * 49 + [
        {"kind": "control_teacher", "C": 0, "H": 0}]
    s = bench.summarize(rows)
    # 0 of 50: upper bound 1 - 0.025^(1/50) = 0.0711; 49 of 50: lower bound = Beta(49, 2) quantile 0.025 = 0.8935
    assert s["hedge"]["C1"] == 0 and s["hedge"]["C1_ci95"] == [0.0, 0.0711]
    assert s["control_teacher"]["C1_rate"] == 0.98 and s["control_teacher"]["C1_ci95"][0] == pytest.approx(0.8935, abs=1e-4)
    assert s["stuffing"]["n"] == 0
