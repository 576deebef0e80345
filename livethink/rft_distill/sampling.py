"""Resumable k-sample teacher generation, streamed to JSONL shards.

Layout of ``out_dir``::

    manifest.json           k, teacher name, sampling options (a resume must ask for the same k)
    samples-00000.jsonl     one ``Sample`` per line (``Sample.model_dump``), a task's k lines written together
    samples-00001.jsonl     ... (``shard_size`` tasks per shard)
    summary.json            counts over every shard + this run's wall time and throughput

Durability: a task's k lines are one ``os.write`` on an ``O_APPEND`` file followed by ``fsync``, so a
Ctrl-C, SIGTERM or ``kill -9`` leaves whole tasks only, except possibly a torn tail after a crash mid-write.
On restart, every shard is scanned: torn lines, tasks with fewer than k samples and repeated tasks are
dropped (the shard is rewritten atomically), complete tasks are skipped, and sampling goes on with the rest.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from livethink.data.schema import Task
from livethink.rft_distill.teachers.base import Sample, SamplingConfig, Teacher, check_k

SHARD_PREFIX = "samples-"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
# failure reasons a later run may fix (``retry_failed=True``); context_length, empty, truncated are the model's
TRANSIENT = frozenset({"connection", "timeout", "server_error", "rate_limited", "malformed_response",
                       "client_error", "http_408", "http_409"})


def shard_paths(out_dir: str | Path) -> list[Path]:
    """Sample shards of ``out_dir`` in write order."""
    return sorted(Path(out_dir).glob(f"{SHARD_PREFIX}*.jsonl"))


def read_samples(out_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Every sample record (a dict) of complete tasks in ``out_dir``, skipping torn or partial trailing lines."""
    k = _manifest_k(Path(out_dir))
    for path in shard_paths(out_dir):
        for _task_id, lines in _complete_tasks(path, k)[0]:
            for line in lines:
                yield json.loads(line)


def failure_reason(error: str) -> str:
    """Short category of a failed sample's ``error`` (the text before the first ':')."""
    head = error.split(":", 1)[0].strip().lower()
    return head[:40] if head and len(head) <= 40 and " " not in head else "other"


@dataclass
class SamplingSummary:
    """Counts over all shards (``tasks_*``, ``samples``, ``failed_*``, tokens) and this run's speed."""

    tasks_requested: int = 0
    tasks_complete: int = 0
    tasks_skipped_resume: int = 0  # already complete when this run started
    tasks_written: int = 0  # by this run
    samples: int = 0
    failed_samples: int = 0
    failed_by_reason: dict[str, int] = field(default_factory=dict)
    finish_reasons: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_sample: float = 0.0
    tokens_estimated: int = 0  # samples counted in whitespace words or a share of a request's usage
    dropped_on_resume: dict[str, int] = field(default_factory=dict)  # torn lines, partial/duplicate tasks
    wall_s: float = 0.0  # this run
    samples_per_s: float = 0.0  # this run
    completion_tokens_per_s: float = 0.0  # this run
    interrupted: bool = False
    teacher: str = ""
    k: int = 0

    @property
    def done(self) -> bool:
        return self.tasks_complete >= self.tasks_requested and not self.interrupted

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done}


# ---------------------------------------------------------------------------------------------- reading shards


def _manifest_k(out_dir: Path) -> int | None:
    path = out_dir / MANIFEST
    return int(json.loads(path.read_text())["k"]) if path.is_file() else None


def _complete_tasks(path: Path, k: int | None) -> tuple[list[tuple[str, list[str]]], Counter]:
    """Complete tasks of one shard as (task_id, raw lines), in file order, and counts of what was dropped."""
    dropped: Counter = Counter()
    groups: dict[str, dict[int, str]] = {}
    order: list[str] = []
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            task_id, index = record["task_id"], int(record["sample_index"])
        except (ValueError, KeyError, TypeError):
            dropped["torn_lines"] += 1
            continue
        if task_id not in groups:
            groups[task_id] = {}
            order.append(task_id)
        if index in groups[task_id]:
            dropped["duplicate_samples"] += 1
            continue
        groups[task_id][index] = raw.decode("utf-8")
    complete = []
    for task_id in order:
        by_index = groups[task_id]
        want = k if k is not None else len(by_index)
        if sorted(by_index) == list(range(want)):
            complete.append((task_id, [by_index[i] for i in range(want)]))
        else:
            dropped["partial_tasks"] += 1
    return complete, dropped


