"""Write the README's generated results tables from the results JSON (and check that they agree).

A table sits between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in README.md; ``TABLES`` maps each NAME to its
results file and renderer.

    python benchmarks/readme_tables.py            # rewrite the tables in README.md
    python benchmarks/readme_tables.py --check    # exit 1, naming the table, when README.md and the JSON disagree
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"


def _ci(cell: dict[str, Any], scale: float = 100.0) -> str:
    mean, low, high = cell["mean"], cell["low"], cell["high"]
    text = f"{scale * mean:.1f}"
    return text if low is None else f"{text} [{scale * low:.1f}, {scale * high:.1f}]"


def budget_training(report: dict[str, Any]) -> list[str]:
    """Correctness at each thinking cap, tokens and floors: RFT and each stage-2 method over seeds."""
    rft, caps = report["rft"], report["rft"]["caps"]
    names = {"drpo": "DRPO", "drpo_budget": "DRPO trained for the cut"}
    lines = ["| model | " + " | ".join(f"cap {c}" for c in caps) + " | uncapped | tokens | floor |",
             "|---|" + "---:|" * (len(caps) + 3),
             "| RFT student | " + " | ".join(f"{100 * v:.1f}" for v in rft["correct_at_cap"])
             + f" | {100 * rft['correct']:.1f} | {rft['tokens']:.0f} | {rft['floor']} |"]
    for row in report["methods"]:
        lines.append(f"| {names.get(row['method'], row['method'])} | "
                     + " | ".join(_ci(row["correct_at_cap"][str(c)]) for c in caps)
                     + f" | {_ci(row['correct'])} | {row['tokens']['mean']:.0f} | "
                     + ", ".join(str(f) for f in row["floors"]) + " |")
    return lines


def serve_goodput(report: dict[str, Any]) -> list[str]:
    """Goodput against the deadline: each served model unloaded and at the sweep's rate, and plain vLLM."""
    rows = report["deadline_sweep"]["rows"]
    deadlines = sorted({r["deadline_ms"] for r in rows})
    series: dict[tuple[str, str, str], dict[float, dict[str, Any]]] = {}
    for r in rows:
        series.setdefault((r["server"], r["model"], r["load"]), {})[r["deadline_ms"]] = r
    lines = ["| server, model, load | " + " | ".join(f"{d:,.0f} ms" for d in deadlines) + " |",
             "|---|" + "---:|" * len(deadlines)]
    for (server, model, load), by_deadline in series.items():
        rate = next(iter(by_deadline.values()))["rate"]
        label = f"{'livethink' if server == 'livethink' else 'plain vLLM'}, {model}, " + (
            "one at a time" if load == "unloaded" else f"{rate:g} req/s")
        lines.append(f"| {label} | " + " | ".join(
            f"{100 * by_deadline[d]['goodput']:.1f}%" if d in by_deadline else "–" for d in deadlines) + " |")
    return lines


TABLES: dict[str, tuple[str, Callable[[dict[str, Any]], list[str]]]] = {
    "budget_training": ("budget_training.json", budget_training),
    "serve_goodput": ("serve_load.json", serve_goodput),
}


def render(readme: str, results: Path = RESULTS) -> str:
    """``readme`` with every generated table rewritten from its results file."""
    for name, (file, build) in TABLES.items():
        pattern = re.compile(rf"(<!-- {name} -->\n).*?(<!-- /{name} -->)", re.S)
        if not pattern.search(readme):
            continue
        table = "\n".join(build(json.loads((results / file).read_text()))) + "\n"
        readme = pattern.sub(lambda m, t=table: m.group(1) + t + m.group(2), readme)
    return readme


def stale_tables(readme: str, results: Path = RESULTS) -> list[str]:
    """Names of the generated tables whose README text differs from their results file."""
    fresh = render(readme, results)
    return [name for name in TABLES
            if _section(readme, name) != _section(fresh, name)]


def _section(text: str, name: str) -> str | None:
    match = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", text, re.S)
    return match.group(1) if match else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when a table is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    if args.check:
        stale = stale_tables(text)
        for name in stale:
            print(f"{args.readme}: table {name} differs from benchmarks/results/{TABLES[name][0]}; "
                  "run python benchmarks/readme_tables.py", file=sys.stderr)
        return 1 if stale else 0
    args.readme.write_text(render(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
