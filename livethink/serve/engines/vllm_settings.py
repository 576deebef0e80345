"""Settings of the vLLM engine, and whether this vLLM build can force the thinking budget natively."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BudgetForcing = Literal["auto", "native", "two_phase"]
# the fields of ``serve.config.EngineConfig`` the settings take as they are
FROM_ENGINE_CONFIG = ("dtype", "max_model_len", "enforce_eager", "kv_cache_gib", "gpu_memory_utilization",
                      "tensor_parallel_size", "max_num_seqs", "enable_prefix_caching", "budget_forcing",
                      "max_lora_rank", "calculator", "export_engine_stats")


@dataclass(frozen=True)
class VLLMSettings:
    dtype: str = "bfloat16"
    max_model_len: int = 1024
    enforce_eager: bool = True
    kv_cache_gib: int | None = 1  # VLLM_CPU_KVCACHE_SPACE (CPU only; vLLM reads a whole number of GiB)
    gpu_memory_utilization: float | None = None  # GPU only
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    enable_prefix_caching: bool | None = None
    budget_forcing: BudgetForcing = "auto"
    max_lora_rank: int = 16
    seed: int = 0
    calculator: bool = False  # livethink.calculator: computed digits after a sum's "="
    export_engine_stats: bool = True  # vLLM's scheduler statistics into the engine's SchedulerCounters
    reasoning: Any = "auto"  # the base model's reasoning format setting (livethink.data.reasoning_format)

    @classmethod
    def from_engine_config(cls, engine: Any, **others: Any) -> VLLMSettings:
        """The settings ``engine`` (``serve.config.EngineConfig``) gives, field by field (``FROM_ENGINE_CONFIG``);
        ``others``: the rest (``seed``, ``reasoning``)."""
        return cls(**{name: getattr(engine, name) for name in FROM_ENGINE_CONFIG}, **others)


def native_budget_supported() -> bool:
    """Whether this vLLM build has ``SamplingParams.thinking_token_budget`` and the reasoning config."""
    try:
        from vllm import SamplingParams
        from vllm.config.reasoning import ReasoningConfig  # noqa: F401
    except ImportError:
        return False
    return "thinking_token_budget" in getattr(SamplingParams, "__struct_fields__", ()) or hasattr(
        SamplingParams(), "thinking_token_budget"
    )
