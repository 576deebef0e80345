"""`livethink models ...`: train the tokenizer, create the student, count parameters, dry-run configs.

    livethink models tokenizer --data DIR --out DIR [--vocab-size 4096] [--extra-texts FILE ...]
    livethink models create    --config configs/tiny/student.yaml --tokenizer DIR --out DIR
    livethink models params    --model DIR             # from config.json: no weights read (works for 30B)
    livethink models validate  --config configs/prod/student.yaml [--pretrained PATH] [--skip-path]
    livethink models vllm-check --model DIR            # load in vLLM and generate
    livethink models merge     --base DIR --adapter DIR --out DIR   # LoRA adapter + base -> merged checkpoint
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import chain
from pathlib import Path


def _tokenizer(args: argparse.Namespace) -> int:
    from livethink.data.io import read_tasks
    from livethink.models.tokenizer import (
        check_tokenizer,
        corpus_from_tasks,
        save_tokenizer,
        texts_from_file,
        train_tokenizer,
    )

    train_file = Path(args.data) / "train.jsonl"
    if not train_file.is_file():
        print(f"error: {train_file} not found (run `livethink data generate --out {args.data}` first)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    tasks = read_tasks(train_file)
    texts = chain(corpus_from_tasks(tasks), *(texts_from_file(p) for p in args.extra_texts))
    tokenizer = train_tokenizer(texts, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                model_max_length=args.model_max_length)
    check_tokenizer(tokenizer)
    out = save_tokenizer(tokenizer, args.out)
    print(f"tokenizer: {len(tokenizer)} tokens trained on {len(tasks)} tasks from {train_file} "
          f"in {time.perf_counter() - t0:.1f}s -> {out}")
    return 0


def _create(args: argparse.Namespace) -> int:
    from livethink.models.params import count_params
    from livethink.models.student import create_student, load_student_config, save_student
    from livethink.models.tokenizer import check_tokenizer, load_tokenizer

    config = load_student_config(args.config, seed=args.seed)
    tokenizer = load_tokenizer(args.tokenizer)
    check_tokenizer(tokenizer)
    tokenizer.model_max_length = config.max_position_embeddings
    model = create_student(config, tokenizer)
    out = save_student(model, tokenizer, args.out, config)
    counts = count_params(model)
    print(f"student: Qwen3MoeForCausalLM, {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_experts} experts top-{config.num_experts_per_tok}, vocab {model.config.vocab_size} -> {out}")
    print(counts.summary())
    if args.json:
        print(json.dumps(counts.to_dict()))
    return 0


def _params(args: argparse.Namespace) -> int:
    from livethink.models.loading import params_of_checkpoint

    counts = params_of_checkpoint(args.model)
    print(json.dumps(counts.to_dict()) if args.json else counts.summary())
    return 0


def _validate(args: argparse.Namespace) -> int:
    from livethink.models.params import human
    from livethink.models.student import load_student_config, validate_student_config

    config = load_student_config(args.config, pretrained=args.pretrained)
    summary = validate_student_config(config, check_path=not args.skip_path)
    p = summary["params"]
    where = f"checkpoint {config.pretrained} checked" if summary["path_checked"] else "fields only"
    print(f"ok: {args.config} ({where}); total {human(p['total'])} params, active {human(p['active'])}")
    if args.json:
        print(json.dumps(summary))
    return 0


def _vllm_check(args: argparse.Namespace) -> int:
    from livethink.models.vllm_check import main as vllm_main

    argv = [args.model, "--num-prompts", str(args.num_prompts), "--max-tokens", str(args.max_tokens)]
    return vllm_main(argv + (["--single-process"] if args.single_process else []))


def _merge(args: argparse.Namespace) -> int:
    from livethink.models.export import merge_adapter

    out = merge_adapter(args.base, args.adapter, args.out, dtype=args.dtype)
    print(f"merged {args.adapter} into {args.base} -> {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="livethink models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer on DIR/train.jsonl")
    p.add_argument("--data", required=True, help="data dir with train.jsonl (from `livethink data generate`)")
    p.add_argument("--out", required=True, help="output tokenizer dir")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--model-max-length", type=int, default=2048)
    p.add_argument("--extra-texts", nargs="*", default=[], help=".txt or .jsonl files of extra texts")
    p.set_defaults(func=_tokenizer)

    p = sub.add_parser("create", help="create a student from a config and a tokenizer; print its parameters")
    p.add_argument("--config", required=True, help="student YAML, e.g. configs/tiny/student.yaml")
    p.add_argument("--tokenizer", required=True, help="tokenizer dir")
    p.add_argument("--out", required=True, help="output model dir (model + tokenizer)")
    p.add_argument("--seed", type=int, default=None, help="override the config's seed")
    p.add_argument("--json", action="store_true", help="also print the counts as JSON")
    p.set_defaults(func=_create)

    p = sub.add_parser("params", help="total and active parameters of a model dir (config only)")
    p.add_argument("--model", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_params)

    p = sub.add_parser("validate", help="dry-run a student config (fields, checkpoint path) without weights")
    p.add_argument("--config", required=True)
    p.add_argument("--pretrained", default=None, help="override the config's pretrained path")
    p.add_argument("--skip-path", action="store_true", help="check the fields only, not the checkpoint dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_validate)

    p = sub.add_parser("vllm-check", help="load a model dir in vLLM and generate (load time, tokens/s)")
    p.add_argument("--model", required=True)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--single-process", action="store_true", help="no spawned engine/worker processes")
    p.set_defaults(func=_vllm_check)

    p = sub.add_parser("merge", help="merge a LoRA adapter into its base checkpoint (a plain checkpoint to serve)")
    p.add_argument("--base", required=True, help="the checkpoint the adapter was trained on")
    p.add_argument("--adapter", required=True, help="adapter dir (adapter_config.json)")
    p.add_argument("--out", required=True, help="output model dir (model + tokenizer)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.set_defaults(func=_merge)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (FileNotFoundError, ValueError) as exc:
        print(f"livethink models {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
