"""A/B fixtures: store URLs on SQLite and on the session's PostgreSQL cluster (``pg``, ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from livethink.ab_test.pg_cluster import LocalPostgres


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty event store: a SQLite file, or a new database on the session's PostgreSQL cluster."""
    if request.param == "sqlite":
        return str(tmp_path / "ab.db")
    return request.getfixturevalue("pg_store_url")


@pytest.fixture(scope="session")
def _pg_shared_db(pg: LocalPostgres) -> str:
    return pg.create_database("abtest")


@pytest.fixture
def pg_store_url(pg: LocalPostgres, _pg_shared_db: str) -> str:
    """The session's test database on PostgreSQL, emptied (one database for all: creating one costs ~0.4 s)."""
    pg.reset_tables("abtest", ("ab_events", "ab_experiments"))
    return _pg_shared_db
