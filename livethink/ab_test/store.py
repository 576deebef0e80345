"""Durable, idempotent event log on SQLite (WAL, ``synchronous=FULL``) or PostgreSQL, via SQLAlchemy Core.

``EventStore.append`` validates a whole batch first (nothing is written if any event is malformed, names an
unregistered experiment or an unknown arm), then writes it in one transaction and returns one ``Ack`` per
event only after the commit returned. Event ids are primary keys: re-sending an event is a no-op acknowledged
as ``duplicate`` (even with another ``ts``: retries keep the first time); re-using an id for different
content is a conflict (raised, or reported per event).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event, func, inspect, select, text
from sqlalchemy.exc import DBAPIError

from livethink.ab_test.errors import ABError, EventConflictError, EventValidationError, UnknownExperimentError
from livethink.ab_test.events import OutcomeEvent, check_declared, parse_event
from livethink.ab_test.experiment import Experiment, parse_experiment
from livethink.ab_test.tables import (
    ADDED_COLUMNS,
    SCHEMA_LOCK_KEY,
    Ack,
    AnyEvent,
    event_row,
    events_table,
    experiments_table,
    insert_sql,
    metadata,
    normalize_url,
    pg_unnest_sql,
)

__all__ = ["Ack", "AnyEvent", "EventStore", "normalize_url"]

_IN_CHUNK = 500


def enable_wal(cursor: Any, timeout_s: float, poll_s: float = 0.05) -> None:
    """``PRAGMA journal_mode=WAL`` on a new SQLite connection, retried for up to ``timeout_s``.

    Switching a rollback-journal database to WAL needs an exclusive lock, and SQLite answers "database is locked"
    at once, without its busy handler, while another connection holds a write lock in rollback mode (replicas
    opening one new store together). The switch is retried until the lock is gone; a lock held past
    ``timeout_s`` raises as before."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= end:
                raise
            time.sleep(poll_s)


