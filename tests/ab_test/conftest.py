"""A/B fixtures: one throwaway PostgreSQL cluster per test session, and store URLs on SQLite and on it.

PostgreSQL is part of the suite (``make test`` installs Debian's ``postgresql`` first): if it cannot start, the
tests that use it fail with the reason, they are never skipped.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from livethink.ab_test.pg_cluster import LocalPostgres, PostgresUnavailable


@pytest.fixture(scope="session")
def pg() -> Iterator[LocalPostgres]:
    """A cluster on a free loopback port (its files in a fresh /tmp dir the ``postgres`` user can reach)."""
    root = Path(tempfile.mkdtemp(prefix="livethink-pg-"))
    root.chmod(0o755)
    try:
        cluster = LocalPostgres(root / "cluster")
    except PostgresUnavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL is required by the A/B store tests: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.close(mode="immediate")  # thrown away: no shutdown checkpoint
        shutil.rmtree(root, ignore_errors=True)


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
