"""Experiment definitions: YAML → validated, immutable ``Experiment`` objects.

One file holds one experiment (a mapping with ``name``) or several (``experiments: [...]``). See
``configs/ab/*.yaml`` and ``docs/ab_test.md`` for the fields. Validation is strict and every error names
its field, e.g. ``arms.1.weight``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from livethink.ab_test.errors import ExperimentConfigError, UnknownArmError
from livethink.ab_test.metrics import METRICS, VIEWER_METRICS

# Model variants an arm may serve: the RFT student, the teacher and every stage-2 variant of
# livethink.length_rl.registry with its aliases (tests/test_config_dry_runs.py keeps the two in step).
KNOWN_VARIANTS: frozenset[str] = frozenset(
    {"teacher", "rft", "band", "baseline", "cosine", "dapo_overlong", "dler", "dot", "drpo", "gdpo",
     "length_penalty", "siri"}
)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
WEIGHT_TOLERANCE = 1e-6


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetSettings(_Strict):
    """Latency-budget settings an arm overrides (interpreted by the server's budget controller)."""

    deadline_ms: int | None = Field(default=None, gt=0)
    thinking_budget: int | None = Field(default=None, ge=0)
    reply_reserve: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)


class Arm(_Strict):
    """One arm (GrowthBook: variation): a share of traffic served by a model variant and/or budget."""

    name: str = Field(pattern=NAME_PATTERN)
    weight: float = Field(ge=0.0, le=1.0)
    variant: str | None = None
    budget: BudgetSettings | None = None
    description: str = ""

    @field_validator("weight")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


class Namespace(_Strict):
    """GrowthBook namespace: the experiment only sees viewers whose namespace hash is in [start, end)."""

    id: str = Field(min_length=1)
    start: float = Field(ge=0.0, le=1.0)
    end: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> Namespace:
        if self.start >= self.end:
            raise ValueError(f"namespace start {self.start} must be < end {self.end}")
        return self


class SequentialSettings(_Strict):
    """mSPRT always-valid inference; ``tuning`` = expected sample size S the mixture is tuned for."""

    enabled: bool = True
    tuning: int = Field(default=5000, gt=0)


class CupedSettings(_Strict):
    """CUPED variance reduction with the pre-exposure value of the same metric as covariate."""

    enabled: bool = False
    lookback_days: float = Field(default=14.0, gt=0)


