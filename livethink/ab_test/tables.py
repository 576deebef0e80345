"""The event log's tables (SQLAlchemy Core), the row of an event with its content digest, and the insert
statements of each dialect."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Boolean, Column, Dialect, Float, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.dialects import postgresql, sqlite

from livethink.ab_test.events import ExposureEvent, OutcomeEvent, ResponseEvent

metadata = MetaData()

events_table = Table(
    "ab_events",
    metadata,
    Column("event_id", String(128), primary_key=True),
    Column("experiment", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("viewer_id", String(256), nullable=False),
    Column("arm", String(64)),
    Column("ts", Float, nullable=False),
    Column("received_at", Float, nullable=False),
    Column("request_id", String(128)),
    Column("bucket", Float),
    Column("hash_version", Integer),
    Column("latency_ms", Float),
    Column("ttft_ms", Float),
    Column("tokens", Integer),
    Column("deadline_met", Boolean),
    Column("correct", Boolean),
    Column("helpful", Boolean),
    Column("status", String(16)),
    Column("outcome_type", String(16)),
    Column("gmv", Float),
    Column("simulated", Boolean, nullable=False),
    Column("digest", String(32), nullable=False),
    # added with the statuses answered/fallback/refused/error (``migrate`` adds them to an older store)
    Column("value", Float),
    Column("first_reply_ms", Float),
    Column("first_sentence_ms", Float),
    Column("forced_end", Boolean),
    Column("cut", Boolean),
    Column("unit_id", String(256)),
    Index("ix_ab_events_experiment_kind_ts", "experiment", "kind", "ts"),
)

experiments_table = Table(
    "ab_experiments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, index=True),
    Column("digest", String(32), nullable=False),
    Column("config", Text, nullable=False),
    Column("registered_at", Float, nullable=False),
)

AnyEvent = ExposureEvent | ResponseEvent | OutcomeEvent
_CONTENT_FIELDS = (
    "experiment", "kind", "viewer_id", "arm", "ts", "request_id", "bucket", "hash_version", "latency_ms",
    "ttft_ms", "tokens", "deadline_met", "correct", "helpful", "status", "outcome_type", "gmv", "simulated",
)  # fmt: skip
_DIGEST_FIELDS = tuple(k for k in _CONTENT_FIELDS if k != "ts")
# fields added later: in the digest only when set, so that an event re-sent from before them stays a duplicate
_ADDED_FIELDS = ("value", "first_reply_ms", "first_sentence_ms", "forced_end", "cut", "unit_id")
_DIGEST_STATUS = {"answered": "ok", "refused": "rejected"}  # the old spelling keeps old digests valid
ADDED_COLUMNS = tuple(c for c in events_table.columns if c.name in _ADDED_FIELDS)
SCHEMA_LOCK_KEY = 0x6C74_6162  # pg_advisory_xact_lock key held while the table is created ("ltab")


@dataclass(frozen=True)
class Ack:
    """Acknowledgement of one event: durably committed now (``stored``) or earlier (``duplicate``), or, while
    the store is down, fsynced to the writer's local spool for replay (``spooled``)."""

    event_id: str
    status: Literal["stored", "duplicate", "conflict", "spooled"]


def normalize_url(url: str | Path) -> str:
    """A plain path means a SQLite file; anything with ``://`` is an SQLAlchemy URL."""
    s = str(url)
    if "://" in s:
        return s
    return f"sqlite:///{Path(s).expanduser().resolve()}"


def event_row(ev: AnyEvent, received_at: float) -> dict[str, Any]:
    """The table row of an event, with the digest of its content (``ts`` left out) that tells a duplicate
    from a conflict."""
    row: dict[str, Any] = dict.fromkeys(_CONTENT_FIELDS + _ADDED_FIELDS)
    row.update(
        event_id=ev.event_id, experiment=ev.experiment, kind=ev.kind, viewer_id=ev.viewer_id, ts=ev.ts,
        simulated=ev.simulated, received_at=received_at,
    )  # fmt: skip
    if isinstance(ev, ExposureEvent):
        row.update(arm=ev.arm, request_id=ev.request_id, bucket=ev.bucket, hash_version=ev.hash_version,
                   unit_id=ev.unit_id)  # fmt: skip
    elif isinstance(ev, ResponseEvent):
        row.update(
            arm=ev.arm, request_id=ev.request_id, latency_ms=ev.latency_ms, ttft_ms=ev.ttft_ms, tokens=ev.tokens,
            deadline_met=ev.deadline_met, correct=ev.correct, helpful=ev.helpful, status=ev.status,
            first_reply_ms=ev.first_reply_ms, first_sentence_ms=ev.first_sentence_ms, forced_end=ev.forced_end,
            cut=ev.cut,
        )  # fmt: skip
    else:
        row.update(outcome_type=ev.type, gmv=ev.gmv, value=ev.value, request_id=ev.request_id)
    # ``ts`` is left out: a retried event (e.g. an outcome timestamped on receipt) is a duplicate, not a conflict
    parts = [_DIGEST_STATUS.get(row[k], row[k]) if k == "status" else row[k] for k in _DIGEST_FIELDS]
    parts += [(k, row[k]) for k in _ADDED_FIELDS if row[k] is not None]
    blob = repr(parts)  # str/int/float/bool/None reprs are stable
    row["digest"] = hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()
    return row


def pg_unnest_sql() -> tuple[str, tuple[str, ...]]:
    """PostgreSQL's batch insert: one ``INSERT ... SELECT FROM unnest(arrays) ON CONFLICT DO NOTHING RETURNING``
    with an array parameter per column: (sql, columns)."""
    pg_types = {String: "varchar", Text: "text", Float: "float8", Integer: "int4", Boolean: "bool"}
    cols = tuple(c.name for c in events_table.columns)
    arrays = ", ".join(f"%s::{pg_types[type(c.type)]}[]" for c in events_table.columns)
    sql = (
        f"INSERT INTO {events_table.name} ({', '.join(cols)}) SELECT * FROM unnest({arrays}) "
        "ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
    )
    return sql, cols


def insert_sql(dialect: Dialect) -> tuple[str, tuple[str, ...], bool]:
    """INSERT ... ON CONFLICT DO NOTHING compiled for ``dialect``: (sql, param keys, positional)."""
    if dialect.name == "sqlite":
        stmt: Any = sqlite.insert(events_table).on_conflict_do_nothing(index_elements=["event_id"])
    elif dialect.name == "postgresql":
        stmt = postgresql.insert(events_table).on_conflict_do_nothing(index_elements=["event_id"])
    else:
        stmt = events_table.insert()
    cols = [c.name for c in events_table.columns]
    compiled = stmt.compile(dialect=dialect, column_keys=cols)
    keys = tuple(compiled.positiontup) if compiled.positional else tuple(cols)
    return compiled.string, keys, bool(compiled.positional)
