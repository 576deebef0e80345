"""`livethink` console command: one subcommand per stage.

Each stage lives in its own package and exposes ``main(argv: list[str]) -> int`` in a ``cli`` module, so
`livethink <stage> ...` is the same code as ``python -m livethink.<stage>.cli ...`` and as a library call.
Stages are imported lazily: `livethink --help` stays fast and a missing optional extra only breaks its stage.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module with main(argv), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("livethink.doctor", "print versions, CPU/GPU, whether vLLM imports and which engine is used"),
    "data": ("livethink.data.cli", "generate LiveShop task data, validate or convert user data"),
    "models": ("livethink.models.cli", "train the tokenizer, create the tiny MoE student, count parameters"),
    "teacher": ("livethink.rft_distill.teacher_cli", "sample k reasoning traces per prompt from a teacher"),
    "rft": ("livethink.rft_distill.cli", "stage 1: rejection-sampling fine-tuning of the student"),
    "grpo": ("livethink.length_rl.cli", "stage 2: GRPO length compression (band/siri/dot/drpo; baselines length_penalty/gdpo/dapo_overlong/cosine/dler)"),
    "eval": ("livethink.eval.cli", "evaluate models: correctness, helpfulness, tokens, latency, FLOPs"),
    "serve": ("livethink.serve.cli", "latency-budgeted FastAPI server on vLLM"),
    "ab": ("livethink.ab_test.cli", "A/B experiments: assign, analyze, report, simulate"),
    "demo": ("livethink.demo_job", "the main job: data -> RFT -> compression -> serve -> Gradio demo"),
}


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        "usage: livethink <command> [options]",
        "",
        "Turn a large, slow reasoning model into a small, fast one for livestream replies.",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Run `livethink <command> --help` for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if argv[0] in {"-V", "--version"}:
        from livethink import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"livethink: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, _ = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        print(f"livethink {name}: not available ({exc}); install the extras with `make install`", file=sys.stderr)
        return 2
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
