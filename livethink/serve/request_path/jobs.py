"""Preparing a job: a validated request becomes a ``Job`` (arm, model, deadline, prompt ids, sampling), or a
400/404 ``APIError`` naming the field. Also what the request path needs to know about a model: its reasoning
format, tokenizer-rendered prompts and the tokens a forced end of thinking adds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from livethink.data.budget_forcing import ForcingTokens, thinking_opened
from livethink.data.prompt import build_messages, render_prompt_ids
from livethink.data.reasoning_format import ReasoningFormat
from livethink.data.schema import Reference, Task
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.config import ServeConfig
from livethink.serve.engines.base import Engine, SamplingOptions
from livethink.serve.errors import bad_request, not_found
from livethink.serve.protocol import ChatCompletionRequest, LivestreamReplyRequest
from livethink.serve.request_path.generation import Result
from livethink.serve.request_path.prompt_length import chars_per_token, too_many_characters, too_many_tokens
from livethink.serve.telemetry.ab_hooks import ArmChoice, ServeHooks
from livethink.serve.telemetry.metrics import arm_label

AUTO_MODEL = "auto"  # chat requests naming this model get the A/B arm's variant (or the default model)


@dataclass
class Job:
    request_id: str
    endpoint: str  # livestream | chat
    model: str
    engine_key: str
    choice: ArmChoice
    viewer_id: str | None
    prompt_ids: list[int]
    thinking: bool
    sampling: SamplingOptions
    deadline_ms: int
    arrival: float  # monotonic
    max_tokens: int | None = None
    max_thinking: int | None = None
    reply_reserve: int | None = None
    simulated: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    deferred: bool = False  # accounting waits for ``Service.finish`` (the last byte sent); else at the end of run
    result: Result | None = None
    t_done: float | None = None  # monotonic: generation over, the result built
    t_cut: float | None = None  # monotonic: the planned hard cut, when generation was cut there
    min_thinking: int = 0  # the model's thinking floor for this request (``quality.required_thinking``)
    quality_fallback: bool = False  # admitted to the fallback reply: the floor did not fit the deadline
    # a streamed livestream reply (``stream: true``): sentences paced to speech at this rate (words per second)
    stream: bool = False
    speech_rate_wps: float = 2.5
    first_sentence_tokens: int | None = None  # planning default for the first sentence (streamed only)
    on_refusal: str = "error"  # error (429) | filler (a filler line, marked refused)
    refusal_reason: str | None = None  # admission refused it and a filler line answers (on_refusal: filler)
    plan: TokenBudget | None = None  # the budget at admission (the engine gets the one re-planned at its slot)
    http_id: str | None = None  # the request's X-Request-Id (the client's own, or the one the server gave it)

    @property
    def public_id(self) -> str:
        """The id the client sees and every record carries: the livestream reply's ``request_id``, the A/B
        exposure and response events, the access line's ``request_id`` (``X-Request-Id``; else the job's own).
        ``request_id`` stays the job's own, unique id inside the server (engine, queues, the chat ``id``)."""
        return self.http_id or self.request_id

    @property
    def labels(self) -> tuple[str, str, str]:
        return self.endpoint, arm_label(self.choice.arm), self.model

    @property
    def reply_fills_max_tokens(self) -> bool:
        """The reply may use what the caller's ``max_tokens`` leaves after thinking (OpenAI's chat contract), not
        only the reply reserve."""
        return self.endpoint == "chat"

    @property
    def reply_key(self) -> str:
        """Reply lengths are learnt per endpoint and model (a chat reply is not a livestream one)."""
        return f"{self.endpoint}:{self.model}"


