"""The trust-region benchmark's own figures on hand-made samples: the share of steps whose KL pressed, and the
per-cap correctness, claim shares and paired difference it reports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import trust_region  # noqa: E402


def _samples(correct: list[bool], false_claims: list[int]) -> dict:
    rows = {f"t{i}": {"task_id": f"t{i}", "correct": c, "helpful": c, "false_claims": f, "unsupported_claims": 0,
                      "total_tokens": 100 + i, "reasoning_tokens": 80, "reply_tokens": 20 + i}
            for i, (c, f) in enumerate(zip(correct, false_claims, strict=True))}  # fmt: skip
    return {cap: rows for cap in (None, *trust_region.CAPS)}


def test_kl_pressure_is_the_share_of_steps_over_delta(tmp_path: Path):
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 1, "drpo/kl_over_delta": 1.0}, {"step": 2, "drpo/kl_over_delta": 0.0},
        {"step": 3, "drpo/kl_over_delta": 0.0}, {"step": 4, "drpo/kl_over_delta": 1.0}, {"step": 5})))  # fmt: skip
    assert trust_region.kl_pressure(run / "final") == 0.5
    assert trust_region.kl_pressure(tmp_path / "missing" / "final") is None


def test_figures_and_paired_difference_on_the_same_tasks():
    base = _samples([True, True, False, False], [0, 0, 1, 0])
    live = _samples([True, False, True, True], [0, 1, 0, 0])
    figures = trust_region.model_figures(base)
    assert figures["n"] == 4 and figures["tokens"] == 101.5
    assert figures["correct"]["None"]["successes"] == 2 and figures["false_claim"]["successes"] == 1
    d = trust_region.paired(live[None], base[None])
    assert (d["only_a"], d["only_b"]) == (2, 1) and abs(d["difference"] - 0.25) < 1e-9
    result = {"command": "python benchmarks/trust_region.py", "n": 4, "baseline": "b", "candidate": "c",
              "kl_pressure": {"baseline": 0.0, "trust_region": 0.5}, "loadavg_before": [0.1], "loadavg_after": [0.1],
              "models": {"baseline": figures, "trust_region": trust_region.model_figures(live)},
              "paired": {"uncapped": d, **{str(c): d for c in trust_region.CAPS}}}  # fmt: skip
    md = trust_region.markdown(result)
    assert "| uncapped | 50.0% [" in md and "+25.0 [" in md
