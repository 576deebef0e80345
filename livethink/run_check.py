"""Whether a training run would start here: the paths of a config, and the dry-run's verdict.

A dry-run report (``livethink rft|grpo|teacher --dry-run``) separates, as ``livethink serve --dry-run`` does:

- ``problems``: the config is wrong (``ok: false``, exit 2). A path that looks local (relative, or under the
  repository) and does not exist is one, unless an earlier step writes it: the ``output_dir`` (``/final``,
  ``/adapter``) of a training config under ``configs/``, or generated data under ``artifacts/``. A typo in a local
  path is therefore refused, with the nearest known path suggested.
- ``missing_here``: the config is right but this machine lacks what the run needs (a checkpoint at an absolute path
  outside the repository, another stage's output not produced yet, bf16 without a GPU): ``starts_here: false``,
  ``ok`` stays true, exit 0.
- ``notes``: what is fine but worth knowing (a Hugging Face Hub id, not checked offline; data generated at run time).

``print_dry_run`` prints the JSON report on stdout and one summary line on stderr.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GENERATED_ROOT = "artifacts"  # gitignored; `livethink data generate` and the stages write here
LOCAL_ROOTS = ("runs", "artifacts", "configs", "examples")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass
class Findings:
    """What a dry-run found: ``problems`` (not ok), ``missing_here`` (does not start here), ``notes``."""

    problems: list[str] = field(default_factory=list)
    missing_here: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def into(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` with the findings added (after its own) and the ``ok`` / ``starts_here`` verdict."""
        report["problems"] = [*report.get("problems", []), *self.problems]
        report["missing_here"] = [*report.get("missing_here", []), *self.missing_here]
        report["notes"] = [*report.get("notes", []), *self.notes]
        report["ok"] = not report["problems"]
        report["starts_here"] = report["ok"] and not report["missing_here"]
        return report


def _expanded(path: str) -> Path:
    return Path(os.path.expandvars(path)).expanduser()


def is_hub_id(path: str) -> bool:
    """``org/name`` that is not a local path (its first part is no directory here nor a livethink output root)."""
    first = path.split("/", 1)[0]
    return bool(_HUB_ID.fullmatch(path)) and first not in LOCAL_ROOTS and not Path(first).exists()


def looks_local(path: str) -> bool:
    """Relative (and not a hub id), or absolute under the repository."""
    p = _expanded(path)
    if not p.is_absolute():
        return not is_hub_id(path)
    return p.resolve().is_relative_to(REPO)


def _key(path: str | Path, base: Path) -> Path:
    p = _expanded(str(path))
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


@functools.cache
def stage_outputs() -> dict[Path, str]:
    """Every path a training config under ``configs/`` writes (``output_dir``, its ``final`` and ``adapter``) →
    the command that writes it."""
    from livethink.length_rl.config_files import load_config_file

    outputs: dict[Path, str] = {}
    for config in sorted((REPO / "configs").rglob("*.yaml")):
        command = next((c for c in ("rft", "grpo") if config.name.startswith(c)), None)
        try:
            out = load_config_file(config).get("output_dir") if command else None
        except ValueError:
            continue
        if isinstance(out, str):
            for sub in ("", "final", "adapter"):
                outputs[_key(Path(out) / sub, REPO)] = f"livethink {command} --config {config.relative_to(REPO)}"
    return outputs


def _suggestion(path: str) -> str:
    """``; did you mean X?`` for the closest known or existing path, else ``""``."""
    p = _expanded(path)
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    candidates = [str(c) for c in stage_outputs()]
    if parent.is_dir():
        candidates += [str(_key(c, Path.cwd())) for c in parent.iterdir()]
    target = str(_key(path, Path.cwd()))
    close = difflib.get_close_matches(target, candidates, n=1, cutoff=0.8)
    if not close:
        return ""
    shown = Path(close[0])
    shown = shown.relative_to(Path.cwd()) if shown.is_relative_to(Path.cwd()) else shown
    return f"; did you mean {shown}?"


def check_path(found: Findings, name: str, path: str | None, *, what: str, generated: str | None = None,
               written_by: str | None = None) -> None:
    """Classify a missing ``path`` (the option ``name``; ``what`` it is: "the model", "the data"). A local path is
    a problem unless a training config writes it (``missing_here``), or it is under ``artifacts/`` and either the
    run makes it (``generated``: a note) or an earlier command does (``written_by``: ``missing_here``). A production
    path is ``missing_here``; a hub id a note."""
    if not path or _expanded(path).exists():
        return
    if not looks_local(path):
        if is_hub_id(path) and not _expanded(path).is_absolute():
            found.notes.append(f"{name}: {path} reads as a Hugging Face Hub id (not checked here)")
        else:
            found.missing_here.append(f"{name}: {path} ({what}) is not on this machine (needed at run time)")
        return
    writer = stage_outputs().get(_key(path, Path.cwd()))
    if writer is not None:
        found.missing_here.append(f"{name}: {path} ({what}) is not here yet; `{writer}` writes it")
        return
    relative = _key(path, Path.cwd())
    if (generated or written_by) and relative.is_relative_to(_key(GENERATED_ROOT, Path.cwd())):
        if generated:
            found.notes.append(f"{name}: {path} is not here yet; {generated}")
        else:
            found.missing_here.append(f"{name}: {path} ({what}) is not here yet; {written_by}")
        return
    found.problems.append(f"{name}: {path} does not exist ({what}; a local path that no earlier step writes"
                          f"{_suggestion(path)})")


def check_hardware(found: Findings, requested: dict[str, Any]) -> None:
    """bf16 without ``use_cpu`` needs a GPU: ``missing_here`` on a machine without one."""
    if requested.get("bf16") and not requested.get("use_cpu"):
        import torch

        if not torch.cuda.is_available():
            found.missing_here.append("bf16: needs a GPU, and none is visible here")


def print_dry_run(prog: str, report: dict[str, Any]) -> int:
    """The report as JSON on stdout and one summary line on stderr; the exit code (2 when not ok, else 0)."""
    print(json.dumps(report, indent=2, default=str))
    if report["problems"]:
        print(f"{prog}: invalid config: {'; '.join(report['problems'])}", file=sys.stderr)
        return 2
    if report.get("starts_here", True):
        print(f"{prog}: config ok; the run would start here", file=sys.stderr)
    else:
        print(f"{prog}: config ok, but the run would not start here: {'; '.join(report['missing_here'])}",
              file=sys.stderr)
    return 0


__all__ = ["Findings", "check_hardware", "check_path", "is_hub_id", "looks_local", "print_dry_run", "stage_outputs"]
