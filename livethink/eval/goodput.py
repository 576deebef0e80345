"""Goodput: the share of sent requests a viewer got answered correctly, not with the fallback, and within the
deadline by the viewer's client's clock. The one definition behind every goodput livethink reports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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
    def goodput(self) -> float:
        return self.good / self.sent if self.sent else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {**self.__dict__, "answered_share": self.answered_share, "goodput": self.goodput}


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
