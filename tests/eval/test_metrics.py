"""Evaluation aggregation on hand-computed cases."""

from __future__ import annotations

import pytest

from livethink.eval.metrics import (
    SampleEval,
    decode_flops,
    latency_summary,
    percentile,
    summarize,
    summarize_by_kind,
)
from livethink.eval.report import by_kind_table, overall_table


def _samples():
    return [
        SampleEval("a", "price", True, True, 100, 20),
        SampleEval("b", "price", True, False, 50, 10),
        SampleEval("c", "attribute", False, False, 30, 10, "length"),
        SampleEval("d", "attribute", True, True, 20, 10),
    ]


def test_summarize_hand_computed():
    s = summarize(_samples(), active_params=1_000_000)
    assert s["n"] == 4
    assert s["correctness"] == 0.75 and s["helpfulness"] == 0.5
    assert s["reasoning_tokens"] == 50.0 and s["reply_tokens"] == 12.5 and s["total_tokens"] == 62.5
    assert s["truncated_rate"] == 0.25
    assert s["decode_gflops_per_reply"] == pytest.approx(2 * 1e6 * 62.5 / 1e9)
    assert summarize([]) == {"n": 0}


def test_by_kind():
    by_kind = summarize_by_kind(_samples())
    assert by_kind["price"]["correctness"] == 1.0 and by_kind["price"]["total_tokens"] == 90.0
    assert by_kind["attribute"]["correctness"] == 0.5


def test_percentile_and_latency():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile([], 50) == 0.0
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    lat = latency_summary([0.01, 0.03], [0.1, 0.3])
    assert lat["ttft_ms_p50"] == 20.0 and lat["e2e_ms_p50"] == 200.0 and lat["n"] == 2


def test_decode_flops():
    assert decode_flops(3_000_000_000, 152) == 2 * 3e9 * 152
    assert decode_flops(None, 10) is None


def test_tables_render_rows():
    result = {"name": "m", "overall": summarize(_samples(), 10), "by_kind": summarize_by_kind(_samples(), 10), "latency": None}
    table = overall_table([result])
    assert table.splitlines()[2].startswith("| m | 4 | 75.0% | 50.0% |")
    assert table.splitlines()[1].count("---") == 12
    assert "| price | 100.0% / 50.0% / 90.0 |" in by_kind_table([result])
