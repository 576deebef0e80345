"""A small HTTP client for the livethink server: typed results, streamed replies, readable errors.

The demo never loads a model; everything goes through the server's API (``docs/serving.md``):

- ``POST /v1/livestream/reply``: one reply with its timings and flags (``reply``);
- ``POST /v1/chat/completions`` with ``stream: true``: the same prompt as a livestream reply, streamed as
  server-sent events with ``reasoning`` and ``content`` deltas, the livethink flags on the last chunk and
  ``usage`` after it (``stream_reply``);
- ``GET /health``, ``GET /v1/models``, ``GET /v1/admin/status``, ``GET /v1/ab/experiments/{name}``.

Every failure becomes a ``ServerError`` whose ``user_message()`` is a sentence for the UI (server down,
timeout, 429 with its retry time, 4xx naming the field, 5xx), never a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from livethink.data.prompt import build_messages
from livethink.data.schema import ProductDoc, Reference, Task, Turn

ErrorKind = Literal[
    "unreachable", "timeout", "overloaded", "auth", "not_found", "bad_request", "server", "protocol"
]
AUTO_MODEL = "auto"  # the server picks the model of the viewer's A/B arm (or its default model)


class ServerError(Exception):
    """A request to the livethink server failed; ``user_message()`` says what happened in plain words."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None, param: str | None = None,
                 retry_after_s: float | None = None):  # fmt: skip
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.param = param
        self.retry_after_s = retry_after_s

    def user_message(self) -> str:
        m = self.message.rstrip(".")
        if self.kind == "unreachable":
            return f"Server down: {m}. Start it with `livethink serve --config configs/tiny/serve.yaml`."
        if self.kind == "timeout":
            return f"Timeout: {m}."
        if self.kind == "overloaded":
            retry = f" Retry in {self.retry_after_s:.1f} s" if self.retry_after_s else " Retry shortly"
            return f"Server busy (429): {m}.{retry} or raise the latency budget."
        if self.kind == "auth":
            return f"Not authorised (HTTP {self.status}): {m}. Pass --api-key / --admin-key (or LIVETHINK_API_KEY)."
        if self.kind == "not_found":
            return f"Not found (HTTP {self.status}): {m}."
        if self.kind == "bad_request":
            return f"The server rejected the request (HTTP {self.status}): {m}."
        if self.kind == "server":
            where = f" (HTTP {self.status})" if self.status else " mid-stream"
            return f"The server failed{where}: {m}."
        return f"Unexpected answer from the server: {m}."


