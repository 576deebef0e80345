"""Engines behind one interface (``base.Engine``): vLLM ``AsyncLLM`` and a transformers fallback.

``build_engines(config)`` makes one engine per checkpoint (LoRA variants share their base's vLLM engine;
the transformers fallback merges an adapter into its own copy) and says which engine serves which model.
``engine.kind: auto`` prefers vLLM and falls back to transformers when vLLM is missing or fails to start, and
says why (the log, ``/health`` and ``livethink doctor``); ``engine.kind: vllm`` fails at start with the reason.

The package also owns the engines' supervision (``supervisor`` over the pure state machine ``states``: a dead or
wedged engine is refused with 503 and restarted), their CPU priority (``priority``) and the idle probes that keep
the decode estimate measured (``probes``).

May import: ``livethink.serve.budget``, ``.config``, ``.errors``; never the request path, telemetry or the HTTP
surface.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from livethink.engines import choose_engine
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
    "EngineStartError",
    "EngineStats",
    "GenerationRequest",
    "SamplingOptions",
    "ThinkingGuard",
    "build_engines",
    "missing_model_paths",
    "start_engines",
]


@dataclass
class EngineSet:
    engines: dict[str, Engine]  # engine key -> engine
    engine_keys: dict[str, str]  # model -> engine key
    capacities: dict[str, int]  # engine key -> max concurrent requests
    fallback_reason: str | None = None  # engine.kind auto: why vLLM is not the engine (None: it is)


def _vllm_set(config: ServeConfig) -> EngineSet:
    from livethink.serve.engines.vllm_engine import VLLMEngine, VLLMSettings

    e = config.engine
    engines, keys, caps = {}, {}, {}
    for base, variants in config.engine_groups().items():
        spec = config.models[base]
        engines[base] = VLLMEngine(spec.path, variants, VLLMSettings.from_engine_config(e, reasoning=spec.reasoning))
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
            cuda_graph=not config.engine.enforce_eager, max_len=config.engine.max_model_len,
            reasoning=spec.reasoning if spec.path is not None else config.models[spec.base].reasoning,
        )
        keys[name] = name
        caps[name] = 1  # one request at a time; the rest wait in the controller's queue
    return EngineSet(engines, keys, caps)


def build_engines(config: ServeConfig, kind: str | None = None) -> EngineSet:
    choice = choose_engine(kind or config.engine.kind)
    if choice.kind == "vllm":
        return _vllm_set(config)
    engine_set = _transformers_set(config)
    if choice.fallback_reason:
        log.warning("engine.kind auto: %s; serving with the transformers engine", choice.fallback_reason)
        engine_set.fallback_reason = choice.fallback_reason
    return engine_set


def missing_model_paths(config: ServeConfig) -> list[str]:
    """``models.<name>.path: <path> does not exist`` (and ``.lora``) for each checkpoint or adapter that is not on
    this machine: no engine can load it, so start-up stops there. A Hugging Face Hub id (``org/name``, not a
    directory here) is left to the engine, which may download it."""
    from livethink.run_check import is_hub_id

    missing = []
    for name, spec in config.models.items():
        for field_name in ("path", "lora"):
            value = getattr(spec, field_name)
            if value is None or Path(value).expanduser().exists():
                continue
            if is_hub_id(value) and not Path(value).expanduser().is_absolute():
                continue
            missing.append(f"models.{name}.{field_name}: {value} does not exist")
    return missing


async def start_engines(config: ServeConfig) -> EngineSet:
    """Build and start the engines; with ``engine.kind: auto`` a vLLM failure falls back to transformers. A
    model path that does not exist stops start-up at once (``missing_model_paths``): neither engine is tried."""
    missing = missing_model_paths(config)
    if missing:
        raise EngineStartError(f"cannot start: {'; '.join(missing)}")
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
            raise EngineStartError(f"engine.kind {config.engine.kind}: the engine failed to start: {_why(exc)}") from exc
        reason = f"vLLM failed to start: {_why(exc)}"
        log.warning("engine.kind auto: %s; serving with the transformers engine", reason)
        engine_set = build_engines(config, "transformers")
        engine_set.fallback_reason = reason
        for engine in engine_set.engines.values():
            await engine.start()
    return engine_set


class EngineStartError(RuntimeError):
    """An engine could not start; the message says why (shown to the user without a stack trace)."""


def _why(exc: BaseException) -> str:
    """The innermost useful message of an engine start failure (vLLM wraps its engine core's error)."""
    messages = []
    while exc is not None and len(messages) < 4:
        text = f"{type(exc).__name__}: {exc}".strip()
        if text not in messages:
            messages.append(text)
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(messages)