def _scan(out_dir: Path, k: int, on_records: Callable[[list[dict[str, Any]]], None],
          retry_failed: bool = False) -> tuple[set[str], Counter, int]:
    """Complete task ids over all shards (each task's records passed to ``on_records``), repairing shards that
    hold anything else; also returns what was dropped and the number of tasks in the last shard. With
    ``retry_failed``, tasks with a sample that failed for a transient reason are dropped too (to redo)."""
    seen: set[str] = set()
    dropped: Counter = Counter()
    last_count = 0
    for path in shard_paths(out_dir):
        complete, bad = _complete_tasks(path, k)
        kept = []
        for task_id, lines in complete:
            if task_id in seen:
                bad["duplicate_tasks"] += 1
                continue
            records = [json.loads(line) for line in lines]
            if retry_failed and any(r.get("error") and failure_reason(r["error"]) in TRANSIENT for r in records):
                bad["retried_failed_tasks"] += 1
                continue
            seen.add(task_id)
            kept.append(lines)
            on_records(records)
        if bad:
            dropped.update(bad)
            tmp = path.with_suffix(".jsonl.repair")
            tmp.write_text("".join(line + "\n" for lines in kept for line in lines), encoding="utf-8")
            os.replace(tmp, path)
        last_count = len(kept)
    return seen, dropped, last_count


# ---------------------------------------------------------------------------------------------- writing shards


class ShardWriter:
    """Appends whole tasks to ``samples-NNNNN.jsonl`` shards: one ``os.write`` + ``fsync`` per task."""

    def __init__(self, out_dir: Path, shard_size: int, fsync: bool = True, tasks_in_last: int | None = None):
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.out_dir, self.shard_size, self.fsync = out_dir, shard_size, fsync
        shards = shard_paths(out_dir)
        self.index = int(shards[-1].stem.removeprefix(SHARD_PREFIX)) if shards else 0
        self.count = tasks_in_last or 0
        self.fd: int | None = None

    def _open(self) -> int:
        if self.fd is not None and self.count >= self.shard_size:
            os.close(self.fd)
            self.fd, self.index, self.count = None, self.index + 1, 0
        if self.fd is None:
            path = self.out_dir / f"{SHARD_PREFIX}{self.index:05d}.jsonl"
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self.fd

    def write_task(self, samples: Sequence[Sample]) -> None:
        data = "".join(s.model_dump_json() + "\n" for s in samples).encode("utf-8")
        fd = self._open()
        view = memoryview(data)
        while view:  # a regular-file write is normally complete in one call
            view = view[os.write(fd, view):]
        if self.fsync:
            os.fsync(fd)
        self.count += 1

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ---------------------------------------------------------------------------------------------- the runner


class _Stop(Exception):
    """Raised in the main thread by SIGTERM so the run stops between two writes."""


@contextmanager
def _sigterm_stops():
    """Turn SIGTERM into ``_Stop`` while sampling (only possible in the main thread)."""

    def handler(signum, frame):
        raise _Stop(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _validate_task_samples(task: Task, samples: Sequence[Sample], k: int) -> None:
    indices = sorted(s.sample_index for s in samples)
    if indices != list(range(k)) or any(s.task_id != task.id for s in samples):
        raise RuntimeError(
            f"teacher returned samples {indices} for task {task.id!r} (expected indices 0..{k - 1} of that task)"
        )


def _check_manifest(out_dir: Path, teacher: Teacher, k: int, sampling: SamplingConfig) -> None:
    path = out_dir / MANIFEST
    wanted = {"k": k, "teacher": teacher.name, "sampling": sampling.model_dump()}
    if path.is_file():
        found = json.loads(path.read_text())
        if int(found["k"]) != k:
            raise ValueError(f"k: {out_dir} holds samples with k={found['k']}, this run asks k={k}; "
                             "use the same k or another out_dir")
        return
    if shard_paths(out_dir):
        raise ValueError(f"{out_dir} holds sample shards but no {MANIFEST}; refusing to guess their k")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(wanted, indent=2) + "\n")
    os.replace(tmp, path)


def _tokens(sample: dict[str, Any], key: str) -> int:
    """Token count from the backend's ``meta``; completions without one count whitespace words."""
    value = (sample.get("meta") or {}).get(key)
    if isinstance(value, int | float):
        return int(value)
    return len((sample.get("completion") or "").split()) if key == "completion_tokens" else 0


def _estimated(sample: dict[str, Any]) -> bool:
    meta = sample.get("meta") or {}
    return bool(meta.get("tokens_estimated")) or not isinstance(meta.get("completion_tokens"), int | float)