@dataclass(frozen=True)
class ReplyRequest:
    """One viewer question about the products on stream. ``arm`` forces an A/B arm (QA: no exposure is
    logged); ``model`` picks a served model directly; with neither, the viewer's assigned arm answers."""

    product_docs: tuple[ProductDoc, ...]
    question: str
    history: tuple[Turn, ...] = ()
    viewer_id: str = "demo-viewer"
    deadline_ms: int | None = None
    arm: str | None = None
    model: str | None = None
    deadline_at: int | None = None  # absolute, epoch ms: the earlier of it and deadline_ms governs

    def livestream_body(self, stream: bool = False, speech_rate_wps: float | None = None,
                        on_refusal: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "viewer_id": self.viewer_id,
            "question": self.question,
            "product_docs": [d.model_dump() for d in self.product_docs],
            "history": [t.model_dump() for t in self.history],
            "include_reasoning": True,
        }
        for key in ("deadline_ms", "deadline_at", "arm", "model"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        if stream:
            body["stream"] = True
            if speech_rate_wps is not None:
                body["speech_rate_wps"] = speech_rate_wps
        if on_refusal is not None:
            body["on_refusal"] = on_refusal
        return body

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the server builds for the livestream endpoint (same prompt, same layout)."""
        task = Task(id="demo", split="test", product_docs=self.product_docs, question=self.question,
                    history=self.history, reference=Reference(kind="not_stated"), kind="attribute",
                    difficulty=1)  # fmt: skip
        return build_messages(task)

    def chat_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model or AUTO_MODEL,
            "messages": self.messages(),
            "stream": True,
            "stream_options": {"include_usage": True},
            "include_reasoning": True,
            "viewer_id": self.viewer_id,
        }
        if self.deadline_ms is not None:
            body["deadline_ms"] = self.deadline_ms
        if self.arm is not None:
            body["arm"] = self.arm
        return body


@dataclass
class ReplyResult:
    """A finished reply with what the server measured (ms from the request's arrival)."""

    reply: str
    reasoning: str = ""
    arm: str | None = None
    experiment: str | None = None
    model: str | None = None
    request_id: str | None = None
    queue_ms: float | None = None
    first_token_ms: float | None = None
    first_reply_token_ms: float | None = None
    e2e_ms: float | None = None
    prompt_tokens: int | None = None
    reasoning_tokens: int | None = None
    reply_tokens: int | None = None
    deadline_ms: int | None = None
    deadline_met: bool | None = None
    forced_end_of_thinking: bool = False
    fallback: bool = False
    cut_at_deadline: bool = False
    finish_reason: str | None = None
    refused: bool = False  # admission refused it and the server spoke its filler line (``on_refusal: filler``)
    refusal_reason: str | None = None
    client_ms: float | None = None  # wall time seen by the demo (includes the HTTP round trip)
    first_sentence_ms: float | None = None  # a streamed livestream reply's first sentence event

    @property
    def total_tokens(self) -> int | None:
        if self.reasoning_tokens is None and self.reply_tokens is None:
            return None
        return (self.reasoning_tokens or 0) + (self.reply_tokens or 0)


@dataclass(frozen=True)
class Delta:
    """A piece of a streamed reply: ``phase`` is ``reasoning`` or ``reply``."""

    phase: str
    text: str


@dataclass(frozen=True)
class Sentence:
    """A sentence of a streamed livestream reply (``event: sentence``): never retracted; ``at_ms`` from the
    request's arrival (the server's clock), ``client_ms`` from the demo's request (its own clock)."""

    index: int
    text: str
    at_ms: float
    client_ms: float
    fallback: bool = False


@dataclass
class _StreamState:
    reasoning: list[str] = field(default_factory=list)
    reply: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    request_id: str | None = None
    finish_reason: str | None = None


def _error_from_response(r: httpx.Response) -> ServerError:
    """Map a non-2xx answer (OpenAI-style ``{"error": {...}}`` body, or anything else) to a ServerError."""
    message, param = r.reason_phrase or "error", None
    try:
        err = r.json().get("error")
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            param = err.get("param")
        elif isinstance(err, str):
            message = err
    except (ValueError, AttributeError):
        text = r.text.strip()
        if text:
            message = text[:300]
    status = r.status_code
    retry = None
    if status == 429:
        ms = r.headers.get("retry-after-ms")
        sec = r.headers.get("retry-after")
        try:
            retry = float(ms) / 1000 if ms else (float(sec) if sec else None)
        except ValueError:
            retry = None
        return ServerError("overloaded", message, status, param, retry)
    if status in (401, 403):
        return ServerError("auth", message, status, param)
    if status == 404:
        return ServerError("not_found", message, status, param)
    if 400 <= status < 500:
        return ServerError("bad_request", message, status, param)
    return ServerError("server", message, status, param)


def _result_from_livestream(d: dict[str, Any], client_ms: float) -> ReplyResult:
    t = d.get("timings") or {}
    tok = d.get("tokens") or {}
    return ReplyResult(
        reply=d.get("reply") or "",
        reasoning=d.get("reasoning") or "",
        arm=d.get("arm"),
        experiment=d.get("experiment"),
        model=d.get("model"),
        request_id=d.get("request_id"),
        queue_ms=t.get("queue_ms"),
        first_token_ms=t.get("first_token_ms"),
        first_reply_token_ms=t.get("first_reply_token_ms"),
        e2e_ms=t.get("e2e_ms"),
        prompt_tokens=tok.get("prompt"),
        reasoning_tokens=tok.get("reasoning"),
        reply_tokens=tok.get("reply"),
        deadline_ms=d.get("deadline_ms"),
        deadline_met=d.get("deadline_met"),
        forced_end_of_thinking=bool(d.get("forced_end_of_thinking")),
        fallback=bool(d.get("fallback")),
        cut_at_deadline=bool(d.get("cut_at_deadline")),
        finish_reason=d.get("finish_reason"),
        refused=bool(d.get("refused")),
        refusal_reason=d.get("refusal_reason"),
        client_ms=round(client_ms, 1),
        first_sentence_ms=t.get("first_sentence_ms"),
    )


def _result_from_stream(s: _StreamState, client_ms: float) -> ReplyResult:
    f, u = s.flags, s.usage
    t = f.get("timings") or {}
    completion = u.get("completion_tokens")
    reasoning = (u.get("completion_tokens_details") or {}).get("reasoning_tokens")
    return ReplyResult(
        reply="".join(s.reply),
        reasoning="".join(s.reasoning).strip(),
        arm=f.get("arm"),
        experiment=f.get("experiment"),
        model=s.model,
        request_id=s.request_id,
        queue_ms=t.get("queue_ms"),
        first_token_ms=t.get("first_token_ms"),
        first_reply_token_ms=t.get("first_reply_token_ms"),
        e2e_ms=t.get("e2e_ms"),
        prompt_tokens=u.get("prompt_tokens"),
        reasoning_tokens=reasoning,
        reply_tokens=None if completion is None else max(0, completion - (reasoning or 0)),
        deadline_ms=f.get("deadline_ms"),
        deadline_met=f.get("deadline_met"),
        forced_end_of_thinking=bool(f.get("forced_end_of_thinking")),
        fallback=bool(f.get("fallback")),
        cut_at_deadline=bool(f.get("cut_at_deadline")),
        finish_reason=s.finish_reason,
        client_ms=round(client_ms, 1),
    )


class LivethinkClient:
    """Synchronous client (Gradio runs handlers in worker threads). Cheap to create; one per app."""

    def __init__(self, base_url: str, api_key: str | None = None, admin_key: str | None = None,
                 timeout_s: float = 60.0):  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.admin_key = admin_key
        self.timeout = httpx.Timeout(timeout_s, connect=5.0)

    # -- plumbing --------------------------------------------------------------------------------------
    def _headers(self, admin: bool = False) -> dict[str, str]:
        key = (self.admin_key or self.api_key) if admin else (self.api_key or self.admin_key)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _wrap(self, exc: httpx.HTTPError) -> ServerError:
        if isinstance(exc, httpx.TimeoutException):
            return ServerError(
                "timeout", f"the server at {self.base_url} did not answer in time ({type(exc).__name__})"
            )
        if isinstance(
            exc, httpx.ConnectError | httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError
        ):
            return ServerError("unreachable", f"cannot reach the livethink server at {self.base_url} ({exc})")
        return ServerError("protocol", f"{type(exc).__name__}: {exc}")

    def _request(self, method: str, path: str, *, admin: bool = False, json_body: Any = None,
                 params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:  # fmt: skip
        try:
            r = httpx.request(method, self.base_url + path, json=json_body, params=params,
                              headers=self._headers(admin), timeout=timeout or self.timeout)  # fmt: skip
        except httpx.HTTPError as exc:
            raise self._wrap(exc) from None
        if r.status_code >= 400:
            raise _error_from_response(r)
        try:
            return r.json()
        except ValueError:
            raise ServerError("protocol", f"{path} did not return JSON: {r.text[:200]!r}") from None

    # -- endpoints -------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health", timeout=5.0)

    def models(self) -> list[str]:
        """Served model names (without the ``auto`` alias)."""
        data = self._request("GET", "/v1/models", timeout=5.0).get("data") or []
        return [m["id"] for m in data if isinstance(m, dict) and m.get("id") and m["id"] != AUTO_MODEL]

    def experiments(self) -> dict[str, list[str]]:
        """Experiment name → arm names, from ``GET /v1/admin/status`` ({} when it is unavailable)."""
        try:
            status = self._request("GET", "/v1/admin/status", admin=True, timeout=5.0)
        except ServerError:
            return {}
        exps = status.get("experiments") or {}
        return {str(k): [str(a) for a in v] for k, v in exps.items() if isinstance(v, list)}

    def reply(self, req: ReplyRequest) -> ReplyResult:
        """``POST /v1/livestream/reply`` (not streamed)."""
        t0 = time.perf_counter()
        d = self._request("POST", "/v1/livestream/reply", json_body=req.livestream_body())
        return _result_from_livestream(d, (time.perf_counter() - t0) * 1000)

    def stream_reply(self, req: ReplyRequest) -> Iterator[Delta | ReplyResult]:
        """Stream the reply (``POST /v1/chat/completions``, SSE): ``Delta``s, then one ``ReplyResult``."""
        t0 = time.perf_counter()
        state = _StreamState()
        try:
            with httpx.stream("POST", self.base_url + "/v1/chat/completions", json=req.chat_body(),
                              headers=self._headers(), timeout=self.timeout) as r:  # fmt: skip
                if r.status_code >= 400:
                    r.read()
                    raise _error_from_response(r)
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments (pings), event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    yield from self._chunk(data, state)
        except httpx.HTTPError as exc:
            raise self._wrap(exc) from None
        yield _result_from_stream(state, (time.perf_counter() - t0) * 1000)

    def speak_reply(self, req: ReplyRequest, speech_rate_wps: float | None = None,
                    on_refusal: str | None = "filler") -> Iterator[Sentence | ReplyResult]:
        """Stream the livestream reply as the avatar gets it (``POST /v1/livestream/reply`` with ``stream: true``,
        SSE ``plan`` / ``sentence`` / ``done`` events): each ``Sentence`` as soon as it is decoded, then one
        ``ReplyResult`` (its ``first_token_ms`` …; ``first_sentence_ms`` is the first ``Sentence``'s ``at_ms``).
        ``on_refusal``: ``filler`` (the avatar's way, never silent: a request the server cannot admit in time is
        answered with its filler line, ``refused``) or ``error`` (a 429)."""
        t0 = time.perf_counter()
        body = req.livestream_body(stream=True, speech_rate_wps=speech_rate_wps, on_refusal=on_refusal)
        try:
            with httpx.stream("POST", self.base_url + "/v1/livestream/reply", json=body, headers=self._headers(),
                              timeout=self.timeout) as r:  # fmt: skip
                if r.status_code >= 400:
                    r.read()
                    raise _error_from_response(r)
                event = None
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        continue
                    if not line.startswith("data:"):
                        continue
                    try:
                        data = json.loads(line[5:].strip())
                    except ValueError:
                        raise ServerError("protocol", f"a stream event is not JSON: {line[:200]!r}") from None
                    kind = event or data.get("event")
                    if kind == "error" or "error" in data:
                        err = data.get("error") if isinstance(data.get("error"), dict) else {"message": str(data)}
                        raise ServerError("server", str(err.get("message", "stream failed")), None, err.get("param"))
                    if kind == "sentence":
                        yield Sentence(int(data["index"]), data["text"], float(data["at_ms"]),
                                       (time.perf_counter() - t0) * 1000, bool(data.get("fallback")))
                    elif kind == "done":
                        yield _result_from_livestream(data, (time.perf_counter() - t0) * 1000)
                        return
        except httpx.HTTPError as exc:
            raise self._wrap(exc) from None
        raise ServerError("protocol", "the reply stream ended without its done event")

    @staticmethod
    def _chunk(data: str, state: _StreamState) -> Iterator[Delta]:
        try:
            chunk = json.loads(data)
        except ValueError:
            raise ServerError("protocol", f"a stream event is not JSON: {data[:200]!r}") from None
        if "error" in chunk:
            err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            raise ServerError("server", str(err.get("message", "stream failed")), None, err.get("param"))
        state.model = chunk.get("model") or state.model
        state.request_id = chunk.get("id") or state.request_id
        if chunk.get("livethink"):
            state.flags = chunk["livethink"]
        if chunk.get("usage"):
            state.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning"):
                state.reasoning.append(delta["reasoning"])
                yield Delta("reasoning", delta["reasoning"])
            if delta.get("content"):
                state.reply.append(delta["content"])
                yield Delta("reply", delta["content"])
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]

    def experiment_summary(self, name: str) -> dict[str, Any]:
        """``GET /v1/ab/experiments/{name}``. Asks for the full analysis (``view=full``); a server that only
        has the compact live summary answers with that, and the demo draws what it can from it."""
        return self._request("GET", f"/v1/ab/experiments/{name}", admin=True, params={"view": "full"})
