"""Shared helpers of the A/B and replica benchmarks: machine info and result files in benchmarks/results/."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "sqlite": sqlite3.sqlite_version,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_results(name: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """Write ``results/<name>.json`` and ``results/<name>.md`` (temp file + rename)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix, text in ((".json", json.dumps(data, indent=2) + "\n"), (".md", markdown)):
        path = RESULTS / f"{name}{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        out.append(path)
    return out


def publish(name: str, data: dict[str, Any], markdown: str, fig: Any) -> None:
    """Save ``fig`` (a matplotlib figure) as ``results/<name>.png`` beside ``results/<name>.{json,md}``, and print
    the paths of the result files."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=100)
    for path in write_results(name, data, markdown):
        print(path)
