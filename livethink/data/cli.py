"""`livethink data`: generate LiveShop, validate or convert user data.

``validate`` exits 1 when any row is invalid (each is listed with its line or row and reason); ``--strict`` stops
at the first one. ``convert`` skips invalid rows (listed; ``--strict``: stops at the first one instead).
"""


from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from livethink.cli_args import FlagParser
from livethink.data.io import InvalidTaskError, LoadResult, load_tasks, to_dataset, write_jsonl, write_parquet
from livethink.data.liveshop.generate import SPLITS, generate


class DataError(ValueError):
    """The data cannot be read (the message names the path and the reason)."""


def _generate(args: argparse.Namespace) -> int:
    out = Path(args.out)
    start = time.perf_counter()
    data = generate(
        seed=args.seed,
        n_train=args.n_train,
        n_validation=args.n_validation,
        n_test=args.n_test,
        progress=lambda it, total, desc: tqdm(it, total=total, desc=f"generating {desc}", unit="task"),
    )
    counts = {split: write_jsonl(data.tasks[split], out / f"{split}.jsonl") for split in SPLITS}
    with (out / "catalog.jsonl").open("w", encoding="utf-8") as fh:
        for split in SPLITS:
            for product in data.catalog[split]:
                doc = product.doc()
                fh.write(json.dumps({"split": split, **doc.model_dump()}) + "\n")
    used = {split: {pid for t in data.tasks[split] for pid in t.product_ids} for split in SPLITS}
    manifest = {
        "seed": args.seed,
        "counts": counts,
        "products": {split: len(data.catalog[split]) for split in SPLITS},
        "products_shared_train_test": len(used["train"] & used["test"]),
        "products_shared_train_validation": len(used["train"] & used["validation"]),
        "seconds": round(time.perf_counter() - start, 2),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


def _load(path: str, strict: bool) -> LoadResult:
    """The tasks of ``path``; a path that cannot be read raises ``DataError`` naming it and why."""
    p = Path(path)
    if p.is_dir() and not any((p / f).is_file() for f in ("dataset_info.json", "dataset_dict.json", "state.json")):
        files = sorted((f.stem not in SPLITS, f.name) for f in p.iterdir() if f.suffix in {".jsonl", ".parquet"})
        hint = f"; pass one of its files, e.g. {p / files[0][1]}" if files else ""
        raise DataError(f"{path}: a directory, but not a saved dataset (datasets.save_to_disk){hint}")
    try:
        return load_tasks(path, strict=strict)
    except InvalidTaskError as exc:
        raise DataError(str(exc)) from None
    except FileNotFoundError:
        raise DataError(f"{path}: no such file or directory") from None
    except (OSError, ValueError) as exc:  # an unsupported suffix, an unreadable or corrupt file
        raise DataError(f"{path}: {exc}") from None


def _validate(args: argparse.Namespace) -> int:
    result = _load(args.path, args.strict)
    for error in result.errors:
        print(f"{args.path}: {error}", file=sys.stderr)
    print(f"{len(result.tasks)} valid, {result.n_invalid} invalid")
    return 1 if result.errors else 0


def _convert(args: argparse.Namespace) -> int:
    result = _load(args.src, args.strict)
    for error in result.errors:
        print(f"{args.src}: {error} (skipped)", file=sys.stderr)
    dst = Path(args.dst)
    if dst.suffix == ".jsonl":
        write_jsonl(result.tasks, dst)
    elif dst.suffix == ".parquet":
        write_parquet(result.tasks, dst)
    else:
        to_dataset(result.tasks).save_to_disk(str(dst))
    print(f"wrote {len(result.tasks)} tasks to {dst}; {result.n_invalid} invalid rows skipped")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = FlagParser(prog="livethink data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate a LiveShop catalog and train/validation/test tasks")
    gen.add_argument("--out", required=True, help="output directory")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--n-train", type=int, default=5000)
    gen.add_argument("--n-validation", type=int, default=500)
    gen.add_argument("--n-test", type=int, default=500)
    gen.set_defaults(func=_generate)
    val = sub.add_parser("validate", help="check user data (JSONL, Parquet or dataset dir) against the schema")
    val.add_argument("path")
    val.add_argument("--strict", action="store_true", help="stop at the first invalid row (without it: list them all)")
    val.set_defaults(func=_validate)
    conv = sub.add_parser("convert", help="convert between JSONL, Parquet and a saved datasets dir")
    conv.add_argument("src")
    conv.add_argument("dst", help="*.jsonl, *.parquet, or a directory (datasets.save_to_disk)")
    conv.add_argument("--strict", action="store_true", help="stop at the first invalid row instead of skipping it")
    conv.set_defaults(func=_convert)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DataError as exc:
        print(f"livethink data {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
