"""Per-sample evaluation records and their aggregation (pure functions)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SampleEval:
    task_id: str
    kind: str
    correct: bool
    helpful: bool
    reasoning_tokens: int
    reply_tokens: int
    finish_reason: str = "stop"
    false_claims: int = 0  # claims in the reply that the product docs contradict (the judge's ``claims``)
    unsupported_claims: int = 0  # claims the docs do not support (the judge's ``unsupported``)

    @property
    def total_tokens(self) -> int:
        return self.reasoning_tokens + self.reply_tokens


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def decode_flops(active_params: int | None, tokens: float) -> float | None:
    """Decode FLOPs per reply ≈ 2 · active parameters · generated tokens."""
    return None if active_params is None else 2.0 * active_params * tokens


def summarize(samples: Sequence[SampleEval], active_params: int | None = None) -> dict[str, Any]:
    """Rates and mean token counts (overall), plus decode FLOPs per reply."""
    n = len(samples)
    if n == 0:
        return {"n": 0}
    mean_total = statistics.fmean(s.total_tokens for s in samples)
    flops = decode_flops(active_params, mean_total)
    return {
        "n": n,
        "correctness": round(sum(s.correct for s in samples) / n, 4),
        "helpfulness": round(sum(s.helpful for s in samples) / n, 4),
        "reasoning_tokens": round(statistics.fmean(s.reasoning_tokens for s in samples), 1),
        "reply_tokens": round(statistics.fmean(s.reply_tokens for s in samples), 1),
        "total_tokens": round(mean_total, 1),
        "truncated_rate": round(sum(s.finish_reason == "length" for s in samples) / n, 4),
        "false_claim_rate": round(sum(s.false_claims > 0 for s in samples) / n, 4),
        "unsupported_claim_rate": round(sum(s.unsupported_claims > 0 for s in samples) / n, 4),
        "decode_gflops_per_reply": None if flops is None else round(flops / 1e9, 4),
    }


def summarize_by_kind(samples: Sequence[SampleEval], active_params: int | None = None) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[SampleEval]] = defaultdict(list)
    for s in samples:
        groups[s.kind].append(s)
    return {kind: summarize(group, active_params) for kind, group in sorted(groups.items())}


def latency_summary(ttft_s: Sequence[float], e2e_s: Sequence[float]) -> dict[str, Any]:
    ms = 1000.0
    return {
        "n": len(e2e_s),
        "ttft_ms_p50": round(percentile(ttft_s, 50) * ms, 1),
        "ttft_ms_p95": round(percentile(ttft_s, 95) * ms, 1),
        "e2e_ms_p50": round(percentile(e2e_s, 50) * ms, 1),
        "e2e_ms_p95": round(percentile(e2e_s, 95) * ms, 1),
    }


def sample_dicts(samples: Sequence[SampleEval]) -> list[dict[str, Any]]:
    return [asdict(s) | {"total_tokens": s.total_tokens} for s in samples]
