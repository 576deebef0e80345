"""The range of every numeric option of the training commands, and the check that enforces it.

livethink's own options declare their range in their type, as an annotated constraint (``annotated_types``, the
constraints pydantic reads)::

    k: PositiveInt = field(default=4, ...)                      # >= 1
    n_prompts: NonNegativeInt = field(default=0, ...)           # >= 0 (0 = all)
    muon_momentum: Annotated[float, Interval(ge=0, lt=1)] = ...

``HfArgumentParser`` strips the annotation (``typing.get_type_hints``), so the flag is parsed as before. Options a
class inherits from TRL / transformers, and those of classes owned by other packages (the variants' options, the
judge section), have their range in ``RANGES`` below: one table, one place. ``tests/test_option_ranges.py`` fails
when a numeric field of a config class has neither, so a new option cannot forget it.

``check_ranges(obj)`` raises ``ConfigError`` naming the field, the range and the value; the config classes call it
first thing in ``__post_init__``, before TRL's own checks and long before any teacher call, sampling or judging.
``option_type`` is the same check as an argparse ``type=`` (``livethink eval``).
"""

from __future__ import annotations

import argparse
import functools
import math
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Annotated, Any

from annotated_types import BaseMetadata, Ge, GroupedMetadata, Gt, Interval, Le, Lt

from livethink.config_error import ConfigError


@dataclass(frozen=True)
class Also(BaseMetadata):
    """Values accepted outside the bounds, with what they mean (``max_steps``: ``-1`` = unlimited)."""

    values: tuple[float, ...]
    meaning: str = ""


@dataclass(frozen=True)
class Unbounded(BaseMetadata):
    """Any finite number is valid (declared on purpose: a seed, a signed coefficient)."""


PositiveInt = Annotated[int, Ge(1)]
NonNegativeInt = Annotated[int, Ge(0)]
PositiveFloat = Annotated[float, Gt(0)]
NonNegativeFloat = Annotated[float, Ge(0)]
Share = Annotated[float, Interval(ge=0, le=1)]
Seed = Annotated[int, Ge(0)]
AnyFloat = Annotated[float, Unbounded()]

# Inherited from transformers' TrainingArguments and TRL's SFTConfig / GRPOConfig (their documented meaning).
TRL_RANGES: dict[str, Any] = {
    "per_device_train_batch_size": PositiveInt,
    "per_device_eval_batch_size": PositiveInt,
    "gradient_accumulation_steps": PositiveInt,
    "num_train_epochs": PositiveFloat,
    "max_steps": Annotated[int, Ge(1), Also((-1,), "train for num_train_epochs")],
    "learning_rate": NonNegativeFloat,
    "warmup_steps": NonNegativeFloat,  # < 1: a share of the steps
    "weight_decay": NonNegativeFloat,
    "adam_beta1": Annotated[float, Interval(ge=0, lt=1)],
    "adam_beta2": Annotated[float, Interval(ge=0, lt=1)],
    "adam_epsilon": NonNegativeFloat,
    "max_grad_norm": NonNegativeFloat,  # 0: no clipping
    "label_smoothing_factor": Annotated[float, Interval(ge=0, lt=1)],
    "neftune_noise_alpha": NonNegativeFloat,
    "torch_empty_cache_steps": PositiveInt,
    "logging_steps": PositiveFloat,  # < 1: a share of the steps
    "eval_steps": PositiveFloat,
    "eval_delay": NonNegativeFloat,
    "eval_accumulation_steps": PositiveInt,
    "save_steps": PositiveFloat,
    "save_total_limit": NonNegativeInt,
    "seed": Seed,
    "data_seed": Seed,
    "dataloader_num_workers": NonNegativeInt,
    "dataloader_prefetch_factor": PositiveInt,
    "ddp_bucket_cap_mb": PositiveInt,
    "ddp_timeout": PositiveInt,
    "local_rank": Annotated[int, Ge(-1)],  # set by the launcher; -1 = not distributed
    "router_aux_loss_coef": NonNegativeFloat,
    "dataset_num_proc": PositiveInt,
    "max_length": PositiveInt,
    "pad_to_multiple_of": PositiveInt,
    "num_generations": Annotated[int, Ge(2)],  # GRPO's advantage is relative to the group
    "num_generations_eval": PositiveInt,
    "max_completion_length": PositiveInt,
    "generation_batch_size": PositiveInt,
    "steps_per_generation": PositiveInt,
    "temperature": PositiveFloat,
    "top_p": Annotated[float, Interval(gt=0, le=1)],
    "top_k": NonNegativeInt,  # 0: no top-k filtering
    "min_p": Share,
    "repetition_penalty": PositiveFloat,
    "vllm_server_port": Annotated[int, Interval(ge=1, le=65535)],
    "vllm_group_port": Annotated[int, Interval(ge=1, le=65535)],
    "vllm_server_timeout": PositiveFloat,
    "vllm_gpu_memory_utilization": Annotated[float, Interval(gt=0, le=1)],
    "vllm_max_model_length": PositiveInt,
    "vllm_tensor_parallel_size": PositiveInt,
    "beta": NonNegativeFloat,
    "num_iterations": PositiveInt,
    "epsilon": NonNegativeFloat,
    "delta": PositiveFloat,
    "epsilon_high": NonNegativeFloat,
    "sapo_temperature_neg": PositiveFloat,
    "sapo_temperature_pos": PositiveFloat,
    "vespo_k_pos": NonNegativeFloat,
    "vespo_lambda_pos": NonNegativeFloat,
    "vespo_k_neg": NonNegativeFloat,
    "vespo_lambda_neg": NonNegativeFloat,
    "ref_model_mixup_alpha": Share,
    "ref_model_sync_steps": PositiveInt,
    "top_entropy_quantile": Share,
    "entropy_coef": AnyFloat,  # > 0: an entropy bonus, < 0: a penalty
    "entropy_coef_min": NonNegativeFloat,
    "entropy_coef_max": NonNegativeFloat,
    "entropy_coef_delta": NonNegativeFloat,
    "entropy_target": NonNegativeFloat,
    "max_tool_calling_iterations": PositiveInt,
    "vllm_importance_sampling_clip_max": PositiveFloat,
    "vllm_importance_sampling_clip_min": NonNegativeFloat,
    "vllm_importance_sampling_cap": PositiveFloat,
    "off_policy_mask_threshold": NonNegativeFloat,
    "num_completions_to_print": NonNegativeInt,
    "reward_weights": AnyFloat,  # each weight of the list
}

