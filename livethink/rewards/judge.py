"""The judges and their factory: ``make_judge(config)`` picks one by ``name``.

Two judges share the interface of ``verdict.py`` (``score(task, completion) -> Verdict(correct, helpful,
details)``): ``RubricJudge`` (deterministic, from the task's reference and helpful facts; the default of the
embedded setup) and ``LLMJudge`` (the LiveThinking rubric sent to any OpenAI-compatible endpoint, see
``llm_judge.py``). The same judge filters teacher samples in stage 1 (keep C=1 ∧ H=1) and gives rewards in
stage 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from livethink.data.schema import Task
from livethink.rewards.helpfulness import check_helpfulness
from livethink.rewards.parse import Completion
from livethink.rewards.verdict import Judge, Verdict

__all__ = ["JUDGES", "Judge", "RubricJudge", "Verdict", "make_judge"]


class RubricJudge:
    """Deterministic judge: ``correctness.py`` and ``helpfulness.py`` rules, with the claim checker
    (``claim_check.py``): ``details["claims"]`` lists each claim that fails the docs and why."""

    name = "rubric"

    def score(self, task: Task, completion: Completion) -> Verdict:
        result = check_helpfulness(task, completion)
        c = result.correctness
        details = {
            "judge": self.name,
            "reason": result.reason,
            "asserted": c.asserted,
            "answer_ok": c.answer_ok,
            "unsupported": list(c.unsupported),
            "claims": list(c.claims),  # claims that fail the docs, each with its reason (``claim_check``)
            "helpful_match": result.matched,
        }
        return Verdict(result.correct, result.helpful, details)

    def score_many(self, items: Sequence[tuple[Task, Completion]]) -> list[Verdict]:
        return [self.score(task, completion) for task, completion in items]


JUDGES = ("rubric", "llm")


def make_judge(config: dict[str, Any] | Judge | None = None) -> Judge:
    """A judge from a config dict: ``{"name": "rubric"}`` or ``{"name": "llm", "base_url": ..., "model": ...,
    ...}`` (see ``LLMJudgeConfig`` for the options). A judge instance is returned as is; None gives the rubric."""
    if config is None:
        return RubricJudge()
    if not isinstance(config, dict):
        if isinstance(config, Judge):
            return config
        raise TypeError(f"judge config must be a dict or a Judge, got {type(config).__name__}")
    options = dict(config)
    name = str(options.pop("name", options.pop("type", "rubric"))).lower()
    if name == "rubric":
        if options:
            raise ValueError(f"the rubric judge takes no options, got {sorted(options)}")
        return RubricJudge()
    if name in ("llm", "openai"):
        from livethink.rewards.llm_judge import LLMJudge, LLMJudgeConfig

        return LLMJudge(LLMJudgeConfig.from_dict(options))
    raise ValueError(f"unknown judge {name!r}: choose one of {', '.join(JUDGES)}")
