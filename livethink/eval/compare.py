"""Comparison math shared by the benchmarks: intervals over seeds and shares (pure, on scipy where it has it)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

T_CONFIDENCE = 0.95


def t_interval(values: Sequence[float], confidence: float = T_CONFIDENCE) -> tuple[float, float | None, float | None]:
    """Mean and two-sided Student-t interval of the mean (bounds None for fewer than 2 values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    sd = statistics.stdev(values)
    if sd == 0:
        return mean, mean, mean
    from scipy.stats import t

    half = float(t.ppf((1 + confidence) / 2, len(values) - 1)) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half
