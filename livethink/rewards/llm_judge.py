"""LLM judge: the LiveThinking rubric sent to any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...).

The judge sees the product docs, the dialogue history, the question, the reply (not the reasoning: LiveThinking
judges the response) and, by default, the shop's reference answer, and must answer with JSON
``{"correct": bool, "helpful": bool, "reason": str}``.

Transport: the official ``openai`` client under the shared policy of ``livethink.openai_client`` (timeouts,
retries of connection errors, timeouts, 408/409/429/5xx with ``Retry-After`` honoured, and unparsable answers
asked again, all within ``1 + max_retries`` attempts); ``score_many`` runs at most ``max_concurrency`` requests
at once. Verdicts are cached on disk (SQLite, keyed by a SHA-256 of model + messages + sampling) so a re-run makes
no request for a seen reply. When every attempt fails, ``on_error="reject"`` returns a verdict with
``details["error"]`` (reward adapters turn it into ``None``, which TRL ignores), ``on_error="raise"`` raises
``JudgeError``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import openai

from livethink.config_sections import from_options
from livethink.data.liveshop.questions import describe_answer
from livethink.data.schema import Reference, Task
from livethink.openai_client import EndpointError, chat, resolve_api_key, sync_client
from livethink.rewards.parse import Completion, parse_completion
from livethink.rewards.verdict import Verdict

RUBRIC = """You grade replies of a livestream shopping assistant. The assistant must answer the viewer using \
only the product docs.

CORRECT (true/false): every claim in the reply is verifiable in the product docs, consistent with the dialogue \
history, and the reply directly answers the viewer's question. Any price, number or fact that is not in the docs \
(or does not follow from them by simple arithmetic) makes the reply incorrect. If the docs do not state the \
answer, the only correct reply is one that says so.
HELPFUL (true/false): the reply is correct AND proactively adds useful information from the docs beyond the bare \
answer (for example a deal or coupon, a stock alternative, shipping or returns). An incorrect reply is never \
helpful.