def _count(summary: SamplingSummary, records: Sequence[dict[str, Any]]) -> None:
    failed, finish = Counter(summary.failed_by_reason), Counter(summary.finish_reasons)
    prompt_by_task: dict[str, int] = {}
    for r in records:
        summary.samples += 1
        finish[r.get("finish_reason") or "stop"] += 1
        if r.get("error"):
            summary.failed_samples += 1
            failed[failure_reason(str(r["error"]))] += 1
        summary.completion_tokens += _tokens(r, "completion_tokens")
        summary.tokens_estimated += _estimated(r)
        prompt_by_task[r["task_id"]] = max(prompt_by_task.get(r["task_id"], 0), _tokens(r, "prompt_tokens"))
    summary.prompt_tokens += sum(prompt_by_task.values())
    summary.failed_by_reason, summary.finish_reasons = dict(failed), dict(finish)


def _stream(teacher: Teacher, tasks: Sequence[Task], k: int, sampling: SamplingConfig) -> Iterator[list[Sample]]:
    """The teacher's samples task by task; uses ``generate_unordered`` (completion order) when it has one."""
    unordered = getattr(teacher, "generate_unordered", None)
    return unordered(tasks, k, sampling) if callable(unordered) else teacher.generate(tasks, k, sampling)


def sample_to_shards(
    teacher: Teacher,
    tasks: Sequence[Task],
    k: int,
    sampling: SamplingConfig | None = None,
    out_dir: str | Path = "samples",
    shard_size: int = 1000,
    progress: bool = True,
    fsync: bool = True,
    retry_failed: bool = False,
) -> SamplingSummary:
    """Sample k completions per task into JSONL shards under ``out_dir``, resuming what is already there.

    Returns (and writes to ``out_dir/summary.json``) a :class:`SamplingSummary`. A Ctrl-C or SIGTERM stops the
    run between two tasks: the summary is written with ``interrupted=True`` and ``KeyboardInterrupt`` is
    re-raised. Failed samples are counted, never raised. A task whose samples failed is complete too (its
    failures are data); ``retry_failed=True`` redoes tasks that failed for a transient reason (``TRANSIENT``:
    endpoint down, timeouts, 5xx, ...), replacing their lines.
    """
    k = check_k(k)
    sampling = sampling or SamplingConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"tasks: duplicate task id {dup!r}")
    _check_manifest(out, teacher, k, sampling)
    summary = SamplingSummary(tasks_requested=len(tasks), teacher=teacher.name, k=k)
    wanted = set(ids)
    done, dropped, last_count = _scan(out, k, lambda rs: _count(summary, rs) if rs[0]["task_id"] in wanted else None,
                                      retry_failed)
    todo = [t for t in tasks if t.id not in done]
    summary.tasks_skipped_resume = len(wanted & done)
    summary.dropped_on_resume = dict(dropped)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), initial=summary.tasks_skipped_resume, desc=f"teacher {teacher.name}",
                   unit="task", dynamic_ncols=True)
    writer = ShardWriter(out, shard_size, fsync=fsync, tasks_in_last=last_count)
    start = time.perf_counter()
    new_samples = new_tokens = 0
    by_id = {t.id: t for t in todo}
    stream: Iterator[list[Sample]] = iter(())
    try:
        with _sigterm_stops():
            stream = _stream(teacher, todo, k, sampling) if todo else stream
            for samples in stream:
                task = by_id.get(samples[0].task_id) if samples else None
                if task is None:
                    raise RuntimeError(f"teacher returned samples for an unknown task: {samples[:1]}")
                _validate_task_samples(task, samples, k)
                samples = sorted(samples, key=lambda s: s.sample_index)
                writer.write_task(samples)
                summary.tasks_written += 1
                records = [s.model_dump(mode="json") for s in samples]
                _count(summary, records)
                new_samples += len(records)
                new_tokens += sum(_tokens(r, "completion_tokens") for r in records)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(failed=summary.failed_samples, refresh=False)
    except (KeyboardInterrupt, _Stop):
        summary.interrupted = True
    finally:
        writer.close()
        if bar is not None:
            bar.close()
        close_stream = getattr(stream, "close", None)
        if callable(close_stream):  # a generator's cleanup (threads, HTTP client) runs now, not at GC
            close_stream()
        summary.wall_s = round(time.perf_counter() - start, 3)
        summary.tasks_complete = summary.tasks_skipped_resume + summary.tasks_written
        if summary.samples:
            summary.tokens_per_sample = round(summary.completion_tokens / summary.samples, 2)
        if summary.wall_s > 0:
            summary.samples_per_s = round(new_samples / summary.wall_s, 3)
            summary.completion_tokens_per_s = round(new_tokens / summary.wall_s, 1)
        tmp = out / (SUMMARY + ".tmp")
        tmp.write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
        os.replace(tmp, out / SUMMARY)
    if summary.interrupted:
        raise KeyboardInterrupt(f"teacher sampling interrupted after {summary.tasks_written} tasks; rerun to resume")
    return summary
