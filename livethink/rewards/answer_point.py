"""Where a reasoning trace first states its answer: what survives the server's cut.

The server cuts thinking at a cap and makes the model answer from there (s1 budget forcing, arXiv 2501.19393). A
trace that states the key fact early survives the cut; one that reaches it after long detours does not. Among a
prompt's accepted teacher traces, stage 1's ``earliest_answer`` selection policy (``rft_distill.acceptance``) keeps
the one whose thinking reaches the reference answer first, so the student copies that habit before stage 2 trains
it under the cut (Elastic Reasoning, arXiv 2505.05315, budget-constrained rollouts).

The same measure on a student's own thinking, in tokens (``answer_tokens``), says whether a cut at a cap keeps the
answer: ``benchmarks/budget_training.py`` reports it, and stage-2 DRPO can weight its positives by it
(``drpo_weight_by: answer_point``).

The answer point of a trace is the number of thinking words before the reference answer's first mention:
- ``number``: the first number mention equal to the reference (one cent for usd, exact otherwise), in any unit
  (a price quoted from the docs that already is the answer counts: the fact is stated);
- ``entity``: the first mention of the reference name or one of its aliases (case-insensitive, word boundaries,
  any punctuation between its words);
- ``yes_no`` and ``not_stated`` have no mention to find: the answer point is the end of the thinking.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from livethink.data.reasoning_format import THINK, ReasoningFormat
from livethink.data.schema import Task
from livethink.rewards.correctness import USD_TOLERANCE
from livethink.rewards.parse import split_completion
from livethink.rewards.text import normalize_entity, number_mentions


def _words_before(text: str, offset: int) -> int:
    return len(text[:offset].split())


def _number_offset(thinking: str, value: float, unit: str | None) -> int | None:
    tolerance = USD_TOLERANCE if unit == "usd" else 1e-6
    return next((m.start for m in number_mentions(thinking) if abs(m.value - value) <= tolerance), None)


def _entity_offset(thinking: str, name: str) -> int | None:
    """Offset in ``thinking`` of the first mention of ``name``, matched as ``find_entity`` matches it."""
    words = normalize_entity(name).split()
    if not words:
        return None
    pattern = r"[^0-9a-z]+".join(re.escape(w) for w in words)
    match = re.search(rf"(?<![0-9a-z]){pattern}(?![0-9a-z])", thinking.lower())
    return match.start() if match else None


def answer_offset(task: Task, thinking: str) -> int:
    """Characters of ``thinking`` before the first mention of ``task``'s reference answer; its length if none."""
    ref = task.reference
    offset = None
    if ref.kind == "number" and ref.value is not None:
        offset = _number_offset(thinking, float(ref.value), ref.unit)
    elif ref.kind == "entity" and isinstance(ref.value, str):
        found = [o for name in (ref.value, *ref.aliases) if (o := _entity_offset(thinking, name)) is not None]
        offset = min(found, default=None)
    return len(thinking) if offset is None else offset


def answer_point(task: Task, completion: str, fmt: ReasoningFormat = THINK) -> int:
    """Thinking words before the first mention of ``task``'s reference answer; the thinking's length if none."""
    thinking, _ = split_completion(completion, fmt)
    return _words_before(thinking, answer_offset(task, thinking))


def answer_tokens(task: Task, thinking: str, count_tokens: Callable[[str], int]) -> int:
    """Tokens (``count_tokens`` of the text) of ``thinking`` before ``task``'s reference answer's first mention; all
    of its tokens if none."""
    return count_tokens(thinking[: answer_offset(task, thinking)])
