"""Reward functions with TRL's signature ``fn(completions, **columns) -> list[float | None]``.

The GRPO dataset rows are ``task_to_row(task)`` plus a ``prompt`` column; TRL passes every column but
``prompt`` (each repeated per generation), so each sample's task is rebuilt from the task columns (parsing is
cached; extra keyword arguments such as ``prompts``, ``completion_ids``, ``trainer_state``, ``log_metric`` are
ignored unless used). Completions may be strings or chat message lists.

Factories return callables whose ``__name__`` is the name TRL logs under (``rewards/<name>/mean``):

    correctness_reward(judge) -> "correctness"          helpfulness_reward(judge) -> "helpfulness"
    brevity_reward(*, l_ref, tokenizer, ...) -> "brevity"
    composite_reward(*, l_ref, judge, tokenizer, weights, ...) -> "composite"     (keyword-only arguments)

A judge that could not decide (LLM endpoint down) yields ``None`` for that sample, which TRL leaves out.
``composite`` also reports its components through TRL's ``log_metric`` (``reward_components/correct`` ...).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from livethink.data.io import row_to_task
from livethink.data.schema import Task
from livethink.rewards.brevity import LAMBDA_LOW, LAMBDA_UP, Scope, Tokenizer, band_reward, completion_length
from livethink.rewards.composite import CompositeWeights, composite
from livethink.rewards.judge import Judge, Verdict, make_judge
from livethink.rewards.parse import Completion

RewardFunc = Callable[..., list[float | None]]
TASK_FIELDS: tuple[str, ...] = tuple(Task.model_fields)
LRef = float | int | str | Mapping[str, float]


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else json.dumps(value, sort_keys=True)


@lru_cache(maxsize=16384)
def _task_from_items(items: tuple[tuple[str, Any], ...]) -> Task:
    return row_to_task(dict(items))  # nested fields arrive (or were made) JSON strings; row_to_task parses them


def tasks_from_columns(n: int, columns: Mapping[str, Any]) -> list[Task]:
    """The ``n`` tasks described by TRL's per-sample column lists (``task_to_row`` layout)."""
    missing = [f for f in TASK_FIELDS if f not in columns and f not in ("history", "helpful_facts")]
    if missing:
        raise KeyError(
            f"reward function needs the task columns {missing} (dataset rows must be task_to_row(task) + prompt)"
        )
    present = [f for f in TASK_FIELDS if f in columns]
    tasks = []
    for i in range(n):
        items = tuple((f, _hashable(columns[f][i])) for f in present)
        tasks.append(_task_from_items(items))
    return tasks


def _verdicts(judge: Judge, completions: Sequence[Completion], columns: Mapping[str, Any]) -> list[Verdict]:
    tasks = tasks_from_columns(len(completions), columns)
    return judge.score_many(list(zip(tasks, completions, strict=True)))


def _named(fn: Callable[..., Any], name: str) -> RewardFunc:
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def correctness_reward(judge: Judge | dict[str, Any] | None = None) -> RewardFunc:
    """C ∈ {0, 1} per completion (None where the judge failed)."""
    the_judge = make_judge(judge)

    def reward(completions: Sequence[Completion], **columns: Any) -> list[float | None]:
        return [None if v.error else float(v.correct) for v in _verdicts(the_judge, completions, columns)]

    return _named(reward, "correctness")


def helpfulness_reward(judge: Judge | dict[str, Any] | None = None) -> RewardFunc:
    """H ∈ {0, 1} per completion (None where the judge failed)."""
    the_judge = make_judge(judge)

    def reward(completions: Sequence[Completion], **columns: Any) -> list[float | None]:
        return [None if v.error else float(v.helpful) for v in _verdicts(the_judge, completions, columns)]

    return _named(reward, "helpfulness")


def _l_refs(l_ref: LRef, n: int, columns: Mapping[str, Any]) -> list[float]:
    """Per-sample L_ref: a global number, a dataset column name, or a mapping task id -> L_ref."""
    if isinstance(l_ref, int | float):
        return [float(l_ref)] * n
    if isinstance(l_ref, str):
        if l_ref not in columns:
            raise KeyError(f"L_ref column {l_ref!r} is not in the dataset columns {sorted(columns)}")
        return [float(x) for x in columns[l_ref]]
    if "id" not in columns:
        raise KeyError("a per-task L_ref mapping needs the 'id' column")
    try:
        return [float(l_ref[task_id]) for task_id in columns["id"]]
    except KeyError as exc:
        raise KeyError(f"no L_ref for task id {exc.args[0]!r}") from exc


def _lengths(
    completions: Sequence[Completion], tokenizer: Tokenizer | None, scope: Scope, completion_ids: Any
) -> list[int]:
    if tokenizer is None and scope == "completion" and completion_ids is not None:
        return [len(ids) for ids in completion_ids]  # the policy's own token count
    return [completion_length(c, tokenizer, scope) for c in completions]


def brevity_reward(
    *,
    l_ref: LRef,
    tokenizer: Tokenizer | None = None,
    lambda_low: float = LAMBDA_LOW,
    lambda_up: float = LAMBDA_UP,
    epsilon: float | None = None,
    scope: Scope = "reasoning",
) -> RewardFunc:
    """r_len per completion (see ``brevity.py``). With no tokenizer and ``scope="completion"`` TRL's
    ``completion_ids`` give the length; otherwise the text is counted (whitespace words without a tokenizer)."""

    def reward(completions: Sequence[Completion], completion_ids: Any = None, **columns: Any) -> list[float | None]:
        refs = _l_refs(l_ref, len(completions), columns)
        lengths = _lengths(completions, tokenizer, scope, completion_ids)
        return [band_reward(n, r, lambda_low, lambda_up, epsilon) for n, r in zip(lengths, refs, strict=True)]

    return _named(reward, "brevity")


def composite_reward(
    *,
    l_ref: LRef,
    judge: Judge | dict[str, Any] | None = None,
    tokenizer: Tokenizer | None = None,
    weights: CompositeWeights | None = None,
    lambda_low: float = LAMBDA_LOW,
    lambda_up: float = LAMBDA_UP,
    epsilon: float | None = None,
    scope: Scope = "reasoning",
) -> RewardFunc:
    """r = w_c·C + w_h·H + w_l·r_len per completion (one judge call per sample; None where the judge failed)."""
    the_judge = make_judge(judge)
    w = weights or CompositeWeights()

    def reward(completions: Sequence[Completion], completion_ids: Any = None, **columns: Any) -> list[float | None]:
        verdicts = _verdicts(the_judge, completions, columns)
        refs = _l_refs(l_ref, len(completions), columns)
        lengths = _lengths(completions, tokenizer, scope, completion_ids)
        r_lens = [band_reward(n, r, lambda_low, lambda_up, epsilon) for n, r in zip(lengths, refs, strict=True)]
        out: list[float | None] = [
            None if v.error else composite(float(v.correct), float(v.helpful), r, w)
            for v, r in zip(verdicts, r_lens, strict=True)
        ]
        log_metric = columns.get("log_metric")
        if callable(log_metric) and verdicts:
            n = len(verdicts)
            log_metric("reward_components/correct", sum(v.correct for v in verdicts) / n)
            log_metric("reward_components/helpful", sum(v.helpful for v in verdicts) / n)
            log_metric("reward_components/r_len", sum(r_lens) / n)
            log_metric("reward_components/length", sum(lengths) / n)
        return out

    return _named(reward, "composite")