# Fields of classes owned by other modules (``length_rl.variants``, ``length_rl.decoupled``, ``length_rl.tail_batching``,
# ``rewards.judge_settings``): their ranges, by the config field's name, until they are declared on the fields.
OWNED_ELSEWHERE: dict[str, Any] = {
    "max_staleness": PositiveInt,
    "tail_short_tokens": NonNegativeInt,  # 0 = max_completion_length // 2
    "tail_overprovision": Annotated[float, Ge(1)],
    "judge_timeout_s": PositiveFloat,
    "judge_max_retries": NonNegativeInt,
    "judge_max_concurrency": PositiveInt,
    "w_length": NonNegativeFloat,
    "band_lambda_low": Share,
    "band_lambda_up": NonNegativeFloat,
    "band_epsilon": PositiveFloat,
    "cosine_max_len": NonNegativeInt,
    "cosine_min_value_wrong": AnyFloat,
    "cosine_max_value_wrong": AnyFloat,
    "cosine_min_value_correct": AnyFloat,
    "cosine_max_value_correct": AnyFloat,
    "dapo_overlong_l_max": NonNegativeInt,
    "dapo_overlong_cache": NonNegativeInt,
    "dapo_overlong_weight": NonNegativeFloat,
    "dler_length_limit": NonNegativeInt,
    "dler_oversample": Annotated[float, Ge(1)],
    "dot_alpha": NonNegativeFloat,
    "dot_margin": NonNegativeFloat,
    "dot_success_threshold": Share,
    "dot_ds_window": PositiveInt,
    "dot_ds_min_factor": Annotated[float, Ge(1)],
    "dot_ds_max_factor": Annotated[float, Ge(1)],
    "dot_ds_initial_factor": Annotated[float, Ge(1)],
    "drpo_lambda": PositiveFloat,
    "drpo_tau": PositiveFloat,
    "drpo_beta": NonNegativeFloat,
    "drpo_delta": NonNegativeFloat,
    "drpo_max_len": NonNegativeInt,
    "length_penalty_alpha": NonNegativeFloat,
    "length_penalty_l_max": NonNegativeInt,
    "siri_l_max": NonNegativeInt,
    "siri_l_min": PositiveInt,
    "siri_period": Annotated[int, Ge(2)],
    "siri_cycles": PositiveInt,
    "siri_stair_steps": PositiveInt,
}

RANGES: dict[str, Any] = {**TRL_RANGES, **OWNED_ELSEWHERE}
_NUMBERS = (int, float)


def _constraints(hint: Any) -> list[Any] | None:
    """The annotated constraints of a type hint (``Annotated[int, Ge(1)] | None`` included); None if it has none."""
    if typing.get_origin(hint) is Annotated:
        found: list[Any] = []
        for item in hint.__metadata__:
            found += list(item) if isinstance(item, GroupedMetadata) else [item]
        return found
    for arg in typing.get_args(hint):
        inner = _constraints(arg)
        if inner is not None:
            return inner
    return None


def _number_kind(hint: Any) -> type | None:
    """int or float when the field holds numbers (optional, annotated, a list of them, or TRL's ``int | str``
    ``pad_to_multiple_of``); None otherwise (bool is not a number here)."""
    if typing.get_origin(hint) is Annotated:
        return _number_kind(typing.get_args(hint)[0])
    if hint in _NUMBERS:
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if bool in args:
        return None
    kinds = {k for a in args if (k := _number_kind(a)) is not None}
    return float if float in kinds else (kinds.pop() if kinds else None)


