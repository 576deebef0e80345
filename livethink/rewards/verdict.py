"""What every judge returns (``Verdict``) and the ``Judge`` protocol, shared by the rubric and LLM judges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from livethink.data.schema import Task
from livethink.rewards.parse import Completion


@dataclass(frozen=True)
class Verdict:
    correct: bool
    helpful: bool  # always False when not correct
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        """Why the judge could not decide (endpoint down, unparsable answer), or None."""
        return self.details.get("error")

    @property
    def accepted(self) -> bool:
        """The RFT acceptance rule: C = 1 and H = 1."""
        return self.correct and self.helpful


@runtime_checkable
class Judge(Protocol):
    name: str

    def score(self, task: Task, completion: Completion) -> Verdict: ...

    def score_many(self, items: Sequence[tuple[Task, Completion]]) -> list[Verdict]: ...
