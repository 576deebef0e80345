"""The serving load benchmark's target verdicts and goodput-against-the-deadline summaries (benchmarks/serve_load*.py),
on hand-made summaries and outcomes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import serve_load as bench  # noqa: E402
import serve_load_client as client  # noqa: E402
import serve_load_report as report  # noqa: E402


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
    assert report.latency_verdict(s, 1000) == ("nothing to judge: no request accepted (16 of 16 refused with 429, "
                                               "4 of them below the thinking floor)")
    old = summary(0, 16, None, None, None, below_floor=None)  # results written before the floor was counted
    assert report.latency_verdict(old, 1000) == "nothing to judge: no request accepted (16 of 16 refused with 429)"


def test_latency_verdicts_on_the_boundaries():
    assert report.latency_verdict(summary(10, 10, 1.0, 1100.0, 3.0), 1000) == "MET (100.00% within, p99 1100.0 ms)"
    assert report.latency_verdict(summary(10, 10, 1.0, 1100.1, 3.0), 1000).startswith("NOT MET")
    assert report.latency_verdict(summary(1000, 1000, 0.998, 900.0, 3.0), 1000) == "NOT MET (99.80% within, p99 900.0 ms)"


def test_target_lines_cover_load_sustainable_and_cold():
    result = {"deadline_ms": 1000,
              "deployment": {"load": [{"rate": 2.0, "all": summary(0, 16, None, None, None)},
                                      {"rate": 6.0, "overload": True, "all": summary(5, 8, 1.0, 990.0, 51.0)}],
                             "sustainable": {"drpo": {"rate": None, "latency_only_rate": 2.0, "unloaded_goodput": 0.125}}},
              "cold": {"rate": 6.0, "cold": summary(73, 73, 1.0, 954.4, 10.1), "warm": summary(80, 88, 0.5, 999.0, 1.0)}}
    lines = report.target_lines(result)
    assert lines[0].endswith("nothing to judge: no request accepted (16 of 16 refused with 429, 0 of them below the "
                             "thinking floor); server figure within 50 ms of the client's: nothing to judge; hangs 0")
    assert lines[1].startswith("6.0 req/s (3×): ≥ 99.9% within 1000 ms and p99 ≤ 1100 ms: MET (100.00% within")
    assert "server figure within 50 ms of the client's: NOT MET (max gap 51.0 ms)" in lines[1]
    assert lines[2] == ("drpo: sustainable rate with goodput ≥ 90% of unloaded (12.5%): none of the tested rates "
                        "(latency targets alone: 2.0)")
    assert lines[3] == "cold never-stopping student at 6.0 req/s: MET (100.00% within, p99 954.4 ms), 0 of 73 refused"
    assert lines[4] == "warm never-stopping student at 6.0 req/s: NOT MET (50.00% within, p99 999.0 ms), 8 of 88 refused"


# -- goodput against the deadline: the one goodput definition over hand-made outcomes -----------------------
def out(status: int, ms: float, arm: str = "rft", fallback: bool = False, correct: bool | None = None,
        helpful: bool = False):
    return client.Outcome(status, ms, arm, fallback=fallback, correct=correct, helpful=helpful)


OUTS = [
    out(200, 400.0, correct=True, helpful=True),  # good at 500 ms and later
    out(200, 600.0, correct=True),  # good from 750 ms: late at 500
    out(200, 450.0, correct=False),  # answered, wrong
    out(200, 300.0, fallback=True),  # the fallback: not an answer
    out(429, 4.0),  # refused
    out(0, 10_500.0),  # no answer (hang or transport error)
    out(200, 2000.0, correct=True, helpful=True),  # good only at 2,500 ms
    out(200, 480.0, correct=True, helpful=True),  # good
]


def test_deadline_stats_counts_and_interval():
    from livethink.eval.goodput import wilson_interval

    s = report.deadline_stats(OUTS, 500)
    assert {k: s[k] for k in ("sent", "answered", "correct", "fallback", "refused", "late", "errors", "good")} == \
        {"sent": 8, "answered": 5, "correct": 4, "fallback": 1, "refused": 1, "late": 2, "errors": 1, "good": 2}
    assert s["goodput"] == 0.25 and s["helpful"] == 2
    assert s["goodput_ci95"] == [round(x, 4) for x in wilson_interval(2, 8)]
    # client e2e of the 200 replies only (the 429 and the hang are left out): 300 400 450 480 600 2000
    assert s["client_ms"] == {"p50": 465.0, "p95": 1650.0}
    later = report.deadline_stats(OUTS, 2500)  # the same replies judged against a longer deadline (plain vLLM)
    assert (later["good"], later["late"], later["helpful"]) == (4, 0, 3)
    nothing = report.deadline_stats([], 1000)
    assert nothing["goodput"] == 0 and nothing["goodput_ci95"] == [0.0, 1.0] and nothing["client_ms"]["p50"] is None


def test_goodput_of_the_load_summary_is_correct_not_helpful():
    s = report.summarize(OUTS, 1000)
    assert s["goodput_share"] == 0.375  # 3 correct model replies within 1 s of 8 sent; helpfulness not required
    assert s["helpful_share"] == 0.25
    assert s["requests"] == 8 and s["accepted"] == 6 and s["rejected_429"] == 1 and s["hangs_or_transport_errors"] == 1


def test_sweep_table_one_line_per_series_and_deadline():
    rows = [report.sweep_row("vllm", "rft", "loaded", 2.0, d, OUTS) for d in (2500, 500)]
    rows.insert(0, report.sweep_row("livethink", "drpo", "unloaded", None, 500, OUTS[:2]))
    lines = report.sweep_table(rows)
    assert lines[0].startswith("| server | model | load | deadline ms | sent | answered | correct | fallback | 429 |")
    assert lines[2] == "| livethink | drpo | unloaded | 500 | 2 | 2 | 2 | 0 | 0 | 1 | 0 | 50.0% [9.4, 90.5] | 50.0% | 500.0 / 590.0 |"
    assert lines[3].startswith("| plain vLLM | rft | 2 req/s | 500 | 8 | 5 | 4 | 1 | 1 | 2 | 1 | 25.0% [7.1, 59.1] |")
    assert lines[4].startswith("| plain vLLM | rft | 2 req/s | 2500 |")  # deadlines in order within a series


def arm_summary(goodput: float, p99: float = 900.0) -> dict:
    return {"goodput_share": goodput, "within_deadline_of_accepted": 1.0, "client_ms": {"p99": p99},
            "hangs_or_transport_errors": 0}


def test_the_sweeps_load_rate_is_the_highest_every_arm_sustains():
    unloaded = {"rft": {"goodput_share": 0.5}, "drpo": {"goodput_share": 0.3}}
    load = [{"rate": 2.0, "arms": {"rft": arm_summary(0.46), "drpo": arm_summary(0.3)}},
            {"rate": 4.0, "arms": {"rft": arm_summary(0.45), "drpo": arm_summary(0.28)}},
            {"rate": 8.0, "arms": {"rft": arm_summary(0.5), "drpo": arm_summary(0.1)}}]
    assert report.deployment_rate(load, unloaded, 1000)[0] == 4.0
    assert report.sustainable_rates(load, unloaded, 1000)["rft"]["rate"] == 8.0
    load[0]["arms"]["rft"] = arm_summary(0.5, p99=1101.0)  # latency missed
    load[1]["arms"]["rft"] = arm_summary(0.44)  # under 90% of unloaded
    rate, why = report.deployment_rate(load[:2], unloaded, 1000)
    assert rate == 2.0 and why.startswith("no tested rate is sustained by every arm")


def test_report_of_old_and_new_results(tmp_path):
    old = {"deadline_ms": 1000, "notes": [], "environment": {"cpus": 2, "python": "3.11", "loadavg_before": [0.1, 0, 0],
                                                             "loadavg_after": [1.0, 0, 0], "total_s": 1.0},
           "command": "python benchmarks/serve_load.py"}
    text = report.write_report(dict(old), tmp_path, "old").read_text()
    assert "correct AND helpful by `RubricJudge`" in text and "against the deadline" not in text
    rows = [report.sweep_row(server, "rft", load, rate, d, OUTS) for server in ("livethink", "vllm")
            for load, rate in (("unloaded", None), ("loaded", 2.0)) for d in (500, 1000)]
    new = {**old, "goodput_definition": "correct",
           "deadline_sweep": {"deadlines_ms": [500, 1000], "requests_per_model": 8, "loaded_requests": 8,
                              "load_rate": 2.0, "load_rate_source": "--sweep-rate", "rows": rows}}
    text = report.write_report(new, tmp_path, "new").read_text()
    assert "## Goodput against the deadline" in text and "![goodput against the deadline](serve_load_new.png)" in text
    assert "answered by the model (not the fallback, not refused) correctly" in text
    assert (tmp_path / "serve_load_new.png").stat().st_size > 0
    assert json.loads((tmp_path / "serve_load_new.json").read_text())["deadline_sweep"]["plot"] == "serve_load_new.png"


def test_models_given_by_name(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    notes: list[str] = []
    models = bench.parse_models([f"b={tmp_path / 'b'}", f"a={tmp_path / 'a'}"], tmp_path, None, None, notes)
    assert list(models) == ["b", "a"] and not notes
    default = bench.parse_models([], tmp_path / "runs", tmp_path / "a", None, notes)
    assert list(default) == ["rft"] and "does not exist" in notes[0]
    for bad in ([f"a={tmp_path}"], ["a"], [f"a={tmp_path / 'a'}", f"a={tmp_path / 'b'}"]):
        with pytest.raises(ValueError):
            bench.parse_models(bad, tmp_path, None, None, [])


def test_a_request_without_an_answer_keeps_the_arm_its_viewer_hashes_to():
    import asyncio

    import httpx

    arm_of = bench.experiment_arms(bench.ROOT / "configs/ab/drpo_vs_rft.yaml")
    viewers = [f"sweep-200-{i}" for i in range(200)]
    assert {arm_of(v) for v in viewers} == {"rft", "drpo"}

    def refuse_to_connect(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("down", request=request)

    task = type("T", (), {"product_docs": [], "question": "?", "history": []})()
    c = client.Client("http://test", "livethink", 1000, assign=arm_of)

    async def one() -> client.Outcome:
        async with httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(refuse_to_connect)) as h:
            return await c.one(h, task, viewers[0])

    o = asyncio.run(one())
    assert (o.status, o.arm) == (0, arm_of(viewers[0]))
    assert client.viewer_outcome(o, 1000).status is None  # no answer, for the goodput definition


def test_the_benchmarks_serve_the_students_make_demo_serves():
    from serve_common import RFT_STUDENT, SERVED_STUDENT

    from livethink.demo_job import Settings

    s = Settings.make(False, Path("/workdir"))
    assert (s.runs / RFT_STUDENT, s.runs / SERVED_STUDENT) == (s.rft / "final", s.served / "final")


def test_the_load_client_does_not_pause_for_garbage_collection_during_a_phase():
    """The client's clock is the viewer's: a collection of the benchmark's own heap (up to 300 ms once torch is
    imported) would count as server latency. Inside a phase the collector is off; an explicit one is still counted,
    and the delivery note reports it beside the server's own last-byte count."""
    import gc

    assert gc.isenabled()
    with client.GcPauses() as pauses:
        assert not gc.isenabled()
        gc.collect()
    assert gc.isenabled()
    s = pauses.summary()
    assert s["collections"] == 1 and s["max_ms"] == s["total_ms"] >= 0
    note = report.delivery_note({"server_late_last_byte": 0, "server_answered": 277, "client_gc": {"max_ms": 296.7}})
    assert note == "; late by the server's own last-byte clock: 0 of 277, client GC pauses max 296.7 ms"
    assert report.delivery_note({"requests": 3}) == ""
