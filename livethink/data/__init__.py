"""Task records, the LiveShop generator, and readers/writers."""

from livethink.data.io import (
    LoadResult,
    RowError,
    load_tasks,
    read_tasks,
    to_dataset,
    write_jsonl,
    write_parquet,
)
from livethink.data.prompt import build_messages, format_completion
from livethink.data.schema import HelpfulFact, ProductDoc, Reference, Task, Turn

__all__ = [
    "HelpfulFact", "LoadResult", "ProductDoc", "Reference", "RowError", "Task", "Turn", "build_messages",
    "format_completion", "load_tasks", "read_tasks", "to_dataset", "write_jsonl", "write_parquet",
]
