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
from typing import Any

from annotated_types import Ge
from tqdm import tqdm

from livethink.cli_args import FlagParser
from livethink.data.io import InvalidTaskError, LoadResult, load_tasks, to_dataset, write_jsonl, write_parquet
from livethink.data.liveshop.generate import HOLDOUT_SEED, N_HOLDOUT, SPLITS, generate
from livethink.option_ranges import option_type


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
        n_holdout=args.n_holdout,
        holdout_seed=args.holdout_seed,
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
        "holdout_seed": args.holdout_seed,
        "counts": counts,
        "products": {split: len(data.catalog[split]) for split in SPLITS},
        "products_shared_train_test": len(used["train"] & used["test"]),
        "products_shared_train_validation": len(used["train"] & used["validation"]),
        "products_shared_holdout_other": len(used["holdout"] & set().union(*(used[s] for s in SPLITS if s != "holdout"))),
        "seconds": round(time.perf_counter() - start, 2),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


def _load(path: Any, strict: bool) -> LoadResult:
    """The tasks of ``path`` (or of a ``datasets.Dataset``); a path that cannot be read raises ``DataError`` naming it
    and why."""
    p = Path(path) if isinstance(path, str) else Path("-")
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


def _sources(path: str) -> list[tuple[str, Any]]:
    """What ``validate`` reads, named: a file, a saved dataset, each split of a saved ``DatasetDict``, or each
    ``<split>.jsonl`` / ``<split>.parquet`` of a data directory (what the stage configs' ``data_dir`` holds)."""
    p = Path(path)
    if not p.is_dir() or (p / "dataset_info.json").is_file() or (p / "state.json").is_file():
        return [(path, path)]
    if (p / "dataset_dict.json").is_file():
        from datasets import load_from_disk

        splits = load_from_disk(str(p))
        return [(f"{p} [{name}]", splits[name]) for name in splits]
    files = [p / f"{split}{ext}" for split in SPLITS for ext in (".jsonl", ".parquet") if (p / f"{split}{ext}").is_file()]
    if not files:
        raise DataError(f"{path}: a directory without {', '.join(f'{s}.jsonl' for s in SPLITS)} (or .parquet), and "
                        "not a saved dataset (datasets.save_to_disk)")
    return [(str(f), str(f)) for f in files]


def _validate(args: argparse.Namespace) -> int:
    sources = _sources(args.path)
    valid = invalid = 0
    for label, source in sources:
        result = _load(source, args.strict)
        for error in result.errors:
            print(f"{label}: {error}", file=sys.stderr)
        valid, invalid = valid + len(result.tasks), invalid + result.n_invalid
        if len(sources) > 1:
            print(f"{label}: {len(result.tasks)} valid, {result.n_invalid} invalid")
    print(f"{valid} valid, {invalid} invalid")
    return 1 if invalid else 0


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
    gen = sub.add_parser("generate", help="generate a LiveShop catalog and train/validation/test/holdout tasks")
    gen.add_argument("--out", required=True, help="output directory")
    gen.add_argument("--seed", type=option_type(int, Ge(0)), default=0)
    gen.add_argument("--n-train", type=option_type(int, Ge(0)), default=5000)
    gen.add_argument("--n-validation", type=option_type(int, Ge(0)), default=500)
    gen.add_argument("--n-test", type=option_type(int, Ge(0)), default=500)
    gen.add_argument("--n-holdout", type=option_type(int, Ge(0)), default=N_HOLDOUT,
                     help="tasks of the held-out split for published figures (its own seed and products)")
    gen.add_argument("--holdout-seed", type=option_type(int, Ge(0)), default=HOLDOUT_SEED, help="the holdout split's generator seed")
    gen.set_defaults(func=_generate)
    val = sub.add_parser("validate", help="check user data (JSONL, Parquet, a saved dataset, or a data dir: every "
                         "split in it) against the schema")
    val.add_argument("path", help="a task file, a saved dataset, or a data dir holding <split>.jsonl / .parquet")
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
