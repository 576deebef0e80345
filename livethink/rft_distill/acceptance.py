"""Rejection sampling: judge every teacher candidate, keep those with C=1 AND H=1, choose per prompt.

LiveThinking keeps a candidate iff it is correct and helpful; the selection policy then decides how many of
a prompt's accepted candidates become SFT targets: ``all``, one ``random`` one, the ``shortest`` one, or the one
whose thinking states the answer first (``earliest_answer``, ``livethink.rewards.answer_point``: it survives the
server's cut).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from livethink.data.schema import Task
from livethink.rewards.answer_point import answer_point

SelectionPolicy = Literal["all", "random", "shortest", "earliest_answer"]
SELECTION_POLICIES: tuple[str, ...] = ("all", "random", "shortest", "earliest_answer")


class _Verdict(Protocol):
    correct: bool
    helpful: bool


class _Judge(Protocol):
    def score(self, task: Task, completion: str) -> _Verdict: ...

    def score_many(self, items: Sequence[tuple[Task, str]]) -> list[_Verdict]: ...


@dataclass(frozen=True)
class JudgedSample:
    task_id: str
    sample_index: int
    completion: str
    correct: bool
    helpful: bool
    error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.error is None and self.correct and self.helpful


@dataclass
class AcceptanceReport:
    """Counts overall and per question kind; ``unaccepted_prompts`` lists prompts with no accepted sample."""

    samples: int = 0
    failed_samples: int = 0
    correct: int = 0
    helpful: int = 0
    accepted: int = 0
    selected: int = 0
    prompts: int = 0
    prompts_with_accepted: int = 0
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    unaccepted_prompts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def rate(num: int, den: int) -> float:
            return round(num / den, 4) if den else 0.0

        kinds = {
            kind: {**counts, "acceptance_rate": rate(counts["accepted"], counts["samples"])}
            for kind, counts in sorted(self.by_kind.items())
        }
        return {
            "samples": self.samples,
            "failed_samples": self.failed_samples,
            "correct_rate": rate(self.correct, self.samples),
            "helpful_rate": rate(self.helpful, self.samples),
            "acceptance_rate": rate(self.accepted, self.samples),
            "accepted": self.accepted,
            "selected": self.selected,
            "prompts": self.prompts,
            "prompts_with_accepted": self.prompts_with_accepted,
            "by_kind": kinds,
            "unaccepted_prompts": self.unaccepted_prompts,
        }


def select(
    accepted: Sequence[JudgedSample], policy: SelectionPolicy, rng: random.Random, task: Task | None = None
) -> list[JudgedSample]:
    """The SFT targets among one prompt's accepted samples (``earliest_answer`` needs their ``task``)."""
    if not accepted:
        return []
    if policy == "all":
        return list(accepted)
    if policy == "random":
        return [rng.choice(list(accepted))]
    if policy == "shortest":
        return [min(accepted, key=lambda s: (len(s.completion), s.sample_index))]
    if policy == "earliest_answer":
        if task is None:
            raise ValueError("selection 'earliest_answer' needs the task of the samples")
        return [min(accepted, key=lambda s: (answer_point(task, s.completion), len(s.completion), s.sample_index))]
    raise ValueError(f"selection must be one of {SELECTION_POLICIES}, got {policy!r}")


def judge_samples(
    records: Iterable[Mapping[str, Any]], tasks: Mapping[str, Task], judge: _Judge, batch_size: int = 64
) -> Iterable[JudgedSample]:
    """Judge raw sample records (``task_id``, ``sample_index``, ``completion``, ``error``), in input order.

    Records are scored ``batch_size`` at a time with ``judge.score_many`` (an LLM judge sends those requests in
    parallel), so memory stays bounded on a large sample set."""
    records = iter(records)
    while chunk := list(itertools.islice(records, batch_size)):
        todo = [(task, record.get("completion") or "") for record in chunk
                if not record.get("error") and (task := tasks.get(record["task_id"])) is not None]
        verdicts = iter(judge.score_many(todo))
        for record in chunk:
            completion = record.get("completion") or ""
            error = record.get("error")
            if record["task_id"] not in tasks:
                error = error or f"unknown task_id {record['task_id']!r}"
            if error:
                yield JudgedSample(record["task_id"], int(record["sample_index"]), completion, False, False, error)
                continue
            verdict = next(verdicts)
            yield JudgedSample(record["task_id"], int(record["sample_index"]), completion, bool(verdict.correct),
                               bool(verdict.helpful))


def accept_and_select(
    judged: Iterable[JudgedSample],
    tasks: Mapping[str, Task],
    policy: SelectionPolicy = "random",
    seed: int = 0,
) -> tuple[list[JudgedSample], AcceptanceReport]:
    """Group judged samples by prompt, keep C=1 AND H=1, apply the policy; returns (selected, report)."""
    if policy not in SELECTION_POLICIES:
        raise ValueError(f"selection must be one of {SELECTION_POLICIES}, got {policy!r}")
    by_task: dict[str, list[JudgedSample]] = defaultdict(list)
    for sample in judged:
        by_task[sample.task_id].append(sample)
    report = AcceptanceReport()
    per_kind: dict[str, Counter] = defaultdict(Counter)
    selected: list[JudgedSample] = []
    rng = random.Random(seed)
    for task_id in sorted(by_task):
        samples = sorted(by_task[task_id], key=lambda s: s.sample_index)
        kind = tasks[task_id].kind if task_id in tasks else "unknown"
        accepted = [s for s in samples if s.accepted]
        chosen = select(accepted, policy, rng, tasks.get(task_id))
        selected.extend(chosen)
        counts = per_kind[kind]
        counts["prompts"] += 1
        counts["prompts_with_accepted"] += bool(accepted)
        for s in samples:
            counts["samples"] += 1
            counts["failed_samples"] += s.error is not None
            counts["correct"] += s.correct
            counts["helpful"] += s.helpful
            counts["accepted"] += s.accepted
        counts["selected"] += len(chosen)
        if not accepted:
            report.unaccepted_prompts.append(task_id)
    for kind, counts in per_kind.items():
        report.by_kind[kind] = dict(counts)
        report.samples += counts["samples"]
        report.failed_samples += counts["failed_samples"]
        report.correct += counts["correct"]
        report.helpful += counts["helpful"]
        report.accepted += counts["accepted"]
        report.selected += counts["selected"]
        report.prompts += counts["prompts"]
        report.prompts_with_accepted += counts["prompts_with_accepted"]
    return selected, report
