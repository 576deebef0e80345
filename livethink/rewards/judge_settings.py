"""``JudgeSettings``: the judge of every stage (stage-1 selection, stage-2 rewards), one schema.

In a training config it is the ``judge:`` section (``livethink.config_sections``)::

    judge: {type: llm, base_url: http://judge:8000/v1, model: Qwen/Qwen3-235B-A22B, json_mode: schema}

and on the command line ``--judge-type llm --judge-json-mode schema ...``. The rubric judge takes no options.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from livethink.config_sections import ConfigError, check_url

JUDGE_TYPES = ("rubric", "llm")
JSON_MODES = ("none", "json_object", "schema")
LLM_ONLY = ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "max_concurrency")


@dataclass
class JudgeSettings:
    """Which judge, and the LLM judge's endpoint and request options (``null``: ``LLMJudgeConfig``'s default)."""

    type: str = field(default="rubric", metadata={"help": "judge: rubric (deterministic, from the reference answers) | llm"})
    base_url: str | None = field(default=None, metadata={"help": "llm judge: OpenAI-compatible endpoint"})
    model: str | None = field(default=None, metadata={"help": "llm judge: the model the endpoint serves"})
    json_mode: str = field(default="none", metadata={
        "help": "llm judge response_format: none | json_object | schema (the verdict's JSON schema; vLLM structured outputs)"})
    api_key_env: str | None = field(default=None, metadata={"help": "llm judge: env var holding the API key"})
    timeout_s: float | None = field(default=None, metadata={"help": "llm judge: per read/write of an attempt"})
    max_retries: int | None = field(default=None, metadata={"help": "llm judge: retries after the first attempt"})
    max_concurrency: int | None = field(default=None, metadata={"help": "llm judge: requests in flight"})

    def __post_init__(self) -> None:
        if self.type not in JUDGE_TYPES:
            raise ConfigError(f"judge_type: must be one of {', '.join(JUDGE_TYPES)}, got {self.type!r}")
        if self.json_mode not in JSON_MODES:
            raise ConfigError(f"judge_json_mode: must be one of {', '.join(JSON_MODES)}, got {self.json_mode!r}")
        if self.type == "rubric":
            stray = [n for n in LLM_ONLY if getattr(self, n) is not None] + (["json_mode"] if self.json_mode != "none" else [])
            if stray:
                raise ConfigError(f"judge_{stray[0]}: belongs to judge type 'llm', this config's judge is 'rubric'")
            return
        for name in ("base_url", "model"):
            if not getattr(self, name):
                raise ConfigError(f"judge_{name}: required when judge type is llm")
        problem = check_url("judge_base_url", self.base_url)
        if problem:
            raise ConfigError(problem)
        self.judge_config()  # the LLM judge's own checks, now

    def judge_config(self) -> dict[str, Any]:
        """The ``make_judge`` config."""
        if self.type == "rubric":
            return {"name": "rubric"}
        options = {n: getattr(self, n) for n in LLM_ONLY if getattr(self, n) is not None}
        config = {"name": "llm", **options, "json_mode": self.json_mode}
        from livethink.rewards.llm_judge import LLMJudgeConfig

        try:
            LLMJudgeConfig.from_dict({k: v for k, v in config.items() if k != "name"})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"judge_{exc}") from None  # the LLM judge's message starts with the field
        return config

    def describe(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
