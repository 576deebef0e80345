"""Goodput: the share of sent requests a viewer got answered correctly, not with the fallback, and within the
deadline by the viewer's client's clock. The one definition behind every goodput livethink reports."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the binomial share ``successes / n`` at ``confidence`` (two-sided). It stays
    inside [0, 1] and keeps a useful width at 0 or n successes, where the normal (Wald) interval collapses.
    ``n == 0`` says nothing: (0, 1)."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n]: got {successes} of {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1): got {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ViewerOutcome:
    """What one request's client saw."""

    status: int | None  # HTTP status; None when no answer came
    client_ms: float  # request sent -> last byte received, on the client's clock
    deadline_ms: float
    fallback: bool = False  # the server's fallback reply, not the model's
    correct: bool | None = None  # the rubric judge's verdict; None when not judged

    @property
    def answered(self) -> bool:
        """A reply from the model (not a refusal, an error or the fallback)."""
        return self.status == 200 and not self.fallback

    @property
    def in_deadline(self) -> bool:
        return self.status == 200 and self.client_ms <= self.deadline_ms

    @property
    def good(self) -> bool:
        return self.answered and self.in_deadline and bool(self.correct)


@dataclass(frozen=True)
class GoodputSummary:
    sent: int
    answered: int  # 200 and not the fallback
    fallback: int
    refused: int  # 429
    errors: int  # anything else, or no answer
    in_deadline: int  # 200 within the deadline (model or fallback)
    correct: int  # answered and judged correct
    good: int

    @property
    def answered_share(self) -> float:
        return self.answered / self.sent if self.sent else 0.0

    @property
    def late(self) -> int:
        """200 replies (model or fallback) that came after the deadline by the client's clock."""
        return self.answered + self.fallback - self.in_deadline

    @property
    def goodput(self) -> float:
        return self.good / self.sent if self.sent else 0.0

    def goodput_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson interval of the goodput (the sent requests as independent trials)."""
        return wilson_interval(self.good, self.sent, confidence)

    def to_dict(self) -> dict[str, float | int | list[float]]:
        return {
            **self.__dict__,
            "late": self.late,
            "answered_share": self.answered_share,
            "goodput": self.goodput,
            "goodput_ci95": list(self.goodput_interval()),
        }


def summarize(outcomes: Iterable[ViewerOutcome]) -> GoodputSummary:
    rows = list(outcomes)
    return GoodputSummary(
        sent=len(rows),
        answered=sum(o.answered for o in rows),
        fallback=sum(o.status == 200 and o.fallback for o in rows),
        refused=sum(o.status == 429 for o in rows),
        errors=sum(o.status not in (200, 429) for o in rows),
        in_deadline=sum(o.in_deadline for o in rows),
        correct=sum(o.answered and bool(o.correct) for o in rows),
        good=sum(o.good for o in rows),
    )
