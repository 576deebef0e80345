"""benchmarks/speech_goodput.py: the events it reads, the goodput of a streamed reply and the paired comparison,
on hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import speech_goodput as bench  # noqa: E402


def test_events_are_read_in_order_with_their_names():
    lines = ["event: plan", 'data: {"event": "plan", "thinking_cap": 64}', "",
             "event: sentence", 'data: {"event": "sentence", "text": "Hi."}', "", 'data: {"event": "done"}']
    assert bench.read_events(lines) == [("plan", {"event": "plan", "thinking_cap": 64}),
                                        ("sentence", {"event": "sentence", "text": "Hi."}),
                                        ("done", {"event": "done"})]


def _row(status=200, ms=500.0, correct=True, fallback=False, stalls=0, thinking=40, retracted=False):
    return {"status": status, "client_ms": ms, "correct": correct, "fallback": fallback, "stalls": stalls,
            "thinking_tokens": thinking, "retracted": retracted}


def test_a_stall_or_a_late_first_sentence_is_not_good():
    assert bench.outcome(_row(), 1000).good
    assert not bench.outcome(_row(stalls=1), 1000).good  # the avatar fell silent mid-reply
    assert not bench.outcome(_row(ms=1001), 1000).good
    assert not bench.outcome(_row(fallback=True), 1000).good
    assert not bench.outcome({"status": 429, "client_ms": 3.0}, 1000).good


def test_summary_and_paired_difference_on_hand_made_rows():
    whole = [_row(correct=c, thinking=20) for c in (True, False, False, False)]
    speech = [_row(correct=c, thinking=50) for c in (True, True, True, False)]
    speech[3] = _row(status=429, ms=2.0, correct=None)
    s = bench.summarize(speech, 1000)
    assert (s["sent"], s["good"], s["refused"], s["answered"]) == (4, 3, 1, 3)
    assert s["goodput"] == 0.75 and s["thinking_tokens_mean"] == 50.0
    c = bench.compare(whole, speech, 1000)
    assert c["difference"] == pytest.approx(0.5) and (c["only_speech"], c["only_whole"]) == (2, 0)
    assert c["thinking_tokens_gained"] == 30.0 and c["paired_tasks"] == 3
    assert c["ci95"][0] <= 0.5 <= c["ci95"][1]
