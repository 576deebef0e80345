"""A/B testing of model variants: experiment configs, GrowthBook-compatible assignment, a durable event log,
statistics (z / Welch / SRM / mSPRT / CUPED), reports and a traffic simulator.

Modules: ``experiment`` (YAML → Experiment), ``assignment`` (hashing, bucket ranges), ``events`` (schemas),
``store`` (SQLite/PostgreSQL log), ``writer`` (group commit), ``stats`` (pure statistics), ``analysis``,
``phases`` (a weight change starts a phase; SRM per phase),
``report``, ``simulate``, ``serving`` (the types the server programs against), ``hooks`` (what the server
calls), ``cli``. Names below are imported lazily.
"""

from __future__ import annotations

from livethink.lazy_exports import lazy_getattr

_MODULES = {
    "experiment": ("Experiment", "load_experiment", "load_experiments", "parse_experiment"),
    "assignment": ("Assigner", "Assignment", "gb_hash", "bucket_ranges", "choose_variation"),
    "events": ("OutcomeIn", "validate_outcome", "parse_event"),
    "store": ("EventStore", "Ack"),
    "writer": ("BatchWriter",),
    "analysis": ("analyze",),
    "phases": ("phases_of", "srm_by_phase"),
    "report": ("write_report",),
    "simulate": ("simulate_offline", "simulate_http"),
    "serving": ("SIMULATED_HEADER", "ArmSettings", "ResponseRecord", "ExperimentHooksProtocol"),
    "hooks": ("ExperimentHooks", "HookSet", "open_hooks", "record_outcome", "arecord_outcome", "experiment_summary"),
    "errors": ("ABError", "ExperimentConfigError", "EventValidationError", "EventConflictError",
               "UnknownExperimentError", "UnknownArmError"),
}  # fmt: skip
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
