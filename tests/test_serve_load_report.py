"""The serving load benchmark's target verdicts (benchmarks/serve_load.py) on hand-made summaries."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("serve_load_bench", Path(__file__).resolve().parents[1] / "benchmarks/serve_load.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # its dataclasses look their module up there
_spec.loader.exec_module(bench)


def summary(accepted: int, requests: int, within: float | None, p99: float | None, gap: float | None,
            below_floor: int | None = 0) -> dict:
    s = {"accepted": accepted, "requests": requests, "rejected_429": requests - accepted,
         "within_deadline_of_accepted": within, "client_ms": {"p99": p99}, "gap_ms": {"max_abs": gap},
         "hangs_or_transport_errors": 0}
    if below_floor is not None:
        s["rejected_below_min_thinking"] = below_floor
    return s


def test_nothing_accepted_is_not_judged_as_a_miss():
    s = summary(0, 16, None, None, None, below_floor=4)
    assert bench.latency_verdict(s, 1000) == ("nothing to judge: no request accepted (16 of 16 refused with 429, "
                                               "4 of them below the thinking floor)")
    old = summary(0, 16, None, None, None, below_floor=None)  # results written before the floor was counted
    assert bench.latency_verdict(old, 1000) == "nothing to judge: no request accepted (16 of 16 refused with 429)"


def test_latency_verdicts_on_the_boundaries():
    assert bench.latency_verdict(summary(10, 10, 1.0, 1100.0, 3.0), 1000) == "MET (100.00% within, p99 1100.0 ms)"
    assert bench.latency_verdict(summary(10, 10, 1.0, 1100.1, 3.0), 1000).startswith("NOT MET")
    assert bench.latency_verdict(summary(1000, 1000, 0.998, 900.0, 3.0), 1000) == "NOT MET (99.80% within, p99 900.0 ms)"


def test_target_lines_cover_load_sustainable_and_cold():
    result = {"deadline_ms": 1000,
              "deployment": {"load": [{"rate": 2.0, "all": summary(0, 16, None, None, None)},
                                      {"rate": 6.0, "overload": True, "all": summary(5, 8, 1.0, 990.0, 51.0)}],
                             "sustainable": {"drpo": {"rate": None, "latency_only_rate": 2.0, "unloaded_goodput": 0.125}}},
              "cold": {"rate": 6.0, "cold": summary(73, 73, 1.0, 954.4, 10.1), "warm": summary(80, 88, 0.5, 999.0, 1.0)}}
    lines = bench.target_lines(result)
    assert lines[0].endswith("nothing to judge: no request accepted (16 of 16 refused with 429, 0 of them below the "
                             "thinking floor); server figure within 50 ms of the client's: nothing to judge; hangs 0")
    assert lines[1].startswith("6.0 req/s (3×): ≥ 99.9% within 1000 ms and p99 ≤ 1100 ms: MET (100.00% within")
    assert "server figure within 50 ms of the client's: NOT MET (max gap 51.0 ms)" in lines[1]
    assert lines[2] == ("drpo: sustainable rate with goodput ≥ 90% of unloaded (12.5%): none of the tested rates "
                        "(latency targets alone: 2.0)")
    assert lines[3] == "cold never-stopping student at 6.0 req/s: MET (100.00% within, p99 954.4 ms), 0 of 73 refused"
    assert lines[4] == "warm never-stopping student at 6.0 req/s: NOT MET (50.00% within, p99 999.0 ms), 8 of 88 refused"
