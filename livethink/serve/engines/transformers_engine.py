"""Fallback engine on plain transformers: a background thread runs a manual decode loop (KV cache, one request
at a time), so it works wherever transformers does (no vLLM, or a vLLM that cannot load the model). On a CUDA
device with ``cuda_graph`` the decode step is replayed from a captured CUDA graph (``decoders.GraphDecoder``).

The loop checks, before every token, the request's cancel flag (``abort`` / a cancelled iterator) and the
thinking budget: at the cap or the thinking deadline it feeds the model's forced reasoning end (``\\n</think>\\n\\n``
by default, any number of tokens) itself (budget forcing) and the reply continues. Deltas go back to the event loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from livethink.calculator.processors import force, forced_token, result_char_token_ids
from livethink.data.budget_forcing import ForcingTokens, banned_token, thinking_opened
from livethink.data.reasoning_format import THINK, ReasoningFormat, resolve
from livethink.engines import load_generation_model
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import (
    Delta,
    EngineDead,
    EngineStats,
    GenerationRequest,
    ThinkingGuard,
    single_token_id,
)
from livethink.serve.engines.decoders import DynamicDecoder, GraphCaptureError, GraphDecoder

log = logging.getLogger(__name__)
_DONE = object()


@dataclass
class _Job:
    request: GenerationRequest
    budget: TokenBudget
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue
    cancel: threading.Event = field(default_factory=threading.Event)

    def put(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed during shutdown
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)


class _IncrementalDecoder:
    """Decode a growing id list and return only the new text (holding back an incomplete UTF-8 tail)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text already returned

    def push(self, ids: list[int]) -> str:
        self.ids += ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        new, self.sent = text[self.sent :], len(text)
        return new


