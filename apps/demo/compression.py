"""The Compression tab: the stage-2 Pareto plot and table, and the evaluation report, read from disk.

Files (written by others; the tab only reads them, and says what to run when they are missing):
``{results_dir}/compression.png`` or, as ``benchmarks/compression.py`` writes it, ``compression_pareto.png``
(correctness and helpfulness vs tokens per method), ``compression.md``
(the table), ``compression.json`` (the numbers; shown as a table when there is no Markdown), and the eval
report ``runs/tiny/eval/eval.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gradio as gr

COMMAND = "python benchmarks/compression.py"


def _rows(data: Any) -> list[dict[str, Any]] | None:
    """A list of flat records from compression.json, if it has one (a list, or under a common key)."""
    if isinstance(data, dict):
        for key in ("rows", "variants", "results", "pareto", "models"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        return [{k: v for k, v in r.items() if not isinstance(v, dict | list)} for r in data]
    return None


def _table_markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))[:12]

    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else ("–" if v is None else str(v))

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def load_compression(results_dir: str | Path, eval_report: str | Path | None) -> tuple[str, str | None, str]:
    """(Pareto table Markdown, path of the Pareto PNG or None, eval report Markdown)."""
    d = Path(results_dir)
    md, js = d / "compression.md", d / "compression.json"
    png = next((p for p in (d / "compression.png", d / "compression_pareto.png") if p.is_file()), d / "compression.png")
    if md.is_file():
        # the report's own image links are relative to its folder; the tab shows the plot above the table instead
        table = "\n".join(line for line in md.read_text(encoding="utf-8", errors="replace").splitlines()
                          if not line.startswith("!["))  # fmt: skip
    elif js.is_file():
        try:
            rows = _rows(json.loads(js.read_text()))
        except ValueError as exc:
            rows, table = None, f"⚠ `{js}` is not valid JSON ({exc})."
        else:
            table = _table_markdown(rows) if rows else f"`{js}` has no table of variants to show."
    else:
        table = (
            f"### Compression benchmark: not run yet\n\nNo results in `{d}/` (`compression.md`, `.json`, `.png`). "
            f"Run it with:\n\n```bash\n{COMMAND}\n```\n\n(`make demo` runs one compression variant on the embedded "
            "default.)"
        )
    if eval_report is not None and Path(eval_report).is_file():
        ev = Path(eval_report).read_text(encoding="utf-8", errors="replace")
    else:
        ev = f"No evaluation report yet (`{eval_report}`): `make demo` writes it (`livethink eval ...`)."
    return table, (str(png) if png.is_file() else None), ev


def _image(path: str | None) -> Any:
    """The PNG as a PIL image (so Gradio needs no file-access allowance for the results folder)."""
    if path is None:
        return None
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except OSError:
        return None


def build_compression_tab(results_dir: str | Path, eval_report: str | Path | None) -> dict[str, Any]:
    """Lay out the tab (inside an open ``gr.Tab``); the Reload button re-reads the files."""

    def load() -> tuple[str, Any, str]:
        table, png, ev = load_compression(results_dir, eval_report)
        img = _image(png)
        return table, gr.update(value=img, visible=img is not None), ev

    table0, png0, ev0 = load_compression(results_dir, eval_report)
    img0 = _image(png0)
    reload_btn = gr.Button("Reload results", size="sm", elem_id="compression-reload")
    plot = gr.Image(img0, visible=img0 is not None, label="Pareto: correctness / helpfulness vs tokens per reply",
                    type="pil", interactive=False, elem_id="compression-plot")  # fmt: skip
    table = gr.Markdown(table0, elem_id="compression-table")
    gr.Markdown("### Evaluation report")
    ev = gr.Markdown(ev0, elem_id="eval-report")
    reload_btn.click(load, None, [table, plot, ev])
    return {"load": load, "outputs": [table, plot, ev]}
