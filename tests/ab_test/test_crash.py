"""kill -9 the writer mid-load: every event it acknowledged must be in the database afterwards (SQLite and\nPostgreSQL)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from livethink.ab_test.store import EventStore

WRITER = r"""
import sys, threading, time
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.store import EventStore
from livethink.ab_test.writer import BatchWriter

store = EventStore(sys.argv[1])
store.register_experiment(parse_experiment(
    {"name": "crash", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}]}))
writer = BatchWriter(store, max_batch=500, max_queue=5000)
out_lock = threading.Lock()

def acked(fut):
    ack = fut.result()  # resolved only after the commit returned
    with out_lock:
        sys.stdout.write(ack.event_id + "\n")
        sys.stdout.flush()

print("READY", flush=True)
i = 0
while True:  # submit without waiting, so batches are always in flight when the kill lands
    ev = {"kind": "outcome", "event_id": f"ev{i}", "experiment": "crash", "viewer_id": f"v{i % 997}",
          "type": "order", "gmv": 1.0 + i % 7, "ts": time.time()}
    writer.submit(ev).add_done_callback(acked)
    i += 1
"""


def test_kill_9_loses_no_acknowledged_event(tmp_path: Path, store_url: str) -> None:
    db = store_url
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    acked: list[str] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 30
        while len(acked) < 4000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(line.strip())
        os.kill(proc.pid, signal.SIGKILL)  # mid-load: the producer never stops submitting
        rest, _ = proc.communicate(timeout=30)
        acked += [x for x in rest.split("\n") if x.startswith("ev")]  # printed before death: also acked
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert len(acked) >= 1000, f"writer acknowledged only {len(acked)} events"

    if "://" not in db:
        with sqlite3.connect(db) as raw:  # the file survived intact
            assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = EventStore(db)
    try:
        present = store.present_ids(acked)
        missing = set(acked) - present
        assert not missing, f"{len(missing)} acknowledged events lost, e.g. {sorted(missing)[:5]}"
        assert store.count("crash") >= len(set(acked))
        print(f"acked {len(set(acked))}, stored {store.count('crash')}")
    finally:
        store.close()