def _allows_str(hint: Any) -> bool:
    return str in typing.get_args(hint)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@functools.cache
def numeric_fields(cls: type) -> dict[str, type]:
    """Every field of the dataclass ``cls`` that holds a number (or numbers), with its kind (int or float)."""
    hints = _hints(cls)
    return {f.name: kind for f in fields(cls) if (kind := _number_kind(hints[f.name])) is not None}


def declared_range(cls: type, name: str) -> list[Any] | None:
    """The constraints of field ``name``: its own annotation, else ``RANGES``; None when undeclared."""
    own = _constraints(_hints(cls)[name])
    if own is not None:
        return own
    return _constraints(RANGES[name]) if name in RANGES else None


_BOUNDS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))


def describe(constraints: Iterable[Any]) -> str:
    """``[Ge(1), Also((-1,), "...")]`` → ``">= 1, or -1 (...)"``; two bounds → ``"in [0, 1)"``."""
    bounds: dict[str, float] = {}
    extra = ""
    for c in constraints:
        for kind, attr, _ in _BOUNDS:
            if isinstance(c, kind):
                bounds[attr] = getattr(c, attr)
        if isinstance(c, Also):
            extra = f", or {' or '.join(_num(v) for v in c.values)}" + (f" ({c.meaning})" if c.meaning else "")
    low = next(((a, v) for a, v in bounds.items() if a in ("ge", "gt")), None)
    high = next(((a, v) for a, v in bounds.items() if a in ("le", "lt")), None)
    if low and high:
        rule = f"in {'[' if low[0] == 'ge' else '('}{_num(low[1])}, {_num(high[1])}{']' if high[0] == 'le' else ')'}"
    else:
        rule = " and ".join(f"{s} {_num(bounds[a])}" for _, a, s in _BOUNDS if a in bounds) or "a finite number"
    return rule + extra


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _bound_ok(c: Any, value: float) -> bool:
    if isinstance(c, Ge):
        return value >= c.ge
    if isinstance(c, Gt):
        return value > c.gt
    if isinstance(c, Le):
        return value <= c.le
    if isinstance(c, Lt):
        return value < c.lt
    return True


def value_problem(name: str, kind: type, constraints: list[Any], value: Any) -> str | None:
    """Why ``value`` is not valid for the option ``name`` (None when it is)."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return next((p for v in value if (p := value_problem(name, kind, constraints, v))), None)
    rule = describe(constraints)
    bounded = "" if rule == describe([]) else f" {rule}"
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        return f"{name}: must be {'an integer' if kind is int else 'a number'}{bounded}, got {value!r}"
    if kind is int and not float(value).is_integer():
        return f"{name}: must be an integer{bounded}, got {value!r}"
    if not math.isfinite(value):
        return f"{name}: must be a finite number{bounded}, got {value!r}"
    also = next((c for c in constraints if isinstance(c, Also)), None)
    if also is not None and value in also.values:
        return None
    if all(_bound_ok(c, value) for c in constraints):
        return None
    return f"{name}: must be {rule}, got {value!r}"


def range_problems(obj: Any) -> list[str]:
    """Every numeric field of the dataclass instance ``obj`` outside its declared range (undeclared: finite)."""
    cls = type(obj)
    hints = _hints(cls)
    problems = []
    for name, kind in numeric_fields(cls).items():
        value = getattr(obj, name)
        if isinstance(value, str) and _allows_str(hints[name]):  # TRL's pad_to_multiple_of: a number or "auto"
            try:
                value = kind(value)
            except ValueError:
                continue
        problem = value_problem(name, kind, declared_range(cls, name) or [], value)
        if problem:
            problems.append(problem)
    return problems


def check_ranges(obj: Any) -> None:
    """Raise ``ConfigError`` naming every numeric field of ``obj`` out of its range (one line)."""
    problems = range_problems(obj)
    if problems:
        raise ConfigError("; ".join(problems))


def option_type(kind: type, *constraints: Any) -> Callable[[str], Any]:
    """An argparse ``type=``: ``kind(text)`` checked against ``constraints`` (``option_type(int, Ge(1))``)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'} "
                                             f"{describe(constraints)}, got {text!r}") from None
        problem = value_problem("", kind, list(constraints), value)
        if problem:
            raise argparse.ArgumentTypeError(problem.removeprefix(": "))
        return value

    parse.constraints = constraints  # type: ignore[attr-defined]
    parse.__name__ = kind.__name__
    return parse


__all__ = ["RANGES", "Also", "AnyFloat", "NonNegativeFloat", "NonNegativeInt", "PositiveFloat", "PositiveInt",
           "Seed", "Share", "Unbounded", "check_ranges", "declared_range", "describe", "numeric_fields",
           "option_type", "range_problems", "value_problem"]
