"""benchmarks/holdout_students.py: per-model figures, the paired comparison and the budget targets, on hand-made
per-task samples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("holdout_students", ROOT / "benchmarks/holdout_students.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _rows(correct: list[int], tokens: int, claims: list[int] | None = None) -> dict[str, dict]:
    claims = claims or [0] * len(correct)
    return {f"t{i}": {"task_id": f"t{i}", "correct": bool(c), "helpful": bool(c), "false_claims": k,
                      "unsupported_claims": 0, "total_tokens": tokens, "reasoning_tokens": tokens - 10,
                      "reply_tokens": 10, "finish_reason": "stop"} for i, (c, k) in enumerate(zip(correct, claims, strict=True))}


def test_model_row_paired_and_targets_on_hand_made_samples(tmp_path: Path):
    (tmp_path / "thinking_calibration.json").write_text(json.dumps({"min_thinking_tokens": 64}))
    rft = {None: _rows([1, 1, 0, 0, 1, 0, 1, 0], 200, [0, 0, 1, 0, 0, 0, 0, 0]), 64: _rows([1, 0, 0, 0, 0, 0, 0, 0], 70)}
    served = {None: _rows([1, 1, 1, 0, 1, 0, 1, 0], 90), 64: _rows([1, 1, 0, 0, 1, 0, 1, 0], 60)}
    a = bench.model_row("served", str(tmp_path), served, [64])
    b = bench.model_row("rft", str(tmp_path / "none"), rft, [64])
    assert a["correct"]["successes"] == 5 and a["correct"]["mean"] == pytest.approx(5 / 8)
    assert b["false_claim"]["successes"] == 1 and b["floor_validation"] is None and a["floor_validation"] == 64
    assert 0.0 <= a["correct"]["low"] <= a["correct"]["mean"] <= a["correct"]["high"] <= 1.0
    d = bench.paired(served[64], rft[64])
    assert d["difference"] == pytest.approx(3 / 8) and (d["only_a"], d["only_b"]) == (3, 0)
    t = bench.targets(a, b)
    # C at 64 = 4/8 = 0.5 ≥ 0.9 · RFT's 4/8 = 0.45; floor 64 ≤ 64; 5/8 ≥ 4/8 − 0.02; H likewise; 90 ≤ 100 tokens
    assert {k: v["met"] for k, v in t.items()} == {"correct_at_64_vs_rft": True, "floor_tokens": True,
                                                   "correct_vs_rft": True, "helpful_vs_rft": True,
                                                   "tokens_vs_rft": True}
    assert not bench.targets(b, a)["tokens_vs_rft"]["met"]  # 200 tokens is not half of 90