def _declared(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A stored config's declared outcome types: name → declaration."""
    return {o["name"]: o for o in cfg.get("outcomes") or ()}


def migrate(conn: Any) -> list[str]:
    """Bring an older store's ``ab_events`` up to this schema: add the columns it lacks (all nullable, so old
    rows read as "not recorded"); returns their names. Idempotent; runs under the schema lock on PostgreSQL."""
    have = {c["name"] for c in inspect(conn).get_columns(events_table.name)}
    added = []
    for col in ADDED_COLUMNS:
        if col.name not in have:
            ddl = col.type.compile(dialect=conn.dialect)
            conn.execute(text(f"ALTER TABLE {events_table.name} ADD COLUMN {col.name} {ddl}"))
            added.append(col.name)
    return added


class EventStore:
    """The A/B event log. Thread-safe; one instance per process is enough (writes are serialised)."""

    def __init__(
        self,
        url: str | Path,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout_s: float = 30.0,
        create: bool = True,
    ):
        self.url = normalize_url(url)
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        if self.dialect == "sqlite":
            path = self.url.removeprefix("sqlite:///")
            if path and path != ":memory:":
                if not create and not Path(path).exists():
                    raise ABError(f"db: {path} does not exist")
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = self._sqlite_engine("BEGIN IMMEDIATE", synchronous, busy_timeout_s)
            self.read_engine = self._sqlite_engine("BEGIN", synchronous, busy_timeout_s)
        else:
            # pre-ping: a connection dropped by a server restart is replaced at checkout, not failed on use
            connect_args = {"connect_timeout": 5} if self.dialect == "postgresql" else {}
            self.engine = create_engine(self.url, pool_pre_ping=True, connect_args=connect_args)
            self.read_engine = self.engine
            if self.dialect == "postgresql":
                # batch writes: one autocommit statement each, no pre-ping round trip; a dropped connection is
                # retried once instead (the insert is idempotent)
                self._write_engine = create_engine(
                    self.url, connect_args=connect_args, isolation_level="AUTOCOMMIT"
                )
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":  # replicas starting together: one creates the table, the rest wait
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            metadata.create_all(conn)
            migrate(conn)
        self._lock = threading.Lock()
        self._arms: dict[str, set[str]] = {}
        self._outcomes: dict[str, dict[str, dict[str, Any]]] = {}  # experiment -> declared outcome types
        self._refresh_registry()

    def _sqlite_engine(self, begin: str, synchronous: str, busy_timeout_s: float) -> Engine:
        engine = create_engine(self.url, connect_args={"timeout": busy_timeout_s, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            enable_wal(cur, busy_timeout_s)
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql(begin)

        return engine

    def close(self) -> None:
        if "_write_engine" in self.__dict__:
            self._write_engine.dispose()
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- experiments ------------------------------------------------------------------------------------
    def register_experiment(self, experiment: Experiment, *, effective_at: float | None = None) -> bool:
        """Record this config version (no-op if it is already the latest); returns True when a row was added.
        ``effective_at`` (Unix s, default now) is when the version took effect: a version with other weights
        starts a new phase of the analysis there (pass it to backfill a history)."""
        digest = experiment.digest()
        with self._lock, self.engine.begin() as conn:
            latest = conn.execute(
                select(experiments_table.c.digest)
                .where(experiments_table.c.name == experiment.name)
                .order_by(experiments_table.c.id.desc())
                .limit(1)
            ).scalar()
            added = latest != digest
            if added:
                conn.execute(
                    experiments_table.insert().values(
                        name=experiment.name,
                        digest=digest,
                        config=json.dumps(experiment.to_dict()),
                        registered_at=time.time() if effective_at is None else effective_at,
                    )  # fmt: skip
                )
            self._arms.setdefault(experiment.name, set()).update(experiment.arm_names)
            self._outcomes.setdefault(experiment.name, {}).update(_declared(experiment.to_dict()))
        return added

    def _refresh_registry(self) -> None:
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(experiments_table.c.name, experiments_table.c.config).order_by(experiments_table.c.id)
            ).all()
        arms: dict[str, set[str]] = {}
        outcomes: dict[str, dict[str, dict[str, Any]]] = {}
        for name, config in rows:
            cfg = json.loads(config)
            arms.setdefault(name, set()).update(a["name"] for a in cfg["arms"])
            outcomes.setdefault(name, {}).update(_declared(cfg))
        self._arms, self._outcomes = arms, outcomes

    def experiment_names(self) -> list[str]:
        self._refresh_registry()
        return sorted(self._arms)

    def experiment(self, name: str) -> Experiment:
        """Latest registered config of ``name``."""
        return self.experiment_history(name)[-1]

    def experiment_history(self, name: str) -> list[Experiment]:
        """All registered versions of ``name``, oldest first; ``UnknownExperimentError`` if none."""
        return [e for _, e in self.experiment_versions(name)]

    def experiment_versions(self, name: str) -> list[tuple[float, Experiment]]:
        """(effective time, config) of every registered version of ``name``, oldest first."""
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(experiments_table.c.registered_at, experiments_table.c.config)
                .where(experiments_table.c.name == name)
                .order_by(experiments_table.c.id)
            ).all()
        if not rows:
            known = self.experiment_names()
            raise UnknownExperimentError(
                f"experiment: {name!r} is not registered in {self._safe_url()} (known: {known})"
            )
        out = []
        for at, raw in rows:
            cfg = json.loads(raw)
            # validated when registered; its variants are known by definition
            variants = {a["variant"] for a in cfg.get("arms", []) if a.get("variant")}
            exp = parse_experiment(cfg, known_variants=variants, where=f"stored experiment {name!r}")
            out.append((float(at), exp))
        return out

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    # -- writing ----------------------------------------------------------------------------------------
    def validate(self, events: Iterable[AnyEvent | dict]) -> list[AnyEvent]:
        """Parse and check events against the registered experiments; raise naming ``events[i].field``."""
        parsed: list[AnyEvent] = []
        for i, raw in enumerate(events):
            try:
                ev = parse_event(raw)
            except EventValidationError as exc:
                raise EventValidationError(f"events[{i}].{exc}") from None
            arms = self._arms.get(ev.experiment)
            if arms is None:
                self._refresh_registry()
                arms = self._arms.get(ev.experiment)
                if arms is None:
                    raise UnknownExperimentError(
                        f"events[{i}].experiment: {ev.experiment!r} is not registered (known: {sorted(self._arms)})"
                    )
            arm = getattr(ev, "arm", None)
            if arm is not None and arm not in arms:
                raise EventValidationError(
                    f"events[{i}].arm: unknown arm {arm!r} for experiment {ev.experiment!r} (arms: {sorted(arms)})"
                )
            if isinstance(ev, OutcomeEvent):
                try:
                    check_declared(ev, self._outcomes.get(ev.experiment, {}), ev.experiment)
                except EventValidationError as exc:
                    raise EventValidationError(f"events[{i}].{exc}") from None
            parsed.append(ev)
        return parsed

    def append(
        self, events: Sequence[AnyEvent | dict], *, on_conflict: Literal["raise", "report"] = "raise"
    ) -> list[Ack]:
        """Durably write a batch; returns acks in input order after the commit.

        ``on_conflict="raise"``: an id re-used with different content aborts the whole batch
        (``EventConflictError``). ``"report"``: other events are written and that one is acked ``conflict``.
        """
        parsed = self.validate(events)
        if not parsed:
            return []
        now = time.time()
        rows: dict[str, dict[str, Any]] = {}
        status: dict[str, str] = {}
        for ev in parsed:
            row = event_row(ev, now)
            seen = rows.get(ev.event_id)
            if seen is None:
                rows[ev.event_id] = row
            elif seen["digest"] != row["digest"]:
                status[ev.event_id] = "conflict"
        if self.dialect == "postgresql":
            return self._append_postgres(parsed, rows, status, on_conflict)
        ids = list(rows)
        with self._lock, self.engine.begin() as conn:
            existing: dict[str, str] = {}
            for k in range(0, len(ids), _IN_CHUNK):
                chunk = ids[k : k + _IN_CHUNK]
                q = select(events_table.c.event_id, events_table.c.digest).where(
                    events_table.c.event_id.in_(chunk)
                )
                existing.update(conn.execute(q).tuples().all())
            for eid, digest in existing.items():
                if status.get(eid) != "conflict":
                    status[eid] = "duplicate" if digest == rows[eid]["digest"] else "conflict"
            conflicts = [eid for eid, s in status.items() if s == "conflict"]
            if conflicts and on_conflict == "raise":
                raise EventConflictError(conflicts)  # rolls back: nothing written
            new_rows = [r for eid, r in rows.items() if eid not in status]
            if new_rows:
                sql, keys, positional = self._insert_sql
                params = [tuple(r[k] for k in keys) if positional else r for r in new_rows]
                conn.exec_driver_sql(sql, params)  # executemany; skips per-row type processing
        return [Ack(ev.event_id, status.get(ev.event_id, "stored")) for ev in parsed]  # type: ignore[arg-type]

    def _append_postgres(
        self,
        parsed: list[AnyEvent],
        rows: dict[str, dict[str, Any]],
        status: dict[str, str],
        on_conflict: str,
    ) -> list[Ack]:
        """PostgreSQL: insert first (one ``INSERT ... SELECT FROM unnest(arrays) ON CONFLICT DO NOTHING RETURNING``
        per 5,000 rows: a round trip per batch, not per row), then classify only the ids it skipped."""
        if on_conflict == "raise" and "conflict" in status.values():
            raise EventConflictError([eid for eid, s in status.items() if s == "conflict"])
        if on_conflict == "report":  # each INSERT commits by itself: nothing to roll back
            for attempt in range(2):
                try:
                    with self._lock, self._write_engine.connect() as conn:
                        self._insert_and_classify(conn, rows, status)
                    break
                except DBAPIError as exc:
                    if attempt or not exc.connection_invalidated:
                        raise
            return [Ack(ev.event_id, status.get(ev.event_id, "stored")) for ev in parsed]  # type: ignore[arg-type]
        with self._lock, self.engine.begin() as conn:
            self._insert_and_classify(conn, rows, status)
            conflicts = [eid for eid, s in status.items() if s == "conflict"]
            if conflicts:
                raise EventConflictError(conflicts)  # rolls back: nothing written
        return [Ack(ev.event_id, status.get(ev.event_id, "stored")) for ev in parsed]  # type: ignore[arg-type]

    def _insert_and_classify(
        self, conn: Any, rows: dict[str, dict[str, Any]], status: dict[str, str]
    ) -> None:
        cand = [r for eid, r in rows.items() if eid not in status]
        sql, cols = self._pg_unnest_sql
        inserted: set[str] = set()
        for k in range(0, len(cand), 5000):
            part = cand[k : k + 5000]
            res = conn.exec_driver_sql(sql, tuple([r[c] for r in part] for c in cols))
            inserted.update(x[0] for x in res)
        skipped = [r["event_id"] for r in cand if r["event_id"] not in inserted]
        for k in range(0, len(skipped), _IN_CHUNK):
            q = select(events_table.c.event_id, events_table.c.digest).where(
                events_table.c.event_id.in_(skipped[k : k + _IN_CHUNK])
            )
            for eid, digest in conn.execute(q).tuples():
                status[eid] = "duplicate" if digest == rows[eid]["digest"] else "conflict"

    @functools.cached_property
    def _pg_unnest_sql(self) -> tuple[str, tuple[str, ...]]:
        return pg_unnest_sql()

    @functools.cached_property
    def _insert_sql(self) -> tuple[str, tuple[str, ...], bool]:
        return insert_sql(self.engine.dialect)

    # -- reading ----------------------------------------------------------------------------------------
    def fetch(self, experiment: str, kind: str, columns: Sequence[str]) -> list[tuple]:
        """Rows of one event kind of one experiment, ordered by event time."""
        cols = [events_table.c[c] for c in columns]
        q = (
            select(*cols)
            .where(events_table.c.experiment == experiment, events_table.c.kind == kind)
            .order_by(events_table.c.ts)
        )
        with self.read_engine.connect() as conn:
            return [tuple(r) for r in conn.execute(q).all()]

    def count(self, experiment: str | None = None) -> int:
        q = select(func.count()).select_from(events_table)
        if experiment is not None:
            q = q.where(events_table.c.experiment == experiment)
        with self.read_engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def present_ids(self, event_ids: Iterable[str]) -> set[str]:
        ids = list(event_ids)
        found: set[str] = set()
        with self.read_engine.connect() as conn:
            for k in range(0, len(ids), _IN_CHUNK):
                q = select(events_table.c.event_id).where(events_table.c.event_id.in_(ids[k : k + _IN_CHUNK]))
                found.update(conn.execute(q).scalars().all())
        return found