class TransformersEngine:
    """One model variant (a checkpoint, optionally with a LoRA adapter) on transformers."""

    kind = "transformers"

    def __init__(
        self,
        name: str,
        path: str | Path,
        lora_path: str | Path | None = None,
        dtype: str = "float32",
        num_threads: int | None = None,
        calculator: bool = False,
        device: str = "auto",
        reasoning: Any = "auto",
        cuda_graph: bool = False,
        max_len: int = 1024,
    ):
        self.name = name
        self.models = (name,)
        self.path = str(path)
        self.lora_path = str(lora_path) if lora_path else None
        self.dtype = dtype
        self.num_threads = num_threads
        self.calculator = calculator
        self.device = device  # resolved at load: "auto" is the accelerator if torch sees one, else cpu
        self.reasoning = reasoning  # the config's setting; resolved at load into ``reasoning_format``
        self.reasoning_format: ReasoningFormat = THINK
        self.cuda_graph = cuda_graph  # capture the decode step on a CUDA device
        self.max_len = max_len  # the captured step's cache positions (prompt + reply); longer requests decode eagerly
        self.decode = "eager"  # how tokens are decoded, and why (engine stats)
        self._graph: GraphDecoder | None = None
        self._eager_long = 0  # requests too long for the captured step's cache
        self._jobs: queue.Queue = queue.Queue()
        self._active: dict[str, _Job] = {}
        self._running = 0
        self._busy = False
        self._aborts = 0
        self._thread: threading.Thread | None = None
        self.model: Any = None
        self.tokenizer: Any = None

    async def start(self) -> None:
        await asyncio.to_thread(self._load)
        self._jobs = queue.Queue()  # a fresh queue: a wedged old thread that wakes up later finds no work
        self._thread = threading.Thread(
            target=self._worker, args=(self._jobs,), name=f"transformers-engine-{self.name}", daemon=True
        )
        self._thread.start()

    def alive(self) -> bool:
        """The decode thread is running (a dead decode thread is a dead engine)."""
        return self._thread is not None and self._thread.is_alive()

    def _load(self) -> None:
        self.model, self.tokenizer, self.device = load_generation_model(
            self.path, dtype=self.dtype, device=self.device, lora_path=self.lora_path, num_threads=self.num_threads
        )
        self.reasoning_format, why = resolve(self.reasoning, self.tokenizer, self.lora_path, self.path)
        log.info("%s: reasoning format %s (%s)", self.name, self.reasoning_format.describe(), why)
        fmt = self.reasoning_format
        self._close_id = single_token_id(self.tokenizer, fmt.end)
        self._end_ids = self.tokenizer.encode(fmt.forced_end, add_special_tokens=False) if fmt.thinks else []
        self._forcing_tokens = ForcingTokens.of(self.tokenizer, fmt) if fmt.thinks else None
        eos = self.model.generation_config.eos_token_id
        self._eos = set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}
        self._eos.discard(None)
        if self.calculator:
            self._calc_ids = result_char_token_ids(self.tokenizer)
        self._graph, self.decode = self._capture_decode()

    def _capture_decode(self) -> tuple[GraphDecoder | None, str]:
        if not self.cuda_graph:
            return None, "eager"
        if not str(self.device).startswith("cuda"):
            why = f"eager (CUDA graphs need a CUDA device; this engine is on {self.device})"
            log.warning("%s: %s", self.name, why)
            return None, why
        try:
            return GraphDecoder(self.model, self.max_len, capture=True), "cuda_graph"
        except GraphCaptureError as exc:
            why = f"eager (the decode step could not be captured as a CUDA graph: {exc})"
            log.warning("%s: %s", self.name, why)
            return None, why

    async def stop(self) -> None:
        for job in list(self._active.values()):
            job.cancel.set()
        if self._thread is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._thread.join, 10)  # a wedged thread is left behind (daemon)
            self._thread = None

    def tokenizer_for(self, model: str) -> Any:
        return self.tokenizer

    # -- the worker thread ------------------------------------------------------------------------------
    def _worker(self, jobs: queue.Queue) -> None:
        job = None
        try:
            while True:
                job = jobs.get()
                if job is None:
                    return
                if job.cancel.is_set():
                    job.put(_DONE)
                    continue
                self._busy = True
                try:
                    self._run(job)
                except Exception as exc:  # delivered to the awaiting request
                    log.exception("transformers engine failed on %s", job.request.request_id)
                    job.put(exc)
                finally:
                    self._busy = False
                job.put(_DONE)
        except BaseException as exc:  # the thread dies: every waiting request learns it, not just this one
            log.error("transformers engine %s: the decode thread died: %r", self.name, exc)
            dead = EngineDead(f"the decode thread of engine {self.name!r} died ({type(exc).__name__})")
            for waiting in [job, *self._active.values()]:
                if waiting is not None:
                    waiting.put(dead)
                    waiting.put(_DONE)
            raise

    def _run(self, job: _Job) -> None:
        import torch

        req, budget = job.request, job.budget
        opts = req.sampling
        gen = torch.Generator().manual_seed(opts.seed) if opts.seed is not None else None
        fmt = self.reasoning_format
        thinking = req.thinking and fmt.thinks
        # thinking counts the pre-filled tokens after the start delimiter (livethink.data.budget_forcing)
        prefilled = thinking_opened(req.prompt_token_ids, (), self._forcing_tokens) if thinking else None
        guard = ThinkingGuard(self._close_id, budget, thinking=thinking, close_text=fmt.end,
                              count=prefilled[1] if prefilled else 0)
        decoder = _IncrementalDecoder(self.tokenizer)
        text_so_far = ""
        model = self._decoder(len(req.prompt_token_ids) + budget.max_tokens + len(self._end_ids))
        pending = list(req.prompt_token_ids)  # tokens to feed with the next forward pass
        sequence = list(req.prompt_token_ids)  # everything so far (the calculator reads its tail)
        produced, limit, finish = 0, budget.max_tokens, "length"
        with torch.inference_mode():
            while True:
                if job.cancel.is_set():
                    finish = "abort"
                    break
                if guard.must_force():  # budget forcing: close the think block, the reply gets its reserve
                    guard.thinking = False
                    pending += self._end_ids
                    sequence += self._end_ids
                    decoder.push(self._end_ids)
                    text_so_far += fmt.forced_end
                    job.put(Delta(fmt.forced_end, len(self._end_ids), forced_end_of_thinking=True,
                                  token_ids=tuple(self._end_ids)))
                    limit = produced + budget.reply_cap
                if produced >= limit:
                    break
                logits = model.feed(pending).float().cpu()  # sampled on the host: the next step needs the token there
                if opts.ignore_eos or produced < opts.min_tokens:
                    logits[list(self._eos)] = float("-inf")
                if thinking:  # once thinking is open it is not opened again (livethink.data.budget_forcing)
                    banned = banned_token(req.prompt_token_ids, sequence[len(req.prompt_token_ids):],
                                          self._forcing_tokens)
                    if banned is not None:
                        logits[banned] = float("-inf")
                if self.calculator:
                    forced = forced_token(self.tokenizer, self._calc_ids, sequence)
                    if forced is not None:
                        logits = force(logits, forced)
                token = _sample(logits, opts.temperature, opts.top_p, gen)
                if token in self._eos:
                    finish = "stop"
                    break
                pending = [token]
                sequence.append(token)
                produced += 1
                text = decoder.push(pending)
                was_thinking = guard.thinking
                guard.observe(pending, text)
                if was_thinking and not guard.thinking:  # closed by the model: the reply gets its reserve
                    limit = min(limit, produced + budget.reply_cap)
                text_so_far += text
                job.put(Delta(text, 1, token_ids=(token,)))
                if opts.stop and any(s in text_so_far for s in opts.stop):
                    finish = "stop"
                    break
        job.put(Delta("", 0, finish_reason=finish, thinking_tokens=guard.count))

    def _decoder(self, positions: int) -> DynamicDecoder | GraphDecoder:
        """The captured step when a sequence of ``positions`` fits its cache, else the eager loop."""
        if self._graph is not None:
            if self._graph.fits(positions):
                return self._graph.begin()
            self._eager_long += 1
        return DynamicDecoder(self.model, self.device)

    # -- async API --------------------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]:
        if self._thread is None:
            raise RuntimeError("engine not started")
        if not self._thread.is_alive():
            raise EngineDead(f"the decode thread of engine {self.name!r} is dead")
        if request.model not in self.models:
            raise KeyError(f"model {request.model!r} is not served by this engine ({self.models})")
        job = _Job(request, budget, asyncio.get_running_loop(), asyncio.Queue())
        self._active[request.request_id] = job
        self._running += 1
        self._jobs.put(job)
        try:
            while True:
                item = await job.out.get()
                if item is _DONE:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            job.cancel.set()  # a cancelled consumer stops the decode loop at the next token
            self._running -= 1
            self._active.pop(request.request_id, None)

    async def abort(self, request_id: str) -> None:
        job = self._active.get(request_id)
        if job is not None and not job.cancel.is_set():
            self._aborts += 1
            job.cancel.set()

    def stats(self) -> EngineStats:
        unfinished = int(self._busy) + self._jobs.qsize()
        return EngineStats(
            self.kind, self.models, self._running, unfinished, self._aborts,
            {"queued": self._jobs.qsize(), "decode": self.decode, "eager_too_long": self._eager_long},
        )


def _sample(logits: Any, temperature: float, top_p: float, generator: Any) -> int:
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
        probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
    return int(torch.multinomial(probs, 1, generator=generator))
