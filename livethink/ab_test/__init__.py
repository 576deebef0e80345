"""A/B testing of model variants: experiment configs, GrowthBook-compatible assignment, a durable event log,
statistics (z / Welch / SRM / mSPRT / CUPED), reports and a traffic simulator.

Modules: ``experiment`` (YAML → Experiment), ``assignment`` (hashing, bucket ranges), ``events`` (schemas),
``store`` (SQLite/PostgreSQL log), ``writer`` (group commit), ``stats`` (pure statistics), ``analysis``,
``report``, ``simulate``, ``serving`` (the types the server programs against), ``hooks`` (what the server
calls), ``cli``. Names below are imported lazily.
"""

from __future__ import annotations

from livethink.lazy_exports import lazy_getattr

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
    "SIMULATED_HEADER": "serving",
    "ArmSettings": "serving",
    "ResponseRecord": "serving",
    "ExperimentHooksProtocol": "serving",
    "ExperimentHooks": "hooks",
    "HookSet": "hooks",
    "open_hooks": "hooks",
    "record_outcome": "hooks",
    "arecord_outcome": "hooks",
    "experiment_summary": "hooks",
    "ABError": "errors",
    "ExperimentConfigError": "errors",
    "EventValidationError": "errors",
    "EventConflictError": "errors",
    "UnknownExperimentError": "errors",
    "UnknownArmError": "errors",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
