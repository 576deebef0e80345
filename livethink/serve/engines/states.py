"""The supervision state machine of an engine (pure): ``on_poll`` and ``on_restarted`` over ``Status``, the restart
``backoff`` and the 503's ``retry_after``; ``supervisor`` runs it (see there for the states and transitions)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

State = Literal["ok", "stalled", "dead", "restarting", "failed"]
Action = Literal["none", "stop", "restart", "exit"]
Cause = Literal["died", "stalled", "start_failed"]
SERVING: frozenset[str] = frozenset({"ok", "stalled"})  # requests reach the engine (stalled: cut at the deadline)


@dataclass(frozen=True)
class Policy:
    """``engine.*`` supervision fields of the config (``config.EngineConfig.supervision``)."""

    poll_s: float = 0.5
    restart_max: int = 3
    restart_window_s: float = 600.0
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    stall_s: float = 5.0
    stall_kill_s: float = 30.0
    start_timeout_s: float = 300.0


@dataclass(frozen=True)
class Status:
    state: State = "ok"
    reason: str | None = None
    since: float = 0.0  # monotonic: entered this state
    cause: Cause | None = None  # why it went down (the restart metric's reason)
    restarts: tuple[float, ...] = ()  # monotonic times of restart attempts within the window
    next_attempt: float | None = None  # dead: when the next restart starts


# -- the state machine --------------------------------------------------------------------------------------
def backoff(attempts: int, p: Policy) -> float:
    """Wait before restart attempt number ``attempts + 1`` of the window: ``backoff_s * 2**attempts``, capped."""
    return min(p.backoff_max_s, p.backoff_s * 2**attempts)


def _down(s: Status, reason: str, cause: Cause, now: float, p: Policy) -> tuple[Status, Action]:
    recent = tuple(t for t in s.restarts if now - t < p.restart_window_s)
    if len(recent) >= p.restart_max:
        why = (
            f"{reason}; {len(recent)} restarts within {p.restart_window_s:g} s used up engine.restart_max "
            f"({p.restart_max})"
        )
        return Status("failed", why, now, cause, recent, None), "exit"
    return Status("dead", reason, now, cause, recent, now + backoff(len(recent), p)), "stop"


def on_poll(s: Status, alive: bool, unanswered_s: float | None, now: float, p: Policy) -> tuple[Status, Action]:
    """One liveness poll: ``alive`` is the engine's own liveness, ``unanswered_s`` how long a request has waited
    for any output (None: nothing waits)."""
    if s.state in ("restarting", "failed"):
        return s, "none"
    if s.state == "dead":
        if s.next_attempt is not None and now >= s.next_attempt:
            return Status("restarting", s.reason, now, s.cause, (*s.restarts, now)), "restart"
        return s, "none"
    if not alive:
        return _down(s, "the engine died", "died", now, p)
    if unanswered_s is not None and unanswered_s >= p.stall_kill_s:
        return _down(s, f"the engine stalled: no output for {unanswered_s:.1f} s (engine.stall_kill_s)", "stalled",
                     now, p)  # fmt: skip
    if unanswered_s is not None and unanswered_s >= p.stall_s:
        since = s.since if s.state == "stalled" else now
        return replace(s, state="stalled", reason=f"engine stalled: no output for {unanswered_s:.1f} s",
                       since=since), "none"  # fmt: skip
    if s.state == "stalled":
        return replace(s, state="ok", reason=None, since=now), "none"
    return s, "none"


def on_restarted(s: Status, error: str | None, now: float, p: Policy) -> tuple[Status, Action]:
    """A restart ended: ``error`` None = the engine is up again."""
    if error is None:
        return Status("ok", None, now, None, s.restarts), "none"
    return _down(s, f"restart failed: {error}", "start_failed", now, p)


def retry_after(s: Status, now: float, start_s: float, p: Policy) -> float:
    """Seconds until the engine is likely to serve again (the 503's ``Retry-After``), at least 1."""
    if s.state == "dead" and s.next_attempt is not None:
        wait = max(0.0, s.next_attempt - now) + start_s
    elif s.state == "restarting":
        wait = max(0.0, s.since + start_s - now)
    elif s.state == "stalled":
        wait = p.poll_s
    elif s.state == "failed":
        wait = 60.0  # the process is exiting; its supervisor restarts it
    else:  # it died under a request and the poll has not seen it yet
        wait = p.backoff_s + start_s
    return max(1.0, wait)