@dataclass
class JobBuilder:
    """Builds jobs for the served models."""

    config: ServeConfig
    engines: Mapping[str, Engine]  # engine key -> engine
    engine_keys: Mapping[str, str]  # model -> engine key
    hooks: ServeHooks
    _forcing_tokens: dict[str, ForcingTokens] = field(default_factory=dict)
    _chars_per_token: dict[str, int | None] = field(default_factory=dict)  # model -> prompt_length.chars_per_token

    # -- the models ----------------------------------------------------------------------------------------
    @property
    def models(self) -> list[str]:
        return list(self.engine_keys)

    def model_of(self, engine_key: str) -> str:
        return next(m for m, k in self.engine_keys.items() if k == engine_key)

    def reasoning_format(self, model: str) -> ReasoningFormat:
        """The model's reasoning delimiters (resolved by its engine at start)."""
        return self.engines[self.engine_keys[model]].reasoning_format

    def tokenize(
        self, model: str, messages: list[dict[str, str]], thinking: bool, param: str | None,
        parts: Mapping[str, Sequence[str]] | None = None,
    ) -> list[int]:  # fmt: skip
        """The prompt ids of ``messages`` for ``model``; past ``max_prompt_tokens`` a 400 naming ``param`` (None:
        the longest of ``parts``, request field → its texts) with each part's token count and the template's."""
        tok = self.engines[self.engine_keys[model]].tokenizer_for(model)
        ids = render_prompt_ids(tok, messages, self.reasoning_format(model), thinking)
        limit = self.config.max_prompt_tokens
        if len(ids) > limit:
            raise too_many_tokens(tok, len(ids), limit, parts, param)
        return ids

    async def tokenize_off_loop(
        self, model: str, messages: list[dict[str, str]], thinking: bool, param: str | None,
        parts: Mapping[str, Sequence[str]],
    ) -> list[int]:  # fmt: skip
        """``tokenize`` in a worker thread (rendering and tokenising a long prompt would hold every other request
        on the event loop), after a count of ``parts``' characters that refuses, without tokenising, a prompt
        that cannot fit (``prompt_length``)."""
        if model not in self._chars_per_token:  # once per model: reads the vocabulary
            tok = self.engines[self.engine_keys[model]].tokenizer_for(model)
            self._chars_per_token[model] = await asyncio.to_thread(chars_per_token, tok)
        per_token = self._chars_per_token[model]
        if per_token is not None:
            chars = {name: sum(len(text) for text in texts) for name, texts in parts.items()}
            refused = too_many_characters(chars, self.config.max_prompt_tokens, per_token, param)
            if refused is not None:
                raise refused
        return await asyncio.to_thread(self.tokenize, model, messages, thinking, param, parts)

    def forced_end_tokens(self, model: str, prompt_ids: list[int], thinking: bool) -> int:
        """Tokens a cut adds beyond the thinking cap: the forced end, less the thinking the prompt pre-filled."""
        fmt = self.reasoning_format(model)
        if not (thinking and fmt.thinks):
            return 0
        tokens = self._forcing_tokens.get(model)
        if tokens is None:
            tok = self.engines[self.engine_keys[model]].tokenizer_for(model)
            tokens = self._forcing_tokens[model] = ForcingTokens.of(tok, fmt)
        opened = thinking_opened(prompt_ids, (), tokens)
        return max(0, len(tokens.forced_end) - (opened[1] if opened else 0))

    # -- the request's settings ----------------------------------------------------------------------------
    def _choose(
        self, viewer_id: str | None, forced_arm: str | None, session_id: str | None = None, stream_id: str | None = None
    ) -> ArmChoice:
        return self.hooks.assign(viewer_id, forced_arm, session_id=session_id, stream_id=stream_id)

    def _check_model(self, model: str, param: str = "model") -> str:
        if model not in self.engine_keys:
            raise not_found(
                f"{param}: the model {model!r} does not exist (models: {self.models})", param, "model_not_found"
            )
        return model

    def _deadline(
        self, requested: int | None, choice: ArmChoice, endpoint: str, deadline_at: int | None, arrival: float
    ) -> int:
        """The request's deadline in ms from ``arrival``: its own ``deadline_ms``, the arm's or the endpoint's, and
        no later than its absolute ``deadline_at`` (epoch ms), so a retry does not get a fresh deadline."""
        deadline = requested or choice.deadline_ms or self.config.deadline_ms(endpoint)
        if deadline > self.config.budget.max_deadline_ms:
            raise bad_request(
                f"deadline_ms: {deadline} exceeds the server's maximum of "
                f"{self.config.budget.max_deadline_ms} ms",
                "deadline_ms",
            )
        if deadline_at is not None:
            arrived_ms = (time.time() - (time.monotonic() - arrival)) * 1000
            left = int(deadline_at - arrived_ms)
            if left <= 0:
                raise bad_request(
                    f"deadline_at: the request's deadline passed {-left} ms before it arrived", "deadline_at",
                    "deadline_passed",
                )
            deadline = min(deadline, left)
        return deadline

    # -- the two endpoints ---------------------------------------------------------------------------------
    async def livestream(
        self, body: LivestreamReplyRequest, simulated: bool = False, arrival: float | None = None
    ) -> Job:
        """``arrival``: when the request reached the server (monotonic); the deadline counts from there."""
        arrival = arrival or time.monotonic()
        choice = self._choose(body.viewer_id, body.arm, body.session_id, body.stream_id)
        model = self._check_model(body.model or choice.variant or self.config.default_model)
        deadline = self._deadline(body.deadline_ms, choice, "livestream", body.deadline_at, arrival)
        rid = f"live-{uuid.uuid4().hex}"
        task = Task(
            id=rid,
            split="test",
            product_docs=tuple(body.product_docs),
            question=body.question,
            history=tuple(body.history),
            reference=Reference(kind="not_stated"),
            kind="attribute",
            difficulty=1,
        )
        thinking = choice.thinking_budget != 0 and self.reasoning_format(model).thinks
        parts = {"question": [body.question], "product_docs": [d.text for d in body.product_docs],
                 "history": [t.content for t in body.history]}  # fmt: skip
        ids = await self.tokenize_off_loop(model, build_messages(task), thinking, None, parts)
        s = self.config.sampling
        ep = self.config.endpoints.livestream
        temperature = s.temperature if body.temperature is None else body.temperature
        interval = ep.streamed_interval if body.stream else ep.stream_interval
        sampling = SamplingOptions(temperature, s.top_p, body.seed, stream_interval=interval)
        return Job(
            rid,
            "livestream",
            model,
            self.engine_keys[model],
            choice,
            body.viewer_id,
            ids,
            thinking,
            sampling,
            deadline,
            arrival,
            max_tokens=choice.max_tokens,
            max_thinking=choice.thinking_budget,
            reply_reserve=choice.reply_reserve,
            simulated=simulated,
            stream=body.stream,
            speech_rate_wps=body.speech_rate_wps or ep.speech_rate_wps,
            first_sentence_tokens=ep.first_sentence_tokens if body.stream else None,
            on_refusal=body.on_refusal or ep.on_refusal,
        )

    async def chat(self, body: ChatCompletionRequest, simulated: bool = False, arrival: float | None = None) -> Job:
        arrival = arrival or time.monotonic()
        viewer = body.viewer_id or body.user
        choice = self._choose(viewer, body.arm) if (body.model == AUTO_MODEL or body.arm) else ArmChoice()
        model = (choice.variant or self.config.default_model) if body.model == AUTO_MODEL else body.model
        self._check_model(model)
        deadline = self._deadline(body.deadline_ms, choice, "chat", body.deadline_at, arrival)
        messages = [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in body.messages
        ]
        if not any(m["content"].strip() for m in messages):
            raise bad_request("messages: every message is empty", "messages", "empty_prompt")
        caps = [c for c in (body.thinking_token_budget, choice.thinking_budget) if c is not None]
        max_thinking = min(caps) if caps else None
        enable = body.chat_template_kwargs.enable_thinking if body.chat_template_kwargs else True
        thinking = enable and max_thinking != 0 and self.reasoning_format(model).thinks
        parts = {f"messages.{i}": [m["content"]] for i, m in enumerate(messages)}
        ids = await self.tokenize_off_loop(model, messages, thinking, "messages", parts)
        limits = [c for c in (body.max_completion_tokens, body.max_tokens, choice.max_tokens) if c is not None]
        limit = min(limits) if limits else None
        reserve = choice.reply_reserve
        if limit is not None and body.thinking_token_budget:  # both given: the reply gets the rest (after a cut)
            rest = limit - body.thinking_token_budget - self.forced_end_tokens(model, ids, thinking)
            reserve = max(self.config.budget.min_reply_tokens, rest)
        s = self.config.sampling
        sampling = SamplingOptions(
            temperature=s.temperature if body.temperature is None else body.temperature,
            top_p=s.top_p if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=body.stop_list(),
            min_tokens=body.min_tokens,
            ignore_eos=body.ignore_eos,
            stream_interval=self.config.endpoints.chat.stream_interval,
        )
        return Job(
            f"chatcmpl-{uuid.uuid4().hex}",
            "chat",
            model,
            self.engine_keys[model],
            choice,
            viewer,
            ids,
            thinking,
            sampling,
            deadline,
            arrival,
            max_tokens=limit,
            max_thinking=max_thinking,
            reply_reserve=reserve,
            simulated=simulated,
        )