Answer with only a JSON object: {"correct": true|false, "helpful": true|false, "reason": "<one short sentence>"}"""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "correct": {"type": "boolean"},
        "helpful": {"type": "boolean"},
        "reason": {"type": "string", "maxLength": 200},
    },
    "required": ["correct", "helpful", "reason"],
    "additionalProperties": False,
}


JSON_MODE_NAMES: dict[str, bool | str] = {"none": False, "json_object": True, "schema": "schema"}


class JudgeError(RuntimeError):
    """The endpoint gave no usable verdict after every retry (or a non-retryable HTTP error)."""


@dataclass
class LLMJudgeConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"
    api_key: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"  # read only when api_key is not given
    timeout_s: float = 60.0  # per read/write of an attempt (livethink.openai_client)
    max_retries: int = 4  # attempts = 1 + max_retries, waits chosen by the openai client
    max_concurrency: int = 8
    temperature: float = 0.0
    max_tokens: int = 512
    # response_format: "json_object" (or True) = {"type": "json_object"}; "schema" = the verdict's JSON schema (vLLM
    # structured outputs: even a small model then answers with a parsable verdict); "none" (or False) = none
    json_mode: bool | str = False
    include_reference: bool = True  # show the shop's reference answer to the judge
    cache_path: str | None = "~/.cache/livethink/llm_judge.sqlite"  # None: no disk cache
    on_error: Literal["reject", "raise"] = "reject"
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into the request (e.g. chat_template_kwargs)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.json_mode = JSON_MODE_NAMES.get(self.json_mode, self.json_mode) if isinstance(self.json_mode, str) else self.json_mode
        if self.json_mode not in (True, False, "schema"):
            raise ValueError(f"json_mode must be none, json_object or schema, got {self.json_mode!r}")
        if self.on_error not in ("reject", "raise"):
            raise ValueError(f"on_error must be 'reject' or 'raise', got {self.on_error!r}")
        for name, low, ok in (("max_concurrency", 1, self.max_concurrency >= 1),
                              ("max_retries", 0, self.max_retries >= 0), ("timeout_s", 0, self.timeout_s > 0)):
            if not ok:
                raise ValueError(f"{name}: must be {'>' if name == 'timeout_s' else '>='} {low}, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> LLMJudgeConfig:
        return from_options(cls, options, "LLM judge")


# ---------------------------------------------------------------- prompt and parsing


def describe_reference(reference: Reference) -> str:
    """The reference answer in words for the judge."""
    if reference.kind == "not_stated":
        return "The docs do not state this; a correct reply says so."
    text = describe_answer(reference)
    if reference.aliases:
        text += f" (also accepted: {', '.join(reference.aliases)})"
    return text


def judge_messages(task: Task, reply: str, include_reference: bool = True) -> list[dict[str, str]]:
    """The rubric prompt for one reply."""
    history = "\n".join(f"{turn.role}: {turn.content}" for turn in task.history) or "(none)"
    parts = [
        f"# Product docs\n{task.docs_text}",
        f"# Dialogue history\n{history}",
        f"# Viewer question\n{task.question}",
    ]
    if include_reference:
        parts.append(f"# Reference answer (from the shop's data)\n{describe_reference(task.reference)}")
        facts = "\n".join(f"- {fact.fact}" for fact in task.helpful_facts)
        if facts:
            parts.append(f"# Examples of helpful extra facts\n{facts}")
    parts.append(f"# Reply to grade\n{reply}")
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": "\n\n".join(parts)}]


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in {"true", "yes", "1", "y"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"false", "no", "0", "n"}:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_verdict(content: str) -> dict[str, Any]:
    """``{"correct", "helpful", "reason"}`` from a judge's answer: tolerates think blocks, code fences, prose around
    the JSON, string booleans and different key case. ``helpful`` is forced False when not correct.
    Raises ``ValueError`` when there is no verdict."""
    text = content or ""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(obj, dict):
            lowered = {str(k).strip().lower(): v for k, v in obj.items()}
            if "correct" in lowered:
                correct = _as_bool(lowered["correct"])
                helpful = _as_bool(lowered.get("helpful", False)) and correct
                return {"correct": correct, "helpful": helpful, "reason": str(lowered.get("reason", ""))}
    found = {
        key: m.group(1).lower()
        for key in ("correct", "helpful")
        if (m := re.search(rf'"?{key}"?\s*[:=]\s*"?(true|false)\b', text, re.IGNORECASE))
    }
    if "correct" in found:
        correct = found["correct"] == "true"
        return {"correct": correct, "helpful": correct and found.get("helpful") == "true", "reason": ""}
    raise ValueError(f"no verdict JSON in the judge's answer: {content[:200]!r}")


def cache_key(payload: dict[str, Any]) -> str:
    """SHA-256 of model + messages + sampling (the parts that decide the answer)."""
    keyed = {k: payload.get(k) for k in ("model", "messages", "temperature", "max_tokens", "response_format")}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _verdict_of(response: dict[str, Any]) -> dict[str, Any]:
    try:
        content = response["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"no message in the response: {str(response)[:200]!r}") from exc
    return parse_verdict(content or "")


# ---------------------------------------------------------------- cache


class VerdictCache:
    """Thread-safe SQLite cache ``key -> verdict JSON`` (plus an in-memory copy)."""

    def __init__(self, path: str | Path | None):
        self._lock = threading.Lock()
        self._memory: dict[str, dict[str, Any]] = {}
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path = Path(path).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, verdict TEXT, created REAL)"
            )
            self._db.commit()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
            if self._db is None:
                return None
            row = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            self._memory[key] = json.loads(row[0])
            return self._memory[key]

    def put(self, key: str, model: str, verdict: dict[str, Any]) -> None:
        with self._lock:
            self._memory[key] = verdict
            if self._db is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?)", (key, model, json.dumps(verdict), time.time())
                )
                self._db.commit()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


# ---------------------------------------------------------------- judge


class LLMJudge:
    """Judge through an OpenAI-compatible endpoint (see module docstring)."""

    name = "llm"

    def __init__(self, config: LLMJudgeConfig | None = None, client: openai.OpenAI | None = None, **options: Any):
        self.config = config or LLMJudgeConfig.from_dict(options)
        cfg = self.config
        key = resolve_api_key(cfg.api_key, cfg.api_key_env)
        self._client = client or sync_client(cfg.base_url, api_key=key, timeout_s=cfg.timeout_s,
                                             max_retries=cfg.max_retries, headers=cfg.headers)
        self._cache = VerdictCache(cfg.cache_path)
        self._stats_lock = threading.Lock()
        self.stats = {"requests": 0, "cache_hits": 0, "retries": 0, "failures": 0}

    def _count(self, stat: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[stat] += n

    def payload(self, task: Task, reply: str) -> dict[str, Any]:
        """The chat-completions request body for one reply (also what the cache key is made of)."""
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": judge_messages(task, reply, self.config.include_reference),
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            **self.config.extra_body,
        }
        if self.config.json_mode == "schema":
            payload["response_format"] = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA}}
        elif self.config.json_mode:
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _ask(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The verdict for ``payload`` (the client's retries, unparsable answers asked again); ``JudgeError``."""
        try:
            reply = chat(self._client, payload, _verdict_of)
        except EndpointError as exc:
            self._count("requests", exc.attempts)
            self._count("retries", exc.attempts - 1)
            tries = f"{exc.attempts} attempt{'s' if exc.attempts != 1 else ''}"
            raise JudgeError(f"no verdict after {tries}: {exc.reason}: {exc.detail}") from exc
        self._count("requests", reply.attempts)
        self._count("retries", reply.attempts - 1)
        return reply.value

    def score(self, task: Task, completion: Completion) -> Verdict:
        reply = parse_completion(completion).reply
        if not reply.strip():
            return Verdict(False, False, {"judge": self.name, "reason": "empty reply (no request made)"})
        payload = self.payload(task, reply)
        key = cache_key(payload)
        cached = self._cache.get(key)
        if cached is not None:
            self._count("cache_hits")
            return Verdict(cached["correct"], cached["helpful"], {"judge": self.name, "cached": True, **cached})
        try:
            verdict = self._ask(payload)
        except JudgeError as exc:
            self._count("failures")
            if self.config.on_error == "raise":
                raise
            return Verdict(False, False, {"judge": self.name, "error": str(exc)})
        self._cache.put(key, self.config.model, verdict)
        return Verdict(verdict["correct"], verdict["helpful"], {"judge": self.name, "cached": False, **verdict})

    def score_many(self, items: Sequence[tuple[Task, Completion]]) -> list[Verdict]:
        """Score in parallel (at most ``max_concurrency`` requests in flight); results in input order."""
        if len(items) <= 1:
            return [self.score(task, completion) for task, completion in items]
        workers = min(self.config.max_concurrency, len(items))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-judge") as pool:
            return list(pool.map(lambda item: self.score(*item), items))

    def close(self) -> None:
        self._client.close()
        self._cache.close()

    def __enter__(self) -> LLMJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict[str, Any]:
        """The configuration without secrets (for run manifests)."""
        config = asdict(self.config)
        config.pop("api_key", None)
        config.pop("headers", None)
        return {"name": self.name, **config}
