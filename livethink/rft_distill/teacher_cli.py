"""`livethink teacher`: sample k reasoning traces per prompt from a teacher into resumable JSONL shards.

    livethink teacher --config configs/smollm2/teacher.yaml [--limit 100 --k 4 ...]
    livethink teacher --data DIR --split train --limit 100 --k 4 --teacher-type scripted --out runs/teacher/scripted
    livethink teacher --teacher-type openai --teacher-base-url http://127.0.0.1:8000/v1 --teacher-model smollm2 --data DIR --out OUT

One config system with ``livethink rft`` and ``grpo`` (``livethink.config_sections``): the YAML has the run's keys
(``data``, ``split``, ``limit``, ``k``, ``out``, ``seed``, ...) and a ``teacher:`` section (``TeacherSettings``:
``type``, the backend's options and the sampling options ``temperature``, ``top_p``, ``max_tokens``), the same
section as ``livethink rft``'s. Flags override it (``--teacher-timeout-s 30``); ``--help`` lists them all.
``--dry-run`` checks the config and the teacher's options without loading a model or calling the endpoint. Re-running the same command
resumes: finished tasks are skipped. Exit status: 0 done, 1 bad data, 2 bad config, 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from livethink.config_sections import ConfigError, section_fields, section_settings
from livethink.option_ranges import NonNegativeInt, PositiveInt, Seed, check_ranges
from livethink.rft_distill.teachers.settings import TeacherSettings

TeacherFields = section_fields(TeacherSettings, "teacher")
SECTIONS = {"teacher": TeacherSettings}


@dataclass
class TeacherRunConfig(TeacherFields):
    """One ``livethink teacher`` run (see module docstring)."""

    data: str = field(default="artifacts/tiny/data", metadata={"help": "a data dir holding <split>.jsonl, or a task file (.jsonl/.parquet)"})
    split: str = field(default="train", metadata={"help": "the split read from a data dir"})
    limit: NonNegativeInt = field(default=0, metadata={"help": "first N tasks (0 = all)"})
    k: PositiveInt = field(default=4, metadata={"help": "samples per task"})
    out: str = field(default="runs/teacher", metadata={"help": "the shard directory (resumed when it exists)"})
    seed: Seed = field(default=0, metadata={"help": "sampling seed"})
    shard_size: PositiveInt = field(default=1000, metadata={"help": "tasks per shard file"})
    fsync: bool = field(default=True, metadata={"help": "fsync after every task (durable against power loss)"})
    progress: bool = field(default=True, metadata={"help": "a progress bar on stderr"})
    retry_failed: bool = field(default=False, metadata={"help": "on resume, redo tasks whose samples failed for a transient reason"})

    def __post_init__(self) -> None:
        check_ranges(self)
        self.teacher  # noqa: B018 (its checks, now)

    @property
    def teacher(self) -> TeacherSettings:
        """The ``teacher:`` section."""
        return section_settings(self, TeacherSettings, "teacher")


def parse_args(argv: list[str]) -> TeacherRunConfig:
    """The run's config: the YAML (``--config``) then the flags; ``ConfigError`` names a mistake."""
    from livethink.config_sections import parse_config, pop_config

    argv = list(argv)
    config = pop_config(argv)
    if "sampling" in config:
        raise ConfigError("sampling: the sampling options are teacher settings: write temperature, top_p and "
                          "max_tokens under teacher:, and seed at the top level")
    return parse_config(TeacherRunConfig, argv, config, SECTIONS, prog="livethink teacher")


def data_path(cfg: TeacherRunConfig) -> Path:
    path = Path(cfg.data)
    return path / f"{cfg.split}.jsonl" if path.is_dir() else path


def load_run_tasks(cfg: TeacherRunConfig):
    """The tasks of the run: ``<data>/<split>.jsonl`` (or the file ``data``), first ``limit`` of them."""
    from livethink.data.io import load_tasks

    path = data_path(cfg)
    if not path.exists():
        raise FileNotFoundError(f"data: no such file {path} (generate LiveShop with `livethink data generate`)")
    result = load_tasks(path)
    for error in result.errors:
        print(f"{path}: {error} (skipped)", file=sys.stderr)
    tasks = result.tasks
    return tasks[: cfg.limit] if cfg.limit else tasks


def dry_run(cfg: TeacherRunConfig) -> dict[str, Any]:
    """What the run would do, checked without sampling: the teacher's options (nothing loaded) and the data file."""
    from livethink.run_check import Findings, check_path

    found = Findings()
    try:
        cfg.teacher.check_backend()
    except ConfigError as exc:
        found.problems.append(str(exc))
    data_dir = Path(cfg.data).parent if Path(cfg.data).suffix in (".jsonl", ".parquet") else Path(cfg.data)
    check_path(found, "data", str(data_path(cfg)), what="the tasks",
               written_by=f"`livethink data generate --out {data_dir}` writes it")
    return found.into({"teacher": cfg.teacher.describe(), "k": cfg.k, "limit": cfg.limit,
                       "data": str(data_path(cfg)), "out": cfg.out})


def run(cfg: TeacherRunConfig):
    """Build the teacher and sample into ``cfg.out``; returns the ``SamplingSummary``."""
    from livethink.rft_distill.sampling import sample_to_shards
    from livethink.rft_distill.teachers.factory import make_teacher

    settings = cfg.teacher
    teacher = make_teacher(settings.backend_config())
    tasks = load_run_tasks(cfg)
    return sample_to_shards(teacher, tasks, cfg.k, settings.sampling(cfg.seed), cfg.out, shard_size=cfg.shard_size,
                            progress=cfg.progress, fsync=cfg.fsync, retry_failed=cfg.retry_failed)


def main(argv: list[str] | None = None) -> int:
    from livethink.config_sections import training_main

    def run_and_report(cfg: TeacherRunConfig) -> int:
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

    return training_main("teacher", sys.argv[1:] if argv is None else argv, lambda args, _dry: parse_args(args),
                         dry_run, run_and_report)


if __name__ == "__main__":
    raise SystemExit(main())
