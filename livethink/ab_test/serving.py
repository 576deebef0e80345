"""The contract between the server and the A/B package: what serving reads from an arm, what it records about
a reply, the per-experiment hooks it calls and the header that marks simulated traffic.

``livethink.serve.telemetry.ab_hooks`` programs against these types only; a platform can plug in its own experimentation
system by implementing ``ExperimentHooksProtocol``. Errors the hooks raise are ``livethink.ab_test.errors``
(the server turns them into HTTP answers in one place).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from livethink.ab_test.assignment import Assignment
    from livethink.ab_test.events import OutcomeIn
    from livethink.ab_test.experiment import Arm
    from livethink.ab_test.store import Ack

SIMULATED_HEADER = "X-Livethink-Simulated"  # "1" on requests of the traffic simulator (their events are labelled)

SummaryView = Literal["compact", "full"]  # the live view (headline numbers and tests) or the whole analysis


@dataclass(frozen=True)
class ArmSettings:
    """What serving needs from an arm: the model variant it serves and its budget overrides. None is the
    server's default; ``ArmSettings()`` is a request outside every experiment."""

    experiment: str | None = None
    arm: str | None = None
    variant: str | None = None
    deadline_ms: int | None = None
    thinking_budget: int | None = None
    reply_reserve: int | None = None
    max_tokens: int | None = None

    @classmethod
    def of(cls, experiment: str, arm: Arm) -> ArmSettings:
        """The settings of one configured arm of ``experiment``."""
        b = arm.budget
        if b is None:
            return cls(experiment, arm.name, arm.variant)
        return cls(experiment, arm.name, arm.variant, b.deadline_ms, b.thinking_budget, b.reply_reserve,
                   b.max_tokens)  # fmt: skip


RESPONSE_STATUSES = ("answered", "fallback", "refused", "error")


@dataclass(frozen=True)
class ResponseRecord:
    """What the viewer of one request got, as the server measured it; stored as a response event.

    ``status``: answered (the model's reply), fallback (the server's fallback reply), refused (429: no reply) or
    error (failed; ``ok`` and ``rejected`` are read as answered and refused). ``latency_ms``: arrival to the last
    byte on the server's clock (for a refusal, the time to refuse: analysis leaves it out of latency).
    ``ttft_ms``: the first generated token, thinking included; ``first_reply_ms``: the first *reply* token;
    ``first_sentence_ms``: the first sentence sent, when streamed. ``deadline_met``: the reply's last byte within
    the deadline by the server's clock (None without a reply). ``forced_end``: thinking was ended by the server;
    ``cut``: the reply was cut at the deadline. ``correct``/``helpful``: a judge's verdict when the server has
    one (a later judgement is posted as a ``correct`` outcome naming the request id)."""

    latency_ms: float
    ttft_ms: float | None = None
    tokens: int | None = None
    deadline_met: bool | None = None
    status: str = "answered"
    correct: bool | None = None
    helpful: bool | None = None
    first_reply_ms: float | None = None
    first_sentence_ms: float | None = None
    forced_end: bool | None = None
    cut: bool | None = None

    def fields(self) -> dict[str, object]:
        """The response event's measurement fields."""
        f = lambda x: None if x is None else float(x)  # noqa: E731
        return {
            "latency_ms": float(self.latency_ms), "ttft_ms": f(self.ttft_ms), "tokens": self.tokens,
            "deadline_met": self.deadline_met, "correct": self.correct, "helpful": self.helpful,
            "status": self.status, "first_reply_ms": f(self.first_reply_ms),
            "first_sentence_ms": f(self.first_sentence_ms), "forced_end": self.forced_end, "cut": self.cut,
        }  # fmt: skip


@runtime_checkable
class ExperimentHooksProtocol(Protocol):
    """One experiment as the server sees it. ``on_*`` return a future that resolves once the event is durably
    recorded (None when nothing is logged); failures surface through the future, never as a failed reply."""

    name: str

    def assign(self, viewer_id: str) -> Assignment:
        """The viewer's sticky arm (``in_experiment`` False outside coverage, namespace or schedule)."""
        ...

    def arm_names(self) -> tuple[str, ...]: ...

    def arm_settings(self, arm: str) -> ArmSettings:
        """The arm's settings; ``UnknownArmError`` for an arm the experiment lacks."""
        ...

    def on_exposure(
        self, viewer_id: str, assignment: Assignment, *, request_id: str | None = None, ts: float | None = None,
        simulated: bool = False,
    ) -> Future[Ack] | None: ...  # fmt: skip

    def on_response(
        self, viewer_id: str, arm: str | None, record: ResponseRecord, *, request_id: str | None = None,
        ts: float | None = None, simulated: bool = False,
    ) -> Future[Ack] | None: ...  # fmt: skip

    def on_outcome(self, outcome: OutcomeIn | dict[str, Any]) -> Future[Ack]: ...

    def summary(self, max_age_s: float = 5.0, view: SummaryView = "compact") -> dict[str, Any]:
        """The live summary (``GET /v1/ab/experiments/{name}[?view=full]``)."""
        ...

    def close(self) -> None: ...
