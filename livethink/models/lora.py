"""Optional LoRA adapters (peft) for the student.

Qwen3-MoE attention projections are ``nn.Linear`` modules (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``):
the default targets. Experts are fused ``nn.Parameter`` tensors (``mlp.experts.gate_up_proj`` /
``mlp.experts.down_proj``), reachable only through peft's ``target_parameters``; the router (``mlp.gate``)
is left alone so the load balance learned in pre-training stays put.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ATTENTION_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass
class LoraSettings:
    """The LoRA fields of a student config (a subset of ``peft.LoraConfig``)."""

    r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: list(ATTENTION_MODULES))
    target_parameters: list[str] | None = None  # e.g. ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    bias: str = "none"
    modules_to_save: list[str] | None = None

    def __post_init__(self) -> None:
        if self.r <= 0:
            raise ValueError(f"lora.r must be > 0, got {self.r}")
        if self.lora_alpha <= 0:
            raise ValueError(f"lora.lora_alpha must be > 0, got {self.lora_alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.target_modules and not self.target_parameters:
            raise ValueError("lora.target_modules and lora.target_parameters are both empty")
        if self.target_parameters and self.lora_dropout:
            raise ValueError("lora.target_parameters (fused experts) needs lora.lora_dropout: 0 (a peft limitation)")
        if self.bias not in {"none", "all", "lora_only"}:
            raise ValueError(f"lora.bias must be none|all|lora_only, got {self.bias!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraSettings:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown lora field(s): {', '.join(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def to_peft_config(settings: LoraSettings):
    """``peft.LoraConfig`` for a causal LM (pass it to TRL's ``SFTTrainer(peft_config=...)``)."""
    from peft import LoraConfig, TaskType

    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=settings.r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=list(settings.target_modules),
        target_parameters=list(settings.target_parameters) if settings.target_parameters else None,
        bias=settings.bias,
        modules_to_save=settings.modules_to_save,
    )


def apply_lora(model, settings: LoraSettings):
    """Wrap ``model`` in a ``peft.PeftModel``: only the adapters (and ``modules_to_save``) stay trainable."""
    from peft import get_peft_model

    return get_peft_model(model, to_peft_config(settings))
