"""Engines behind one interface (``base.Engine``): vLLM ``AsyncLLM`` and a transformers fallback.

``build_engines(config)`` makes one engine per checkpoint (LoRA variants share their base's vLLM engine;
the transformers fallback merges an adapter into its own copy) and says which engine serves which model.
``engine.kind: auto`` prefers vLLM and falls back to transformers when vLLM is missing or fails to start.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

from livethink.serve.config import ServeConfig
from livethink.serve.engines.base import (
    FORCED_THINK_END,
    Delta,
    Engine,
    EngineStats,
    GenerationRequest,
    SamplingOptions,
    ThinkingGuard,
)

log = logging.getLogger(__name__)

__all__ = [
    "FORCED_THINK_END",
    "Delta",
    "Engine",
    "EngineSet",
    "EngineStats",
    "GenerationRequest",
    "SamplingOptions",
    "ThinkingGuard",
    "build_engines",
    "start_engines",
]


@dataclass
class EngineSet:
    engines: dict[str, Engine]  # engine key -> engine
    engine_keys: dict[str, str]  # model -> engine key
    capacities: dict[str, int]  # engine key -> max concurrent requests


def _vllm_set(config: ServeConfig) -> EngineSet:
    from livethink.serve.engines.vllm_engine import VLLMEngine, VLLMSettings

    e = config.engine
    settings = VLLMSettings(
        dtype=e.dtype,
        max_model_len=e.max_model_len,
        enforce_eager=e.enforce_eager,
        kv_cache_gib=e.kv_cache_gib,
        gpu_memory_utilization=e.gpu_memory_utilization,
        tensor_parallel_size=e.tensor_parallel_size,
        max_num_seqs=e.max_num_seqs,
        enable_prefix_caching=e.enable_prefix_caching,
        budget_forcing=e.budget_forcing,
        max_lora_rank=e.max_lora_rank,
        calculator=e.calculator,
    )
    engines, keys, caps = {}, {}, {}
    for base, variants in config.engine_groups().items():
        engines[base] = VLLMEngine(config.models[base].path, variants, settings)
        caps[base] = config.models[base].max_concurrency or e.max_concurrency
        keys.update({v: base for v in variants})
    return EngineSet(engines, keys, caps)


def _transformers_set(config: ServeConfig) -> EngineSet:
    from livethink.serve.engines.transformers_engine import TransformersEngine

    engines, keys, caps = {}, {}, {}
    for name, spec in config.models.items():
        path = spec.path if spec.path is not None else config.models[spec.base].path
        engines[name] = TransformersEngine(
            name, path, spec.lora, config.engine.transformers_dtype, config.engine.transformers_threads,
            calculator=config.engine.calculator, device=config.engine.transformers_device,
        )
        keys[name] = name
        caps[name] = 1  # one request at a time; the rest wait in the controller's queue
    return EngineSet(engines, keys, caps)


def build_engines(config: ServeConfig, kind: str | None = None) -> EngineSet:
    kind = kind or config.engine.kind
    if kind == "transformers":
        return _transformers_set(config)
    if kind == "vllm" or importlib.util.find_spec("vllm") is not None:
        return _vllm_set(config)
    log.warning("vLLM is not installed: using the transformers engine")
    return _transformers_set(config)


async def start_engines(config: ServeConfig) -> EngineSet:
    """Build and start the engines; with ``engine.kind: auto`` a vLLM failure falls back to transformers."""
    engine_set = build_engines(config)
    try:
        for engine in engine_set.engines.values():
            await engine.start()
    except Exception as exc:
        for engine in engine_set.engines.values():
            try:
                await engine.stop()
            except Exception:
                log.debug("stopping a failed engine raised", exc_info=True)
        if config.engine.kind != "auto" or all(e.kind == "transformers" for e in engine_set.engines.values()):
            raise
        log.warning("vLLM engine failed to start (%s): falling back to transformers", exc)
        engine_set = build_engines(config, "transformers")
        for engine in engine_set.engines.values():
            await engine.start()
    return engine_set
