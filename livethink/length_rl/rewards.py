"""The variants' reward columns as TRL reward functions ``fn(completions, completion_ids, **columns)``, by name.

Built on the rewards package: tasks are rebuilt from the dataset columns (``tasks_from_columns``), C and H come
from its judge (memoised, so several columns cost one judge call per completion). Correctness and helpfulness are
defined here; each variant module registers its own length columns (``register_reward_column``).
Lengths are the policy's own token counts (``completion_ids``, the reply's EOS included).

A completion *cut* before its EOS (by ``max_completion_length``, SIRI's cap, or DOT's truncation) scores C = H = 0:
the answer must survive the cap (``zero_reward_if_cut``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from livethink.data.schema import Task
from livethink.rewards.adapters import tasks_from_columns
from livethink.rewards.judge import Judge, Verdict, make_judge
from livethink.rewards.parse import Completion

RewardFunc = Callable[..., list[float | None]]

CORRECTNESS = "correctness"
HELPFULNESS = "helpfulness"


class CachedJudge:
    """A judge memoising verdicts by (task id, completion) — the columns of one step share them."""

    def __init__(self, judge: Judge, maxsize: int = 8192):
        self.judge = judge
        self.name = f"cached-{judge.name}"
        self._cache: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self.maxsize = maxsize

    def score(self, task: Task, completion: Completion) -> Verdict:
        return self.score_many([(task, completion)])[0]

    def score_many(self, items: Sequence[tuple[Task, Completion]]) -> list[Verdict]:
        keys = [(task.id, completion if isinstance(completion, str) else repr(completion)) for task, completion in items]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        if missing:
            for i, verdict in zip(missing, self.judge.score_many([items[i] for i in missing]), strict=True):
                self._cache[keys[i]] = verdict
        out = [self._cache[key] for key in keys]
        while len(self._cache) > self.maxsize:
            self._cache.popitem(last=False)
        return out


@dataclass
class RewardContext:
    """What the reward columns need from the trainer: EOS ids (to spot cut completions) and L_ref."""

    eos_ids: set[int] = field(default_factory=set)
    l_ref: float | None = None
    zero_reward_if_cut: bool = True
    group_size: int | None = None  # completions per prompt (consecutive rows), for group-level gates


def is_cut(ids: Sequence[int] | None, eos_ids: set[int]) -> bool:
    """True when a completion ended without an EOS/pad token (cut by a length cap)."""
    return ids is not None and (len(ids) == 0 or int(ids[-1]) not in eos_ids)


def _named(fn: RewardFunc, name: str) -> RewardFunc:
    fn.__name__ = fn.__qualname__ = name
    return fn


def lengths_of(completion_ids: Sequence[Sequence[int]] | None) -> list[int]:
    """Token counts of the completions (TRL's ``completion_ids``)."""
    if completion_ids is None:
        raise ValueError("length rewards need TRL's completion_ids")
    return [len(ids) for ids in completion_ids]


class RewardKit:
    """What a reward column is built from: the context and one memoising judge shared by the columns."""

    def __init__(self, ctx: RewardContext, judge: Judge | dict | None = None):
        self.ctx = ctx
        self.judge = CachedJudge(make_judge(judge))

    def verdicts(self, completions, completion_ids, columns) -> list[tuple[Verdict, bool]]:
        """(verdict, cut) per completion; ``cut`` only when ``zero_reward_if_cut``."""
        tasks = tasks_from_columns(len(completions), columns)
        scored = self.judge.score_many(list(zip(tasks, completions, strict=True)))
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        return [(v, self.ctx.zero_reward_if_cut and is_cut(i, self.ctx.eos_ids)) for v, i in zip(scored, ids, strict=True)]

    @staticmethod
    def quality(vs: list[tuple[Verdict, bool]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(C, H) per completion as 0/1 tensors, 0 for a cut one."""
        return (torch.tensor([float(v.correct and not cut) for v, cut in vs]),
                torch.tensor([float(v.helpful and not cut) for v, cut in vs]))

    @staticmethod
    def unless_error(vs: list[tuple[Verdict, bool]], values: Sequence[float]) -> list[float | None]:
        """``values``, None where the judge failed (TRL leaves a None out of the reward)."""
        return [None if v.error else float(r) for (v, _), r in zip(vs, values, strict=True)]


ColumnBuilder = Callable[[RewardKit, dict[str, Any]], RewardFunc]
REWARD_COLUMNS: dict[str, ColumnBuilder] = {}


def register_reward_column(name: str) -> Callable[[ColumnBuilder], ColumnBuilder]:
    """Decorator: ``builder(kit, options) -> fn(completions, completion_ids=None, **columns)`` becomes the reward
    column ``name`` (``options``: the keyword options of ``make_reward_funcs``)."""

    def decorate(builder: ColumnBuilder) -> ColumnBuilder:
        if name in REWARD_COLUMNS:
            raise ValueError(f"reward column {name!r} is registered twice")
        REWARD_COLUMNS[name] = builder
        return builder

    return decorate


def _judge_column(index: int) -> ColumnBuilder:
    """The column of one of the judge's verdicts: ``index`` 0 = correct, 1 = helpful (``RewardKit.quality``)."""

    def build(kit: RewardKit, options: dict[str, Any]) -> RewardFunc:
        def column(completions, completion_ids=None, **columns):
            vs = kit.verdicts(completions, completion_ids, columns)
            return kit.unless_error(vs, kit.quality(vs)[index].tolist())

        return column

    return build


register_reward_column(CORRECTNESS)(_judge_column(0))
register_reward_column(HELPFULNESS)(_judge_column(1))


def make_reward_funcs(names: Sequence[str], ctx: RewardContext, judge: Judge | dict | None = None,
                      **options: Any) -> list[RewardFunc]:
    """Reward functions for the columns ``names`` sharing one memoising judge. Columns other than correctness and
    helpfulness are registered by the variant modules (import ``livethink.length_rl.variants`` first)."""
    unknown = [n for n in names if n not in REWARD_COLUMNS]
    if unknown:
        raise ValueError(f"unknown reward columns {unknown}: choose from {sorted(REWARD_COLUMNS)}")
    kit = RewardKit(ctx, judge)
    return [_named(REWARD_COLUMNS[n](kit, options), n) for n in names]


@dataclass
class Scored:
    """One generation batch as ``_calculate_rewards`` sees it (local rows; ``rewards`` and ``lengths`` global)."""

    inputs: list[dict[str, Any]]
    prompts: list[Any]
    completions: list[Any]
    completion_ids: list[list[int]]
    lengths: torch.Tensor  # (N,) all processes' completion lengths, on CPU
    rewards: torch.Tensor  # (N, F)
