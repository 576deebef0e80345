"""The holdout log: one JSON line per evaluation on the ``holdout`` split, so a reader can count the looks.

``holdout`` is for the published figures of shipped recipes only; every choice runs on ``validation``. Each
evaluation on ``holdout`` (``livethink eval --split holdout``, a benchmark runner) calls ``record_holdout_eval``
once, which appends a line to the tracked ``benchmarks/results/holdout_log.jsonl``: when, the command line, the
git commit (and whether the tree had uncommitted changes), the models or checkpoints, the number of tasks and what
was computed. Any other split is a no-op, so callers can call it unconditionally.

``LIVETHINK_HOLDOUT_LOG`` (or the ``path`` argument) points the log elsewhere; the tests use it so that they never
write to the tracked file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HOLDOUT = "holdout"
ENV_VAR = "LIVETHINK_HOLDOUT_LOG"
LOG_NAME = "benchmarks/results/holdout_log.jsonl"


def default_log_path() -> Path:
    """``$LIVETHINK_HOLDOUT_LOG``, else the repository's ``benchmarks/results/holdout_log.jsonl`` (the checkout
    this package runs from, or the working directory when it is installed elsewhere)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    repo = Path(__file__).resolve().parents[2]
    return (repo if (repo / "benchmarks/results").is_dir() else Path.cwd()) / LOG_NAME


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state(cwd: Path | None = None) -> dict[str, Any]:
    """``{"commit": HEAD or None, "dirty": uncommitted changes to tracked files (None outside a git tree)}``."""
    where = cwd or Path(__file__).resolve().parent
    commit = _git("rev-parse", "HEAD", cwd=where)
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=where) if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def checkpoint_fingerprint(path: str | Path) -> str | None:
    """A short hash of a checkpoint directory's file names and sizes and its ``config.json`` (cheap for any size of
    weights; it changes when the checkpoint is retrained or replaced). None when ``path`` is not a directory."""
    p = Path(path)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(p)}:{f.stat().st_size}\n".encode())
    if (p / "config.json").is_file():
        h.update((p / "config.json").read_bytes())
    return h.hexdigest()[:16]


def model_entry(path: str | Path, name: str | None = None) -> dict[str, Any]:
    """How the log names a model: its display name, path and checkpoint fingerprint."""
    return {"name": name or Path(path).name, "path": str(path), "fingerprint": checkpoint_fingerprint(path)}


def record_holdout_eval(
    split: str,
    *,
    computed: Sequence[str],
    models: Sequence[Mapping[str, Any] | str] = (),
    n_tasks: int | None = None,
    command: str | None = None,
    extra: Mapping[str, Any] | None = None,
    path: str | Path | None = None,
) -> dict[str, Any] | None:
    """Append one line to the holdout log when ``split`` is ``holdout``; return it (None for any other split).

    ``computed``: what the evaluation measured (e.g. ``["correctness", "helpfulness", "tokens"]``). ``models``:
    checkpoints (paths, or ``model_entry`` dicts; a teacher by name). ``command``: the command line (default: this
    process's). ``extra``: anything else worth counting (the benchmark, seeds). ``path``: the log (default
    ``default_log_path()``).
    """
    if split != HOLDOUT:
        return None
    entry = {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command if command is not None else shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        **git_state(),
        "split": split,
        "n_tasks": n_tasks,
        "models": [model_entry(m) if isinstance(m, str | Path) else dict(m) for m in models],
        "computed": list(computed),
        **dict(extra or {}),
    }
    target = Path(path) if path is not None else default_log_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=False) + "\n")  # one write: a line is never split between processes
    return entry


def read_log(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The log's entries, oldest first (none when it does not exist)."""
    target = Path(path) if path is not None else default_log_path()
    if not target.is_file():
        return []
    return [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines() if line.strip()]
