"""Errors of the A/B package. Each message names the offending field so callers can show it as-is."""

from __future__ import annotations


class ABError(ValueError):
    """Base class: bad input to the A/B package (config, events, queries)."""


class ExperimentConfigError(ABError):
    """An experiment definition is invalid (YAML shape, weights, arms, variants, schedule)."""


class UnknownExperimentError(ABError, KeyError):
    """An event or query names an experiment that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown experiment"


class UnknownArmError(ABError, KeyError):
    """A request or query names an arm that the experiment (or no experiment) has."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown arm"


class EventValidationError(ABError):
    """An event is malformed: wrong type, missing or out-of-range field, unknown arm."""


class EventConflictError(ABError):
    """An event id was already stored with different content (same id must mean the same event)."""

    def __init__(self, event_ids: list[str]):
        self.event_ids = list(event_ids)
        shown = ", ".join(self.event_ids[:5]) + (" ..." if len(self.event_ids) > 5 else "")
        super().__init__(
            f"event_id: {len(self.event_ids)} id(s) already stored with different content: {shown}"
        )


class SpoolFullError(RuntimeError):
    """The store is unreachable and the local spool holds its maximum: the event was not accepted."""
