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


class OutcomeDecl(_Strict):
    """An outcome type the experiment accepts beyond click/add_to_cart/order/correct, and the viewer-level metric
    of the same name. ``binary`` (value 0/1, default 1; a thumbs-up, a re-ask): a viewer's value is 1 when any of
    theirs is 1; ``count`` (value a whole number, default 1): the viewer's sum; ``scale`` (value in [min, max],
    a satisfaction score): the viewer's mean. ``missing``: a viewer without the outcome counts as 0 (``zero``) or
    is left out of the metric (``skip``; always for ``scale``). ``window_s``: only outcomes within that many
    seconds of the viewer's first exposure count (re-ask within 60 s)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")
    kind: Literal["binary", "count", "scale"]
    min: float | None = None
    max: float | None = None
    missing: Literal["zero", "skip"] = "zero"
    window_s: float | None = Field(default=None, gt=0)
    higher_is_better: bool = True
    description: str = ""

    @model_validator(mode="after")
    def _range(self) -> OutcomeDecl:
        if self.kind == "scale":
            if self.min is None or self.max is None or not self.min < self.max:
                raise ValueError(f"a scale needs min < max (got min={self.min}, max={self.max})")
        elif self.min is not None or self.max is not None:
            raise ValueError(f"min/max: only a 'scale' outcome has a range (kind is {self.kind!r})")
        return self


RESERVED_OUTCOMES = ("click", "add_to_cart", "order", "correct")


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
    outcomes: tuple[OutcomeDecl, ...] = ()
    unit: Literal["viewer", "session", "stream"] = "viewer"  # the randomisation unit: hashed, counted by SRM

    @field_validator("start", "stop")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        return v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v

    def _check_metrics(self) -> None:
        custom = [o.name for o in self.outcomes]
        taken = [n for n in custom if n in RESERVED_OUTCOMES or n in METRICS]
        if taken:
            raise ValueError(f"outcomes: {taken} clash with built-in outcome or metric names")
        if len(set(custom)) != len(custom):
            raise ValueError(f"outcomes: duplicate outcome name(s) {sorted({n for n in custom if custom.count(n) > 1})}")
        if self.primary_metric not in VIEWER_METRICS and self.primary_metric not in custom:
            raise ValueError(
                f"primary_metric: unknown viewer-level metric {self.primary_metric!r}; choose from "
                f"{', '.join([*VIEWER_METRICS, *custom])}"
            )
        unknown = [m for m in self.guardrails if m not in METRICS and m not in custom]
        if unknown:
            raise ValueError(f"guardrails: unknown metric(s) {unknown}; choose from {', '.join([*METRICS, *custom])}")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Experiment:
        self._check_metrics()
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
    def declared_outcomes(self) -> dict[str, OutcomeDecl]:
        return {o.name: o for o in self.outcomes}

    @property
    def viewer_metrics(self) -> tuple[str, ...]:
        """The built-in viewer-level metrics and the declared outcome metrics."""
        return (*VIEWER_METRICS, *(o.name for o in self.outcomes))

    def higher_is_better(self, metric: str) -> bool:
        decl = self.declared_outcomes.get(metric)
        return decl.higher_is_better if decl is not None else METRICS[metric].higher_is_better

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
        d = self.model_dump(mode="json")
        if not d["outcomes"]:  # configs without declared outcomes keep the digest they had before outcomes
            del d["outcomes"]
        if d["unit"] == "viewer":  # likewise for the default randomisation unit
            del d["unit"]
        return d

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
