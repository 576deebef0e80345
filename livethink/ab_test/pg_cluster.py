"""A throwaway local PostgreSQL cluster (``initdb`` + ``pg_ctl``) on a free loopback port, for tests, benchmarks
and the local replica set (``deploy/replicas.sh``).

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user (``runuser -u postgres --``)
and its data directory is handed to that user. Authentication is ``trust`` on 127.0.0.1 only: never use this for
anything but a local throwaway cluster.

    with LocalPostgres(tmp_dir) as pg:
        url = pg.create_database("ab")          # postgresql+psycopg://postgres@127.0.0.1:PORT/ab
        pg.stop(); pg.start()                  # a database restart (fault injection)
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import psycopg

from livethink.server_process import LOOPBACK, free_port

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
INSTALL_HINT = "install Debian's postgresql package (`make postgres`, or apt-get install postgresql)"


class PostgresUnavailable(RuntimeError):
    """``initdb``/``pg_ctl`` are missing, or the cluster would not start."""


def pg_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl`` (Debian's layout first, then ``PATH``)."""
    for d in PG_BIN_DIRS:
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    raise PostgresUnavailable(f"initdb/pg_ctl not found in {', '.join(PG_BIN_DIRS)} or PATH: {INSTALL_HINT}")


class LocalPostgres:
    """A cluster in ``root/data`` listening on ``127.0.0.1:port`` (sockets in ``root/run``); ``close()`` stops
    it (the files stay in ``root``, which the caller owns)."""

    def __init__(self, root: Path | str, *, port: int | None = None, user: str = "postgres"):
        self.root = Path(root)
        self.data = self.root / "data"
        self.run_dir = self.root / "run"
        self.log = self.root / "postgres.log"
        self.port = port or free_port()
        self.bin = pg_bin_dir()
        self.as_user = user if os.geteuid() == 0 else None
        self.db_user = "postgres"
        self._init()
        self.start()

    # -- process control ---------------------------------------------------------------------------------
    def _cmd(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.as_user, "--", *argv] if self.as_user else list(argv)

    def _run(self, *argv: str, timeout: float = 120) -> None:
        proc = subprocess.run(self._cmd(*argv), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise PostgresUnavailable(f"{' '.join(argv[:2])} failed ({proc.returncode}): {proc.stderr}{tail}")

    def _init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(exist_ok=True)
        if self.as_user:
            pw = pwd.getpwnam(self.as_user)
            for p in (self.root, self.run_dir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                str(self.bin / "initdb"), "-D", str(self.data), "-U", self.db_user, "--auth=trust",
                "--encoding=UTF8", "--locale=C", "--no-sync",
            )  # fmt: skip

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until it accepts connections."""
        opts = (
            f"-p {self.port} -k {self.run_dir} -c listen_addresses={LOOPBACK} -c max_connections=200 "
            "-c shared_buffers=64MB"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", str(int(timeout)), "start", timeout=timeout + 10)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: roll back open transactions, close connections; ``immediate``: crash)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        proc = subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.data), "status"),
                              capture_output=True, text=True)  # fmt: skip
        return proc.returncode == 0

    def close(self, mode: str = "fast") -> None:
        if self.running():
            self.stop(mode)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- databases ---------------------------------------------------------------------------------------
    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://{self.db_user}@{LOOPBACK}:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        return f"host={LOOPBACK} port={self.port} user={self.db_user} dbname={database}"

    def create_database(self, name: str) -> str:
        """Create (or re-create, empty) database ``name``; returns its SQLAlchemy URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"database name: {name!r} must be letters, digits and underscores")
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def reset_tables(self, database: str, tables: tuple[str, ...]) -> None:
        """Drop ``tables`` (if present) so the next store starts from an empty database."""
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")

    def terminate_connections(self, database: str) -> int:
        """Kill every backend connected to ``database`` (a dropped connection, as clients see it)."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid()",
                (database,),
            ).fetchall()
        return len(rows)
