"""Shared helpers of the serving benchmarks: the repository's paths, the environment of the servers they start, a
rounded percentile, an untrained student to serve when no trained one exists, the record every result file
starts with (the command, the machine, the load average before and after, the wall time) and saving a figure."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
# under a runs folder (runs/tiny): make demo's two arms, the RFT student and the one trained for the cut that it
# serves (livethink.demo_job's Settings.rft and Settings.served)
RFT_STUDENT = "rft/final"
SERVED_STUDENT = "grpo/drpo_then_budget64/final"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}


def pct(values: list[float], q: float, digits: int | None = 1) -> float | None:
    """The ``q``-th percentile of ``values`` rounded to ``digits`` (None: unrounded); None for no values."""
    if not values:
        return None
    value = float(np.percentile(values, float(q)))
    return value if digits is None else round(value, digits)


def untrained_student(workdir: Path) -> Path:
    """A freshly initialised tiny student (``livethink.models.student.untrained_student``) under ``workdir``."""
    from livethink.models.student import untrained_student as build

    return build(workdir / "untrained-student")


class RunRecord:
    """What a result file says of its run: ``start(script, argv)`` before the work (the load average then), and
    ``fields()`` after it: ``command``, ``environment``, ``loadavg_before``, ``loadavg_after`` and ``wall_s``."""

    def __init__(self, script: str, argv: list[str] | None) -> None:
        args = shlex.join(argv if argv is not None else sys.argv[1:])
        self.command = f"python benchmarks/{script} {args}".strip()
        self.loadavg_before = [round(x, 2) for x in os.getloadavg()]
        self.t0 = time.monotonic()

    def fields(self) -> dict[str, Any]:
        return {"command": self.command,
                "environment": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                               f"{platform.python_version()}",
                "loadavg_before": self.loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "wall_s": round(time.monotonic() - self.t0, 1)}  # fmt: skip


def runs_label(runs: Path) -> str:
    """A runs folder as the result files name it: relative to the repository when it is inside it."""
    full = runs.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(runs)


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, save (110 dpi) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def trained_student(parser: argparse.ArgumentParser, runs: Path, student: str = RFT_STUDENT) -> Path:
    """``runs/<student>`` (a ``make demo`` checkpoint); a one-line parser error naming ``--runs`` when it is missing."""
    path = runs / student
    if not (path / "config.json").exists():
        parser.error(f"--runs: no trained student at {path}; run `make demo` first")
    return path


def write_outputs(out: Path, name: str, result: dict[str, Any], markdown: str,
                  plot: Callable[[dict[str, Any], Path], None], data: dict[str, Any] | None = None) -> None:
    """``out/<name>.{json,md,png}`` (the JSON is ``data`` when given, e.g. the result with its raw rows), and the
    Markdown printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result if data is None else data, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown)
    plot(result, out / f"{name}.png")
    print(markdown)
