"""Read and write task records: JSONL, Parquet and Hugging Face ``datasets``.

JSONL keeps the nested record as is. Columnar formats (Parquet, ``datasets``) keep the scalar fields as
columns and the nested ones (``product_docs``, ``history``, ``reference``, ``helpful_facts``) as JSON strings,
because Arrow columns cannot hold the reference value's mixed types.

Invalid rows are never dropped silently: ``load_tasks`` returns them with their line/row number and reason,
and ``strict=True`` raises on the first one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from livethink.data.schema import Task

NESTED_FIELDS = ("product_docs", "history", "reference", "helpful_facts")


class InvalidTaskError(ValueError):
    """A row that does not fit the task schema (raised in strict mode)."""


@dataclass(frozen=True)
class RowError:
    location: str  # "line 12" (JSONL) or "row 12" (Parquet, datasets), 1-based
    reason: str

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class LoadResult:
    tasks: list[Task] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)

    @property
    def n_invalid(self) -> int:
        return len(self.errors)


def _reason(exc: Exception) -> str:
    """The fields at fault and why (``difficulty: Input should be a valid integer, got 'hard'``)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "<record>"
            got = "" if err["type"] == "missing" or isinstance(err.get("input"), dict) else f", got {_short(err.get('input'))}"
            parts.append(f"{loc}: {err['msg']}{got}")
        return "; ".join(parts)
    return str(exc)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _nested(key: str, value: Any) -> Any:
    """A nested field's value; in columnar formats it is JSON text, decoded here (a string that is not JSON is a
    type error naming the field)."""
    if key not in NESTED_FIELDS or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        kind = "an object" if key == "reference" else "a list"
        raise ValueError(f"{key}: must be {kind} (or its JSON text), got the string {_short(value)}") from None


def task_to_row(task: Task) -> dict[str, Any]:
    """Flat row for columnar formats (nested fields as JSON strings)."""
    record = task.model_dump(mode="json")
    return {k: json.dumps(v) if k in NESTED_FIELDS else v for k, v in record.items()}


def row_to_task(row: dict[str, Any]) -> Task:
    """Inverse of ``task_to_row``; also accepts rows whose nested fields are already objects."""
    return Task.model_validate({k: _nested(k, v) for k, v in row.items()})


def write_jsonl(tasks: Iterable[Task], path: str | Path) -> int:
    """Write tasks to JSONL (atomically: a temp file renamed into place). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(task.model_dump_json() + "\n")
            n += 1
    tmp.replace(path)
    return n


def write_parquet(tasks: Iterable[Task], path: str | Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [task_to_row(t) for t in tasks]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return len(rows)


def to_dataset(tasks: Iterable[Task]):
    """A ``datasets.Dataset`` with one row per task (see module docstring for the layout)."""
    from datasets import Dataset

    return Dataset.from_list([task_to_row(t) for t in tasks])


def _iter_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any] | Exception]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
                yield f"line {lineno}", obj
            except ValueError as exc:
                yield f"line {lineno}", ValueError(f"invalid JSON: {exc}")


def _iter_rows(rows: Iterable[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any] | Exception]]:
    for i, row in enumerate(rows, start=1):
        yield f"row {i}", row


def iter_raw(source: str | Path | Any) -> Iterator[tuple[str, dict[str, Any] | Exception]]:
    """Raw rows with their location from a JSONL/Parquet file, a saved dataset dir, or a ``Dataset``."""
    if hasattr(source, "column_names") and hasattr(source, "__iter__"):
        yield from _iter_rows(source)
        return
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_dir():
        from datasets import load_from_disk

        yield from _iter_rows(load_from_disk(str(path)))
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from _iter_rows(pq.read_table(str(path)).to_pylist())
    elif path.suffix in {".jsonl", ".json"}:
        yield from _iter_jsonl(path)
    else:
        raise ValueError(f"unsupported data format {path.suffix!r} for {path}: use .jsonl, .parquet or a dataset dir")


def load_tasks(source: str | Path | Any, strict: bool = False) -> LoadResult:
    """Load and validate tasks. Invalid rows are collected with their reason (or raise if ``strict``)."""
    result = LoadResult()
    seen: set[str] = set()
    for location, raw in iter_raw(source):
        try:
            if isinstance(raw, Exception):
                raise raw
            task = row_to_task(raw)
            if task.id in seen:
                raise ValueError(f"id: duplicate task id {task.id!r}")
        except (ValidationError, ValueError, TypeError) as exc:
            error = RowError(location, _reason(exc))
            if strict:
                raise InvalidTaskError(f"{source}: {error}") from exc
            result.errors.append(error)
            continue
        seen.add(task.id)
        result.tasks.append(task)
    return result


def read_tasks(source: str | Path | Any) -> list[Task]:
    """Strict load: every row must be valid (for data this project generated)."""
    return load_tasks(source, strict=True).tasks
