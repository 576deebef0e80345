"""Load and inspect local HF checkpoints (the tiny student, a real Qwen3-30B-A3B, any causal LM).

Everything is local: ``HF_HUB_OFFLINE`` is honoured and a path that is not a checkpoint directory fails at
once with a message naming the path and what is missing, instead of a hub lookup error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from livethink.models.lora import LoraSettings, apply_lora
from livethink.models.params import ParamCounts, count_params_from_config

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class CheckpointError(ValueError):
    """A path that is not a usable local checkpoint (the message names the path and what is wrong)."""


@dataclass
class CheckpointInfo:
    path: Path
    model_type: str
    architectures: list[str]
    weight_files: list[str]
    has_tokenizer: bool
    config: dict[str, Any] = field(repr=False)


def _weight_files(path: Path) -> list[str]:
    """Weight files of a checkpoint dir; every shard an index names must exist."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError) as exc:
                raise CheckpointError(f"{index}: unreadable weight index ({exc})") from exc
            missing = [s for s in shards if not (path / s).is_file()]
            if missing:
                raise CheckpointError(f"{path}: {len(missing)} weight shard(s) named in {index_name} are missing: "
                                      f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
            return shards
    singles = [n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()]
    if not singles:
        raise CheckpointError(f"{path}: no weights (model.safetensors, pytorch_model.bin or a sharded index)")
    return singles


def inspect_checkpoint(path: str | Path, require_weights: bool = True) -> CheckpointInfo:
    """Check that ``path`` is a local HF checkpoint directory, without loading weights."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"checkpoint path does not exist: {path}")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint path is not a directory: {path}")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{path}: no config.json (not a HF model directory)")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{config_file}: invalid JSON ({exc})") from exc
    if "model_type" not in config:
        raise CheckpointError(f"{config_file}: no model_type field")
    weights = _weight_files(path) if require_weights else []
    has_tokenizer = any((path / n).is_file() for n in TOKENIZER_FILES)
    return CheckpointInfo(path, config["model_type"], list(config.get("architectures") or []), weights,
                          has_tokenizer, config)


def load_tokenizer_for(path: str | Path):
    """The tokenizer stored in a checkpoint directory."""
    from transformers import AutoTokenizer

    path = Path(path).expanduser()
    if not any((path / n).is_file() for n in TOKENIZER_FILES):
        raise CheckpointError(f"{path}: no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    return AutoTokenizer.from_pretrained(str(path))


def resolve_device(device: str = "auto") -> str:
    """``auto``: the machine's accelerator (CUDA, XPU, MPS, ...) if torch sees one, else ``cpu``; other values as given."""
    if device != "auto":
        return device
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return accelerator.type if accelerator is not None else "cpu"


def load_model(
    path: str | Path,
    *,
    dtype: str = "auto",
    lora: LoraSettings | None = None,
    config_overrides: dict[str, Any] | None = None,
    device_map: str | dict | None = None,
):
    """Load a local causal-LM checkpoint (any architecture transformers knows), optionally with LoRA.

    ``config_overrides`` set config attributes at load time (e.g. ``output_router_logits=True``).
    """
    from transformers import AutoModelForCausalLM

    info = inspect_checkpoint(path)
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or 'auto', got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(
        str(info.path),
        dtype=dtype if dtype == "auto" else DTYPES[dtype],
        device_map=device_map,
        local_files_only=True,
        **(config_overrides or {}),
    )
    return apply_lora(model, lora) if lora else model


def load_student(path: str | Path, **kwargs: Any):
    """``(model, tokenizer)`` from one checkpoint directory; kwargs as for :func:`load_model`."""
    return load_model(path, **kwargs), load_tokenizer_for(path)


def params_of_checkpoint(path: str | Path) -> ParamCounts:
    """Total/active parameters of a checkpoint directory, from its config.json (weights are not read)."""
    info = inspect_checkpoint(path, require_weights=False)
    return count_params_from_config(info.path)
