"""Comparison math shared by the benchmarks (pure): the Pareto front of (cost, quality) points and a point on a
piecewise-linear curve. Intervals live in ``livethink.eval.intervals``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the ``(cost, quality)`` points no other point beats on both lower cost and higher quality,
    by increasing cost."""
    front = []
    for i, (t, q) in enumerate(points):
        if not any((t2 <= t and q2 >= q) and (t2 < t or q2 > q) for j, (t2, q2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def interpolate_at(tokens: float, curve: Sequence[Mapping[str, Any]], label: str = "length_penalty",
                   keys: Sequence[str] = ("correctness", "helpfulness")) -> Mapping[str, Any]:
    """A point on the piecewise-linear curve through ``curve`` (rows with ``name``, ``tokens`` and ``keys``) at
    ``tokens``; outside the curve's token range, its nearest end (that row itself). An interpolated point is named
    ``"<label> interpolated between <lower> and <upper>"``."""
    pts = sorted(curve, key=lambda r: r["tokens"])
    if tokens <= pts[0]["tokens"] or len(pts) == 1:
        return pts[0]
    if tokens >= pts[-1]["tokens"]:
        return pts[-1]
    lo, hi = next((a, b) for a, b in zip(pts, pts[1:], strict=False) if a["tokens"] <= tokens <= b["tokens"])
    w = (tokens - lo["tokens"]) / (hi["tokens"] - lo["tokens"]) if hi["tokens"] > lo["tokens"] else 0.0
    return {"name": f"{label} interpolated between {lo['name']} and {hi['name']}", "tokens": tokens,
            **{k: lo[k] + w * (hi[k] - lo[k]) for k in keys}}
