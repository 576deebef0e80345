"""A bounded on-disk write-ahead spool of A/B events, one directory per process.

Every event a ``BatchWriter`` accepts is first appended here (one JSON line, ``write(2)`` to an ``O_APPEND``
file), then committed to the store by the writer thread. Two faults are covered:

- **The process dies** (``kill -9``): what was written reached the kernel, so it survives the process. The next
  process that opens a spool under the same root adopts the dead one's directory (its lock is free) and replays
  it into the store.
- **The store is down** (a PostgreSQL restart, a dropped connection): the writer fsyncs the spool, acknowledges
  events as ``spooled`` and replays them once the store answers again.

Replay is idempotent: event ids are primary keys and the store inserts with ``ON CONFLICT DO NOTHING``, so an
event replayed twice is stored once. The spool is bounded (``max_bytes``); once full, new events are refused
with ``SpoolFullError`` (counted in ``rejected``), never dropped silently. A segment is deleted once every event
in it is known to be committed. A line cut short by a kill is ignored: its event was never acknowledged.
Layout: ``root/<host>-<pid>/LOCK`` (``flock``-ed while the owner lives) and ``seg-<first seq>.jsonl`` files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livethink.ab_test.errors import SpoolFullError

log = logging.getLogger(__name__)
SEGMENT_GLOB = "seg-*.jsonl"


@dataclass
class Segment:
    path: Path
    last_seq: int  # the last sequence number written to it (-1: unknown, from an adopted directory)
    nbytes: int


def _lock(directory: Path) -> int | None:
    """An exclusive ``flock`` on ``directory/LOCK``; the fd, or None when another process holds it."""
    fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class Spool:
    """The spool of this process under ``root``; see the module docstring."""

    def __init__(self, root: str | Path, *, max_bytes: int = 256 << 20, segment_bytes: int = 4 << 20):
        if max_bytes <= 0:
            raise ValueError(f"spool max_bytes: must be > 0, got {max_bytes}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        name = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns() % 10**9}"
        staging = self.root / f".{name}"  # locked before it gets a name other processes look at
        staging.mkdir()
        fd = _lock(staging)
        if fd is None:  # pragma: no cover - a fresh, unique directory
            raise RuntimeError(f"spool: cannot lock {staging}")
        self.dir = staging.rename(self.root / name)
        self._lock_fd = fd
        self._mutex = threading.Lock()
        self.seq = 0
        self.rejected = 0
        self.refusing = False  # set when an event is refused, cleared once the spool has drained below half
        self.closed: list[Segment] = []  # oldest first
        self._adopted: list[tuple[Path, int]] = []  # (dead process's directory, its lock fd)
        self._adopt_orphans()
        self._open_segment()

    # -- files -------------------------------------------------------------------------------------------
    def _adopt_orphans(self) -> None:
        for d in sorted(p for p in self.root.iterdir() if p.is_dir() and p != self.dir and p.name[0] != "."):
            fd = _lock(d) if (d / "LOCK").exists() else None
            if fd is None:
                continue  # alive (or not a spool directory)
            segs = sorted(d.glob(SEGMENT_GLOB))
            self.closed += [Segment(s, -1, s.stat().st_size) for s in segs]
            self._adopted.append((d, fd))
            if segs:
                log.warning("A/B spool: adopting %d segment(s) of a dead process from %s", len(segs), d)

    def _open_segment(self) -> None:
        self.active = Segment(self.dir / f"seg-{self.seq:012d}.jsonl", self.seq - 1, 0)
        self._fd = os.open(self.active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @property
    def nbytes(self) -> int:
        return self.active.nbytes + sum(s.nbytes for s in self.closed)

    # -- writing -----------------------------------------------------------------------------------------
    def append(self, lines: list[str]) -> int:
        """Append one JSON line per event (``write(2)``, not fsynced); returns the last event's sequence number.
        ``SpoolFullError`` (nothing written) when it would exceed ``max_bytes``."""
        data = "".join(lines).encode()
        with self._mutex:
            if self.nbytes + len(data) > self.max_bytes:
                self.rejected += len(lines)
                self.refusing = True
                raise SpoolFullError(
                    f"A/B spool full ({self.nbytes:,} of {self.max_bytes:,} bytes in {self.root}): the event store "
                    "has not taken events for a while; the event was not recorded"
                )
            os.write(self._fd, data)
            self.seq += len(lines)
            self.active.nbytes += len(data)
            self.active.last_seq = self.seq - 1
            return self.seq - 1

    def sync(self) -> None:
        """fsync what was written (the writer does this before acknowledging events as ``spooled``)."""
        with self._mutex:
            os.fsync(self._fd)

    def rotate(self) -> None:
        """Close the active segment (if it holds anything) and start a new one."""
        with self._mutex:
            if self.active.nbytes == 0:
                return
            os.fsync(self._fd)
            os.close(self._fd)
            self.closed.append(self.active)
            self._open_segment()

    def should_rotate(self) -> bool:
        return self.active.nbytes >= self.segment_bytes

    def release(self, committed_seq: int) -> None:
        """Delete closed segments whose events are all committed (sequence numbers up to ``committed_seq``)."""
        with self._mutex:
            keep = []
            for s in self.closed:
                if 0 <= s.last_seq <= committed_seq:
                    s.path.unlink(missing_ok=True)
                else:
                    keep.append(s)
            self.closed = keep
            self._drop_empty_adopted()

    # -- replay ------------------------------------------------------------------------------------------
    def backlog(self) -> list[Segment]:
        """Closed segments not yet known to be committed (oldest first)."""
        with self._mutex:
            return list(self.closed)

    @staticmethod
    def read(segment: Segment) -> list[dict[str, Any]]:
        """The events of a segment; a torn last line (the writer died mid-write) is skipped."""
        out = []
        with segment.path.open("rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    log.warning("A/B spool: skipping a torn line at the end of %s", segment.path)
                    break
                out.append(json.loads(raw))
        return out

    def remove(self, segment: Segment) -> None:
        with self._mutex:
            segment.path.unlink(missing_ok=True)
            self.closed = [s for s in self.closed if s.path != segment.path]
            self._drop_empty_adopted()

    def _drop_empty_adopted(self) -> None:
        if self.refusing and self.nbytes < self.max_bytes // 2:
            self.refusing = False
        still = []
        for d, fd in self._adopted:
            if any(s.path.parent == d for s in self.closed):
                still.append((d, fd))
                continue
            shutil.rmtree(d, ignore_errors=True)
            os.close(fd)
        self._adopted = still

    # -- state -------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        with self._mutex:
            nbytes = self.nbytes
            return {
                "bytes": nbytes,
                "max_bytes": self.max_bytes,
                "segments": len(self.closed) + (1 if self.active.nbytes else 0),
                "full": self.refusing,
                "rejected_events": self.rejected,
            }

    def close(self) -> None:
        """Close the files; the directory is removed only when nothing in it awaits replay."""
        with self._mutex:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            if self.active.nbytes == 0:
                self.active.path.unlink(missing_ok=True)
            else:
                self.closed.append(self.active)
            pending = [s for s in self.closed if s.path.parent == self.dir]
            if not pending:
                shutil.rmtree(self.dir, ignore_errors=True)
            os.close(self._lock_fd)
            for _, fd in self._adopted:
                os.close(fd)
            self._adopted = []
