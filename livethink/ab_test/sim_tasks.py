"""The simulator's viewer questions (built in, or a JSONL of task records) and how their replies are judged:
the rubric judge of ``livethink.rewards``, as in eval and training."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from livethink.data.schema import Task
from livethink.rewards.judge import Judge as RewardJudge
from livethink.rewards.judge import RubricJudge

_RUBRIC = RubricJudge()
BUILTIN_TASKS: tuple[dict, ...] = (
    {
        "product_docs": [{"product_id": "p1", "title": "Linen shirt", "text": "Price: $39. Sizes S-XL. Ships in 2 days. Free returns within 30 days."}],
        "question": "How many days until it ships?",
        "reference": {"kind": "number", "value": 2, "unit": "days"},
        "helpful_facts": [{"fact": "Free returns within 30 days.", "match": ["returns", "return"]}],
    },
    {
        "product_docs": [{"product_id": "p2", "title": "Trail shoes", "text": "Price: $89, 20% off today. Colours: black, olive. Waterproof."}],
        "question": "Are these waterproof?",
        "reference": {"kind": "yes_no", "value": True},
        "helpful_facts": [{"fact": "20% off today.", "match": ["20%", "off"]}],
    },
    {
        "product_docs": [{"product_id": "p3", "title": "Ceramic mug", "text": "Price: $12. Capacity 350 ml. Dishwasher safe."}],
        "question": "What colour is the mug?",
        "reference": {"kind": "not_stated", "value": None},
        "helpful_facts": [{"fact": "Dishwasher safe.", "match": ["dishwasher"]}],
    },
    {
        "product_docs": [{"product_id": "p4", "title": "Desk lamp", "text": "Price: $25. Brand: Lumo. Warranty 12 months."}],
        "question": "Which brand makes the lamp?",
        "reference": {"kind": "entity", "value": "Lumo"},
        "helpful_facts": [{"fact": "Warranty 12 months.", "match": ["warranty", "12 months"]}],
    },
)  # fmt: skip
_JUDGE_DEFAULTS = {"id": "sim", "split": "test", "kind": "attribute", "difficulty": 1}


def judge_task(record: dict) -> Task | None:
    """The judge's view of a viewer-question record: a ``Task`` (``id``, ``split``, ``kind`` and ``difficulty``
    default when absent), or None when it has no ``reference`` (nothing to judge correctness against).
    A record that does not fit the task schema raises ``ValueError`` naming the field."""
    if not record.get("reference"):
        return None
    fields = {**_JUDGE_DEFAULTS, **{k: v for k, v in record.items() if k in Task.model_fields}}
    try:
        return Task.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "task"
        raise ValueError(f"{where}: {first['msg']}") from exc


def judge_reply(task: dict | Task | None, reply: str, judge: RewardJudge | None = None) -> tuple[bool | None, bool | None]:
    """(correct, helpful) of a reply by the rubric judge (or ``judge``): the verdict eval and training use.

    None means not judged: correctness when the task has no reference, helpfulness when it lists no helpful
    facts (the rubric would call every reply unhelpful; the outcome model then applies no helpfulness effect)."""
    task = judge_task(task) if isinstance(task, dict) else task
    if task is None:
        return None, None
    verdict = (judge or _RUBRIC).score(task, reply or "")
    return bool(verdict.correct), (bool(verdict.helpful) if task.helpful_facts else None)


def load_tasks(path: str | Path | None) -> list[dict]:
    """Viewer questions from a JSONL of task records (``product_docs``, ``question``, ``history``, ``reference``)."""
    if path is None:
        return [dict(t) for t in BUILTIN_TASKS]
    tasks = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        for key in ("product_docs", "question"):
            if key not in rec:
                raise ValueError(f"{path}:{i}: {key}: missing")
        try:
            judge_task(rec)
        except ValueError as exc:
            raise ValueError(f"{path}:{i}: {exc}") from exc
        tasks.append(rec)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks
