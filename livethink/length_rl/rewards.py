"""The variants' reward columns as TRL reward functions ``fn(completions, completion_ids, **columns)``.

Built on the rewards package: tasks are rebuilt from the dataset columns (``tasks_from_columns``), C and H come
from its judge (memoised, so several columns cost one judge call per completion), r_len from its ``band_reward``.
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
from livethink.length_rl import length_rewards
from livethink.length_rl.registry import BREVITY, CORRECTNESS, HELPFULNESS, LENGTH_PENALTY
from livethink.rewards.adapters import tasks_from_columns
from livethink.rewards.judge import Judge, Verdict, make_judge
from livethink.rewards.parse import Completion

RewardFunc = Callable[..., list[float | None]]


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


def _lengths(completions: Sequence[Completion], completion_ids: Sequence[Sequence[int]] | None) -> list[int]:
    if completion_ids is None:
        raise ValueError("length rewards need TRL's completion_ids")
    return [len(ids) for ids in completion_ids]


def make_reward_funcs(names: Sequence[str], ctx: RewardContext, judge: Judge | dict | None = None,
                      band: dict[str, Any] | None = None, penalty: dict[str, Any] | None = None) -> list[RewardFunc]:
    """Reward functions for the columns ``names`` (see ``registry``), sharing one memoising judge."""
    the_judge = CachedJudge(make_judge(judge))
    band = band or {}
    penalty = penalty or {}

    def verdicts(completions, completion_ids, columns) -> list[tuple[Verdict, bool]]:
        tasks = tasks_from_columns(len(completions), columns)
        scored = the_judge.score_many(list(zip(tasks, completions, strict=True)))
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        return [(v, ctx.zero_reward_if_cut and is_cut(i, ctx.eos_ids)) for v, i in zip(scored, ids, strict=True)]

    def quality(vs: list[tuple[Verdict, bool]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(C, H) per completion as 0/1 tensors, 0 for a cut one."""
        return (torch.tensor([float(v.correct and not cut) for v, cut in vs]),
                torch.tensor([float(v.helpful and not cut) for v, cut in vs]))

    def correctness(completions, completion_ids=None, **columns):
        return [None if v.error else float(v.correct and not cut) for v, cut in verdicts(completions, completion_ids, columns)]

    def helpfulness(completions, completion_ids=None, **columns):
        return [None if v.error else float(v.helpful and not cut) for v, cut in verdicts(completions, completion_ids, columns)]

    def brevity(completions, completion_ids=None, **columns):
        if ctx.l_ref is None:
            raise RuntimeError("L_ref is not set: the trainer measures it on the first rollouts (or set l_ref)")
        lengths = torch.tensor(_lengths(completions, completion_ids))
        r_len = length_rewards.band(lengths, ctx.l_ref, band.get("lambda_low", 0.2), band.get("lambda_up", 0.4),
                                    band.get("epsilon"))
        gate = band.get("gate", "none")
        if gate == "none":
            return r_len.tolist()
        vs = verdicts(completions, completion_ids, columns)
        values = length_rewards.gated(r_len, *quality(vs), gate, ctx.group_size).tolist()
        return [None if v.error else r for (v, _), r in zip(vs, values, strict=True)]

    def length_penalty(completions, completion_ids=None, **columns):
        vs = verdicts(completions, completion_ids, columns)
        correct, _ = quality(vs)
        lengths = torch.tensor(_lengths(completions, completion_ids))
        values = length_rewards.length_penalty(correct, lengths, penalty["l_max"], penalty["alpha"]).tolist()
        return [None if v.error else r for (v, _), r in zip(vs, values, strict=True)]

    table = {CORRECTNESS: correctness, HELPFULNESS: helpfulness, BREVITY: brevity, LENGTH_PENALTY: length_penalty}
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown reward columns {unknown}: choose from {sorted(table)}")
    return [_named(table[n], n) for n in names]
