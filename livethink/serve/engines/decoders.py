"""The transformers engine's decoders: the eager loop over a growing KV cache, and a step over a fixed-size cache
replayed from a captured CUDA graph.

Both feed token ids and return the last position's logits: ``feed(ids)``, whose first call is the prompt.

Eager decoding on a GPU is launch-bound: each token is one forward pass of about a thousand small kernels, and
SmolLM2-135M decodes at ~45-50 ms per token on an H200 that way. A CUDA graph captured once replays the whole
step as one launch (the technique of gpt-fast, https://github.com/pytorch-labs/gpt-fast, and of vLLM's CUDA graphs,
https://docs.vllm.ai/en/latest/design/cuda_graphs.html). A graph fixes every tensor's address and shape, so the
step reads its token, position and attention mask from static buffers, and the KV cache is transformers'
``StaticCache`` of ``max_len`` positions (it advances its own position on the device).

``GraphDecoder(model, max_len, capture=False)`` runs the same static-cache step eagerly: that is how it is tested
on a CPU, against the engine's dynamic-cache loop.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

WARMUP_STEPS = 3  # eager steps on a side stream before capture (PyTorch's CUDA-graph recipe)


class DynamicDecoder:
    """Eager forward passes over transformers' growing cache: any model, any device, any length."""

    def __init__(self, model: Any, device: Any):
        self.model = model
        self.device = device
        self.cache: Any = None

    def feed(self, ids: list[int]) -> Any:
        import torch

        out = self.model(input_ids=torch.tensor([ids], device=self.device), past_key_values=self.cache,
                         use_cache=True)
        self.cache = out.past_key_values
        return out.logits[0, -1]


class GraphCaptureError(RuntimeError):
    """The model's decode step cannot be captured, or its replay does not match the eager step."""


class GraphDecoder:
    """Prefill and one-token steps of one sequence at a time over a ``StaticCache`` of ``max_len`` positions.

    ``prefill(ids)`` starts a new sequence and returns the last position's logits; ``step(token)`` appends one token
    and returns its logits. Both return a device tensor of shape ``(vocab,)`` that the next call overwrites.
    """

    def __init__(self, model: Any, max_len: int, *, capture: bool):
        import torch
        from transformers import StaticCache

        self.model = model
        self.max_len = max_len
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.min_value = torch.finfo(self.dtype).min
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.token = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        # additive mask over the cache (0: attend, min: not): eager and SDPA attention both read it as is
        self.mask = torch.full((1, 1, 1, max_len), self.min_value, dtype=self.dtype, device=self.device)
        self.length = 0  # positions filled
        self.graph: Any = None
        self.logits: Any = None
        if capture:
            self._capture()

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def fits(self, tokens: int) -> bool:
        """A sequence of ``tokens`` positions fits in the cache."""
        return tokens <= self.max_len

    def feed(self, ids: list[int]) -> Any:
        """The first call after ``begin()`` is the prompt's prefill; later calls step through ``ids`` one by one."""
        if self.length == 0:
            return self.prefill(ids)
        logits = None
        for token in ids:
            logits = self.step(token)
        return logits

    def begin(self) -> GraphDecoder:
        """Start a new sequence (the next ``feed`` is its prompt)."""
        self.length = 0
        return self

    def prefill(self, ids: list[int]) -> Any:
        import torch

        if not ids or not self.fits(len(ids)):
            raise ValueError(f"prefill of {len(ids)} tokens: needs 1..{self.max_len} (the cache's positions)")
        self.cache.reset()
        n = len(ids)
        positions = torch.arange(n, device=self.device)
        allowed = torch.arange(self.max_len, device=self.device)[None, :] <= positions[:, None]
        mask = torch.where(allowed, 0.0, self.min_value).to(self.dtype)[None, None]
        out = self.model(input_ids=torch.tensor([ids], device=self.device), position_ids=positions[None],
                         attention_mask=mask, past_key_values=self.cache, use_cache=True)
        self.mask.fill_(self.min_value)
        self.mask[..., :n] = 0.0
        self.length = n
        return out.logits[0, -1]

    def step(self, token: int) -> Any:
        if self.length >= self.max_len:
            raise ValueError(f"the cache's {self.max_len} positions are full")
        self.token.fill_(token)
        self.position.fill_(self.length)
        self.mask[..., self.length] = 0.0
        self.length += 1
        if self.graph is not None:
            self.graph.replay()
            return self.logits[0, -1]
        return self._forward()[0, -1]

    def _forward(self) -> Any:
        return self.model(input_ids=self.token, position_ids=self.position, attention_mask=self.mask,
                          past_key_values=self.cache, use_cache=True).logits

    def _capture(self) -> None:
        """Warm up on a side stream, capture one step, and check its replay against the eager step."""
        import torch

        probe = [0, 1]
        try:
            with torch.inference_mode():
                self.prefill(probe[:1])  # allocates the cache (lazily, on first use) outside the graph
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_STEPS):
                        self.prefill(probe[:1])
                        expected = self.step(probe[1]).float().clone()
                torch.cuda.current_stream(self.device).wait_stream(side)
                self.prefill(probe[:1])
                self.token.fill_(probe[1])
                self.position.fill_(1)
                self.mask[..., 1] = 0.0
                graph = torch.cuda.CUDAGraph()
                # thread_local: another engine's thread may run on the GPU meanwhile (a restart while one decodes)
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    self.logits = self._forward()
                self.prefill(probe[:1])  # capture records the step without running it
                self.graph = graph
                got = self.step(probe[1]).float()
                torch.cuda.synchronize(self.device)
        except Exception as exc:  # any op that syncs with the host (MoE routing, a data-dependent shape) fails here
            self.graph = None
            raise GraphCaptureError(f"{type(exc).__name__}: {exc}") from exc
        if not torch.allclose(got, expected, atol=1e-2, rtol=1e-2):
            self.graph = None
            raise GraphCaptureError(
                f"the replayed step differs from the eager one (max |diff| {float((got - expected).abs().max()):.3g})"
            )
        log.info("decode step captured as a CUDA graph (%d cache positions)", self.max_len)
