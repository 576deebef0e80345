"""Evaluation reports: one JSON with everything, one Markdown with side-by-side tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None:
        return "-"
    if pct:
        return f"{100 * value:.1f}%"
    return f"{value:,}" if isinstance(value, int) else f"{value}"


def overall_table(results: Sequence[dict[str, Any]]) -> str:
    header = ("| model | n | correct | helpful | reasoning tok | reply tok | total tok | truncated | "
              "decode GFLOPs/reply | TTFT p50 ms | e2e p50 ms | e2e p95 ms |")
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    for r in results:
        o, lat = r["overall"], r.get("latency") or {}
        name = r["name"] + (" (+ calculator)" if r.get("calculator") else "")
        lines.append(
            f"| {name} | {o.get('n', 0)} | {_fmt(o.get('correctness'), True)} | {_fmt(o.get('helpfulness'), True)} | "
            f"{_fmt(o.get('reasoning_tokens'))} | {_fmt(o.get('reply_tokens'))} | {_fmt(o.get('total_tokens'))} | "
            f"{_fmt(o.get('truncated_rate'), True)} | {_fmt(o.get('decode_gflops_per_reply'))} | "
            f"{_fmt(lat.get('ttft_ms_p50'))} | {_fmt(lat.get('e2e_ms_p50'))} | {_fmt(lat.get('e2e_ms_p95'))} |"
        )
    return "\n".join(lines)


def by_kind_table(results: Sequence[dict[str, Any]]) -> str:
    kinds = sorted({k for r in results for k in r["by_kind"]})
    header = "| question kind | " + " | ".join(f"{r['name']} C / H / tok" for r in results) + " |"
    lines = [header, "|---" * (len(results) + 1) + "|"]
    for kind in kinds:
        cells = []
        for r in results:
            s = r["by_kind"].get(kind)
            cells.append("-" if not s else f"{_fmt(s['correctness'], True)} / {_fmt(s['helpfulness'], True)} / {s['total_tokens']}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_table(results: Sequence[dict[str, Any]]) -> str:
    """Per model: correct share at each thinking cap, uncapped, and the minimum thinking budget."""
    caps = sorted({c for r in results for c in r["thinking_curve"]["caps"]})
    lines = ["| model | " + " | ".join(f"cap {c}" for c in caps) + " | uncapped | min thinking tokens |",
             "|---|" + "---|" * (len(caps) + 2)]
    for r in results:
        c = r["thinking_curve"]
        by_cap = dict(zip(c["caps"], c["correct"], strict=True))
        cells = [_fmt(by_cap.get(cap), pct=True) for cap in caps]
        floor = c["min_thinking_tokens"]
        floor_text = "none reaches it" if floor is None else str(floor)
        lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {_fmt(c['uncapped_correct'], pct=True)} | "
                     f"{floor_text} ({c['ratio']:.0%} of uncapped) |")
    return "\n".join(lines)


def write_report(results: Sequence[dict[str, Any]], out_dir: str | Path, title: str, meta: dict[str, Any]) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps({"meta": meta, "results": list(results)}, indent=2) + "\n")
    md = [f"# {title}", "", *([f"> **Note:** {meta['note']}", ""] if meta.get("note") else []),
          "Command: `" + meta.get("command", "") + "`", "",
          f"Split: {meta.get('split')} ({meta.get('n_tasks')} tasks). Greedy decoding. Tokens counted with the student "
          "tokenizer. Latency probed one request at a time on an idle engine.", "",
          overall_table(results), "", "## By question kind (correctness / helpfulness / mean total tokens)", "",
          by_kind_table(results), ""]
    curves = [r for r in results if r.get("thinking_curve")]
    if curves:
        reserves = sorted({str(r["thinking_curve"].get("reply_reserve")) for r in curves})
        md += ["## Correctness against the thinking cap (budget forcing)", "",
               "Each greedy completion is cut as the server cuts it, in tokens (those after the start of thinking, "
               f"the pre-filled ones included), and the reply gets {' / '.join(reserves)} tokens after the forced "
               "end.", "", curve_table(curves), ""]
    (out / "eval.md").write_text("\n".join(md))
    return out / "eval.md"
