"""Total and active parameter counts of (MoE) causal LMs.

Active parameters are what one token touches: every non-expert parameter (embeddings, attention, norms,
router, shared experts, LM head) plus ``top_k / num_experts`` of the routed-expert parameters. Decode FLOPs per
token are about ``2 * active``. Routed-expert parameters are those under an ``.experts.`` module (Qwen3-MoE
stores them fused as ``mlp.experts.gate_up_proj`` / ``mlp.experts.down_proj``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    expert: int  # routed-expert parameters (all experts)
    embedding: int  # input embeddings + untied LM head
    num_experts: int  # 0 for a dense model
    top_k: int  # experts per token (0 for a dense model)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        moe = f", {self.num_experts} experts top-{self.top_k}" if self.num_experts else " (dense)"
        return (
            f"total {self.total:,} params ({human(self.total)}), active {self.active:,} ({human(self.active)}) "
            f"per token{moe}; routed experts {self.expert:,}, embeddings + LM head {self.embedding:,}"
        )


def human(n: int) -> str:
    """1234567 -> '1.23M'."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def _moe_shape(config: Any) -> tuple[int, int]:
    """(num_experts, top_k) from a HF config; (0, 0) for a dense model."""
    num_experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None) or 0
    top_k = getattr(config, "num_experts_per_tok", None) or 0
    return int(num_experts), int(top_k)


def is_expert_param(name: str) -> bool:
    return ".experts." in f".{name}"


def count_params(model: nn.Module, config: Any | None = None) -> ParamCounts:
    """Count a model's parameters (tied weights once). ``config`` defaults to ``model.config``."""
    config = config if config is not None else getattr(model, "config", None)
    num_experts, top_k = _moe_shape(config) if config is not None else (0, 0)
    total = expert = embedding = 0
    for name, param in model.named_parameters(remove_duplicate=True):
        n = param.numel()
        total += n
        if num_experts and is_expert_param(name):
            expert += n
        if name.endswith(("embed_tokens.weight", "lm_head.weight")):
            embedding += n
    active = total - expert + (expert * top_k // num_experts if num_experts else 0)
    return ParamCounts(total, active, expert, embedding, num_experts, top_k)


def count_params_from_config(config: Any) -> ParamCounts:
    """Count parameters of the model a HF config (object, dict, or checkpoint dir) describes, without weights.

    The model is built on the ``meta`` device, so this is fast and memory-free even for Qwen3-30B-A3B.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

    if isinstance(config, str | Path):
        config = AutoConfig.from_pretrained(str(config))
    elif isinstance(config, dict):
        data = dict(config)
        model_type = data.pop("model_type")
        config = AutoConfig.for_model(model_type, **data)
    if not isinstance(config, PretrainedConfig):
        raise TypeError(f"expected a HF config, dict or checkpoint path, got {type(config).__name__}")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return count_params(model, config)
