"""`livethink teacher`: sample k reasoning traces per prompt from a teacher into resumable JSONL shards.

    livethink teacher --config configs/tiny/teacher_smollm2.yaml [--key value ...]
    livethink teacher --data DIR --split train --limit 100 --k 4 --teacher scripted --out runs/teacher/scripted
    livethink teacher --teacher openai --base_url http://127.0.0.1:8000/v1 --model smollm2 --data DIR --out OUT

The YAML has top-level run keys (``data``, ``split``, ``limit``, ``k``, ``out``, ``shard_size``, ``fsync``,
``progress``, ``retry_failed``), a ``sampling:`` section (``temperature``, ``top_p``, ``max_tokens``, ``seed``) and a ``teacher:``
section for ``make_teacher`` (``type`` + the backend's options). Command-line ``--key value`` pairs override
it: dotted keys reach into sections (``--teacher.timeout_s 30``, ``--sampling.max_tokens 256``) and the
shortcuts below map to them. Re-running the same command resumes: finished tasks are skipped.
Exit status: 0 done, 1 bad data, 2 bad config, 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

SHORTCUTS = {
    "teacher": "teacher.type", "type": "teacher.type", "base_url": "teacher.base_url", "model": "teacher.model",
    "concurrency": "teacher.concurrency", "timeout_s": "teacher.timeout_s", "max_retries": "teacher.max_retries",
    "rps": "teacher.rps", "error_rate": "teacher.error_rate", "api_key_env": "teacher.api_key_env",
    "temperature": "sampling.temperature", "top_p": "sampling.top_p", "max_tokens": "sampling.max_tokens",
    "seed": "sampling.seed",
}
FLAGS = {"no_progress": ("progress", False), "no_fsync": ("fsync", False), "retry_failed": ("retry_failed", True)}


@dataclass
class TeacherRunConfig:
    """One ``livethink teacher`` run (see module docstring)."""

    data: str = "artifacts/tiny/data"  # a data dir holding <split>.jsonl, or a task file (.jsonl/.parquet)
    split: str = "train"
    limit: int = 0  # first N tasks (0 = all)
    k: int = 4
    out: str = "runs/teacher"
    shard_size: int = 1000  # tasks per shard file
    fsync: bool = True
    progress: bool = True
    retry_failed: bool = False  # on resume, redo tasks whose samples failed for a transient reason
    sampling: dict[str, Any] = field(default_factory=dict)
    teacher: dict[str, Any] = field(default_factory=lambda: {"type": "scripted"})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TeacherRunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: {sorted(known)} (teacher options go under "
                             "`teacher:`, sampling options under `sampling:`)")
        cfg = cls(**raw)
        for name in ("sampling", "teacher"):
            if not isinstance(getattr(cfg, name), dict):
                raise ValueError(f"{name}: must be a mapping, got {getattr(cfg, name)!r}")
        if not isinstance(cfg.k, int) or cfg.k < 1:
            raise ValueError(f"k: must be a positive integer, got {cfg.k!r}")
        if not isinstance(cfg.limit, int) or cfg.limit < 0:
            raise ValueError(f"limit: must be an integer >= 0, got {cfg.limit!r}")
        return cfg


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    node = config
    *parents, last = dotted.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ValueError(f"--{dotted}: {part!r} is not a section")
        node = child
    node[last] = value


def parse_args(argv: list[str]) -> dict[str, Any]:
    """The merged config dict: YAML (``--config``) then ``--key value`` overrides."""
    args = list(argv)
    config: dict[str, Any] = {}
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise ValueError(f"unexpected argument {arg!r} (options are --key value)")
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        if key in FLAGS:
            pairs.append((key, None))
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise ValueError(f"--{key}: missing value")
            value = args[i + 1]
            i += 1
        pairs.append((key, value))
        i += 1
    for key, value in pairs:
        if key == "config":
            path = Path(str(value))
            if not path.is_file():
                raise ValueError(f"--config: file not found: {path}")
            loaded = yaml.safe_load(path.read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: the config must be a mapping")
            config.update(loaded)
    for key, value in pairs:
        if key == "config":
            continue
        if key in FLAGS:
            name, flag_value = FLAGS[key]
            config[name] = flag_value
            continue
        _set(config, SHORTCUTS.get(key, key), yaml.safe_load(value) if value is not None else None)
    return config


def load_run_tasks(cfg: TeacherRunConfig):
    """The tasks of the run: ``<data>/<split>.jsonl`` (or the file ``data``), first ``limit`` of them."""
    from livethink.data.io import load_tasks

    path = Path(cfg.data)
    if path.is_dir():
        path = path / f"{cfg.split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"data: no such file {path} (generate LiveShop with `livethink data generate`)")
    result = load_tasks(path)
    for error in result.errors:
        print(f"{path}: {error} (skipped)", file=sys.stderr)
    tasks = result.tasks
    return tasks[: cfg.limit] if cfg.limit else tasks


def run(cfg: TeacherRunConfig):
    """Build the teacher and sample into ``cfg.out``; returns the ``SamplingSummary``."""
    from livethink.rft_distill.sampling import sample_to_shards
    from livethink.rft_distill.teachers.base import SamplingConfig
    from livethink.rft_distill.teachers.factory import make_teacher

    sampling = SamplingConfig(**cfg.sampling)
    teacher = make_teacher(dict(cfg.teacher))
    tasks = load_run_tasks(cfg)
    return sample_to_shards(teacher, tasks, cfg.k, sampling, cfg.out, shard_size=cfg.shard_size,
                            progress=cfg.progress, fsync=cfg.fsync, retry_failed=cfg.retry_failed)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    try:
        cfg = TeacherRunConfig.from_dict(parse_args(argv))
    except (ValueError, TypeError, yaml.YAMLError) as exc:
        print(f"livethink teacher: invalid config: {exc}", file=sys.stderr)
        return 2
    try:
        summary = run(cfg)
    except KeyboardInterrupt as exc:
        print(f"livethink teacher: {exc or 'interrupted'}", file=sys.stderr)
        return 130
    except FileNotFoundError as exc:
        print(f"livethink teacher: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        print(f"livethink teacher: invalid config: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary.as_dict(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