class Experiment(_Strict):
    """A validated experiment. ``seed`` defaults to ``name`` (GrowthBook: experiment key)."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    seed: str | None = None
    hash_version: Literal[1, 2] = 2
    coverage: float = Field(default=1.0, ge=0.0, le=1.0)
    arms: tuple[Arm, ...] = Field(min_length=2)
    control: str | None = None
    namespace: Namespace | None = None
    start: datetime | None = None
    stop: datetime | None = None
    primary_metric: str = "order_rate"
    guardrails: tuple[str, ...] = ("latency_ms", "error_rate", "deadline_met_rate")
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    srm_threshold: float = Field(default=0.001, gt=0.0, lt=0.5)
    min_viewers_per_arm: int = Field(default=150, ge=1)
    sequential: SequentialSettings = SequentialSettings()
    cuped: CupedSettings = CupedSettings()

    @field_validator("start", "stop")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        return v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v

    @field_validator("primary_metric")
    @classmethod
    def _primary_known(cls, v: str) -> str:
        if v not in VIEWER_METRICS:
            raise ValueError(f"unknown viewer-level metric {v!r}; choose from {', '.join(VIEWER_METRICS)}")
        return v

    @field_validator("guardrails")
    @classmethod
    def _guardrails_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [m for m in v if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {', '.join(METRICS)}")
        return v

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Experiment:
        names = [a.name for a in self.arms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"arms: duplicate arm name(s) {dupes}")
        total = math.fsum(a.weight for a in self.arms)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"arms: weights sum to {total:.6g}, they must sum to 1 (±{WEIGHT_TOLERANCE:g})")
        known = (info.context or {}).get("known_variants", KNOWN_VARIANTS) if info else KNOWN_VARIANTS
        for i, arm in enumerate(self.arms):
            if arm.variant is not None and arm.variant not in known:
                raise ValueError(f"arms.{i}.variant: unknown variant {arm.variant!r}; known: {sorted(known)}")
        if self.control is not None and self.control not in names:
            raise ValueError(f"control: {self.control!r} is not an arm (arms: {names})")
        if self.start and self.stop and self.start >= self.stop:
            raise ValueError(f"start {self.start.isoformat()} must be before stop {self.stop.isoformat()}")
        return self

    # -- derived ----------------------------------------------------------------------------------------
    @property
    def hash_seed(self) -> str:
        return self.name if self.seed is None else self.seed

    @property
    def arm_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms)

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(a.weight for a in self.arms)

    @property
    def control_arm(self) -> str:
        return self.control or self.arms[0].name

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise UnknownArmError(
            f"arm: unknown arm {name!r} for experiment {self.name!r} (arms: {list(self.arm_names)})"
        )

    def is_running(self, now: datetime | None = None) -> bool:
        now = now or datetime.now(UTC)
        return (self.start is None or now >= self.start) and (self.stop is None or now < self.stop)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def digest(self) -> str:
        """Stable content hash (identifies a config version in the event store)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _format_validation_error(exc: ValidationError, where: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return f"{where}: " + "; ".join(parts)


def parse_experiment(
    data: Any, *, known_variants: Iterable[str] | None = None, where: str = "experiment"
) -> Experiment:
    """Validate one experiment mapping; raise ``ExperimentConfigError`` naming the field."""
    if not isinstance(data, dict):
        raise ExperimentConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    context = {"known_variants": frozenset(known_variants) if known_variants is not None else KNOWN_VARIANTS}
    try:
        return Experiment.model_validate(data, context=context)
    except ValidationError as exc:
        name = data.get("name")
        raise ExperimentConfigError(
            _format_validation_error(exc, f"{where} {name!r}" if name else where)
        ) from None


def load_experiments(
    path: str | Path, *, known_variants: Iterable[str] | None = None
) -> dict[str, Experiment]:
    """Read a YAML file with one experiment or ``experiments: [...]``; returns name → Experiment."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ExperimentConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        from livethink.yaml_files import yaml_error_line

        raise ExperimentConfigError(yaml_error_line(path, exc)) from None
    if isinstance(raw, dict) and "experiments" in raw:
        if set(raw) != {"experiments"} or not isinstance(raw["experiments"], list):
            raise ExperimentConfigError(f"{path}: 'experiments' must be the only key and hold a list")
        items = raw["experiments"]
    else:
        items = [raw]
    out: dict[str, Experiment] = {}
    for i, item in enumerate(items):
        exp = parse_experiment(item, known_variants=known_variants, where=f"{path}: experiments.{i}")
        if exp.name in out:
            raise ExperimentConfigError(
                f"{path}: experiments.{i}.name: duplicate experiment name {exp.name!r}"
            )
        out[exp.name] = exp
    if not out:
        raise ExperimentConfigError(f"{path}: no experiments defined")
    return out


def load_experiment(path: str | Path, name: str | None = None, **kwargs: Any) -> Experiment:
    """Load one experiment from a file; ``name`` is required when the file defines several."""
    experiments = load_experiments(path, **kwargs)
    if name is None:
        if len(experiments) != 1:
            raise ExperimentConfigError(f"{path}: defines {sorted(experiments)}; pass the experiment name")
        return next(iter(experiments.values()))
    if name not in experiments:
        raise ExperimentConfigError(
            f"{path}: experiment: no experiment named {name!r} (have {sorted(experiments)})"
        )
    return experiments[name]
