"""A/B testing of model variants: experiment configs, GrowthBook-compatible assignment, a durable event log,
statistics (z / Welch / SRM / mSPRT / CUPED), reports and a traffic simulator.

Modules: ``experiment`` (YAML → Experiment), ``assignment`` (hashing, bucket ranges), ``events`` (schemas),
``store`` (SQLite/PostgreSQL log), ``writer`` (group commit), ``stats`` (pure statistics), ``analysis``,
``report``, ``simulate``, ``hooks`` (what the server calls), ``cli``. Names below are imported lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Experiment": "experiment",
    "load_experiment": "experiment",
    "load_experiments": "experiment",
    "parse_experiment": "experiment",
    "Assigner": "assignment",
    "Assignment": "assignment",
    "gb_hash": "assignment",
    "bucket_ranges": "assignment",
    "choose_variation": "assignment",
    "OutcomeIn": "events",
    "validate_outcome": "events",
    "parse_event": "events",
    "EventStore": "store",
    "Ack": "store",
    "BatchWriter": "writer",
    "analyze": "analysis",
    "write_report": "report",
    "simulate_offline": "simulate",
    "simulate_http": "simulate",
    "ExperimentHooks": "hooks",
    "ExperimentHooksProtocol": "hooks",
    "open_hooks": "hooks",
    "close_hooks": "hooks",
    "record_outcome": "hooks",
    "arecord_outcome": "hooks",
    "experiment_summary": "hooks",
    "ABError": "errors",
    "ExperimentConfigError": "errors",
    "EventValidationError": "errors",
    "EventConflictError": "errors",
    "UnknownExperimentError": "errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'livethink.ab_test' has no attribute {name!r}")
    return getattr(importlib.import_module(f"livethink.ab_test.{module}"), name)
