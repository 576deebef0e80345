"""Where a model's tokens go: each reasoning line of its completions, classified by the scripted teacher's
sentence kinds (opener, goal, chat quote, lead-ins, useful lines, Answer/Helpful lines, …), in tokens per reply.

    python benchmarks/reply_anatomy.py --tokenizer runs/tiny/rft_s12/final \
        runs/tiny/s12_eval_rft_val/completions/rft_s12.jsonl runs/tiny/s12_eval_default_val/completions/default@96.jsonl

Inputs are `livethink eval` completion files (`<out>/completions/<name>.jsonl`: task_id, completion). Prints a
Markdown table (one row per file) and, with ``--out``, writes it with the JSON beside it. Lines that match no
teacher sentence count as ``other`` (mostly comparison lines, and what a student garbles); ``--show-other N``
prints the commonest of them.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from livethink.rft_distill.teachers.scripted import (
    ANSWER_LEAD,
    CLOSERS,
    GOALS,
    HELPFUL_THINK,
    HISTORY,
    OPENERS,
)

USEFUL_PREFIXES = ("Product:", "Unit price:", "Subtotal:", "Coupon:", "Bundle:", "Compare:", "History:", "Stock:",
                   "Docs:", "Quantity", "Shipping:", "Returns:", "Material:", "Warranty:", "Made", "Care:")
OPENER_STEMS = tuple(o.split("{q}")[0] for o in OPENERS)
CHAT_QUOTE_STEM = HISTORY.split("{viewer}")[0]
CATEGORIES = ("opener", "goal", "chat_quote", "useful", "lead", "answer", "helpful_lead", "helpful", "closer",
              "other", "reply")


def line_kind(line: str) -> str:
    """The teacher sentence kind of one reasoning line."""
    if line in GOALS.values():
        return "goal"
    if line in ANSWER_LEAD:
        return "lead"
    if line in HELPFUL_THINK:
        return "helpful_lead"
    if line in CLOSERS:
        return "closer"
    if line.startswith(CHAT_QUOTE_STEM):
        return "chat_quote"
    if line.startswith(OPENER_STEMS):
        return "opener"
    if line.startswith("Answer:"):
        return "answer"
    if line.startswith("Helpful:"):
        return "helpful"
    if line.startswith(USEFUL_PREFIXES):
        return "useful"
    return "other"


def anatomy(completions: Iterable[str], count_tokens) -> tuple[dict[str, float], Counter]:
    """Mean tokens per reply by kind (``reply`` = the text after ``</think>``), and the ``other`` lines seen."""
    totals, others, n = Counter(), Counter(), 0
    for text in completions:
        n += 1
        think, _, reply = text.partition("</think>")
        totals["reply"] += count_tokens(reply)
        for line in think.replace("<think>", "").strip().splitlines():
            kind = line_kind(line)
            totals[kind] += count_tokens(line + "\n")
            if kind == "other":
                others[line[:70]] += 1
    return {k: round(totals[k] / max(n, 1), 1) for k in CATEGORIES}, others


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="livethink eval completion files (JSONL)")
    p.add_argument("--tokenizer", required=True, help="the student's tokenizer (a checkpoint dir)")
    p.add_argument("--show-other", type=int, default=0, help="print the N commonest unclassified lines per file")
    p.add_argument("--out", help="write anatomy.md and anatomy.json into this dir")
    args = p.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    rows = {}
    for path in args.files:
        texts = [json.loads(line)["completion"] for line in Path(path).read_text().splitlines() if line.strip()]
        rows[path], others = anatomy(texts, count)
        if args.show_other:
            print(f"{path}: commonest other lines {others.most_common(args.show_other)}")
    lines = ["| completions | " + " | ".join(CATEGORIES) + " | total |", "|---|" + "---|" * (len(CATEGORIES) + 1)]
    lines += [f"| {Path(k).name} | " + " | ".join(str(v[c]) for c in CATEGORIES) + f" | {sum(v.values()):.1f} |"
              for k, v in rows.items()]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "anatomy.md").write_text("# Tokens per reply by teacher sentence kind\n\n" + table)
        (out / "anatomy.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
