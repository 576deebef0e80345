"""The live summary computed in a worker process (``livethink.ab_test.summary_worker``) over a real SQLite store:
the same summary as in-process, one computation shared by concurrent callers and cached, failures that name the
experiment, a dead worker replaced, a busy one stopped by ``close()``, a worker that outlives a killed server exits,
the in-process path of an in-memory store."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from livethink.ab_test.errors import UnknownExperimentError
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.hooks import ExperimentHooks, compute_summary, open_hooks
from livethink.ab_test.simulate import simulate_offline
from livethink.ab_test.store import EventStore
from livethink.ab_test.summary_worker import SummaryError, SummaryWorker, opens_by_url

pytestmark = [pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
EXP = parse_experiment(
    {
        "name": "sw1",
        "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}],
        "min_viewers_per_arm": 2,
    }
)
WAIT_S = 120  # the first summary starts the worker (a fresh interpreter importing the analysis stack)

_calls = 0  # computations of ``probe`` in the process that runs it (the worker's own copy)


def probe(store: EventStore, name: str) -> dict[str, Any]:
    """A compute function for the worker whose behaviour the experiment name picks: ``slow-*`` sleeps 0.5 s
    and counts, ``boom`` raises, ``die`` kills the worker, ``stuck`` sleeps 60 s, ``pid`` tells the worker's pid;
    any other name is the real summary."""
    global _calls
    if name.startswith("slow"):
        _calls += 1
        time.sleep(0.5)
        return {"calls": _calls, "pid": os.getpid()}
    if name == "boom":
        raise RuntimeError("boom in the analysis")
    if name == "die":
        os._exit(3)
    if name == "stuck":
        time.sleep(60)
    if name == "pid":
        return {"pid": os.getpid()}
    return compute_summary(store, name)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {**a, "generated_at": None} == {**b, "generated_at": None}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store with a few hundred events of ``sw1`` (the offline simulator's)."""
    path = tmp_path_factory.mktemp("sw") / "ab.db"
    with EventStore(path) as store:
        info = simulate_offline(EXP, store, viewers=200, seed=5, end_ts=time.time() - 600)
        assert 300 <= info["events_stored"] <= 2000
    return path


@pytest.fixture(scope="module")
def worker(db: Path):
    store = EventStore(db)
    w = SummaryWorker(store, probe)
    yield w
    w.close()
    store.close()


def test_worker_summary_equals_the_in_process_one(db: Path, worker: SummaryWorker) -> None:
    assert not worker.in_process
    got = worker.submit("sw1", 0).result(WAIT_S)
    with EventStore(db) as store:
        assert _same(got, compute_summary(store, "sw1"))
    assert got["experiment"] == "sw1" and got["viewers"] > 0 and set(got["arms"]) == {"A", "B"}
    assert worker.submit("pid", 0).result(WAIT_S)["pid"] != os.getpid()  # computed in another process


def test_worker_opens_a_postgresql_store_by_its_url(pg_store_url: str) -> None:
    with EventStore(pg_store_url) as store:
        simulate_offline(EXP, store, viewers=100, seed=6, end_ts=time.time() - 600)
        w = SummaryWorker(store, compute_summary)
        try:
            assert not w.in_process and _same(w.submit("sw1", 0).result(WAIT_S), compute_summary(store, "sw1"))
        finally:
            w.close()


def test_hooks_summary_runs_in_the_worker(db: Path) -> None:
    hooks = open_hooks([EXP], db)
    try:
        h = hooks["sw1"]
        assert isinstance(h, ExperimentHooks) and h.summaries is hooks.summaries
        sync = h.summary()
        # cached for max_age_s: the same summary (an age longer than a slow machine's first computation)
        assert asyncio.run(h.asummary(max_age_s=600)) is sync
        with EventStore(db) as store:
            assert _same(sync, compute_summary(store, "sw1"))
        # the full view (``?view=full``): the whole analysis, cached apart from the compact one
        full = h.summary(max_age_s=600, view="full")
        assert {"comparisons", "timeseries", "guardrails"} <= set(full) and "tests" not in full
        assert h.summary(max_age_s=600) is sync and h.summary(max_age_s=600, view="full") is full
        with pytest.raises(ValueError, match=r"view: unknown summary view 'everything' \(known: \['compact', 'full'\]\)"):
            h.summary(view="everything")  # type: ignore[arg-type]
    finally:
        hooks.close()
    with pytest.raises(SummaryError, match="closed"):
        h.summary()


def test_concurrent_callers_share_one_computation_then_the_cache(worker: SummaryWorker) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: worker.submit("slow-a", 5).result(WAIT_S), range(8)))
    assert all(r is results[0] for r in results)
    first = results[0]["calls"]
    assert worker.submit("slow-a", 5).result(WAIT_S) is results[0]  # younger than max_age_s: cached

    async def many() -> list[dict[str, Any]]:
        return await asyncio.gather(*(asyncio.wrap_future(worker.submit("slow-a", 0)) for _ in range(5)))

    again = asyncio.run(many())  # max_age_s 0: one new computation, shared by the five
    assert all(r is again[0] for r in again) and again[0]["calls"] == first + 1


def test_a_caller_that_gives_up_cancels_nothing_for_the_others(worker: SummaryWorker) -> None:
    a, b = worker.submit("slow-b", 0), worker.submit("slow-b", 0)
    assert a.cancel()
    assert b.result(WAIT_S)["calls"] >= 1 and a.cancelled()


def test_errors_name_the_experiment(worker: SummaryWorker) -> None:
    with pytest.raises(SummaryError, match=r"summary of 'boom' failed in the summary worker: RuntimeError: boom"):
        worker.submit("boom", 0).result(WAIT_S)
    with pytest.raises(UnknownExperimentError, match="'nope' is not registered"):  # the server's 404, as before
        worker.submit("nope", 0).result(WAIT_S)


def test_a_dead_worker_is_replaced(worker: SummaryWorker) -> None:
    with pytest.raises(SummaryError, match=r"summary worker failed computing 'die': BrokenProcessPool"):
        worker.submit("die", 0).result(WAIT_S)
    assert worker.submit("pid", 0).result(WAIT_S)["pid"] != os.getpid()


def test_close_stops_a_busy_worker(db: Path) -> None:
    store = EventStore(db)
    w = SummaryWorker(store, probe, close_timeout_s=0.5)
    w.submit("pid", 0).result(WAIT_S)  # started
    stuck = w.submit("stuck", 0)
    time.sleep(0.5)
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 10
    with pytest.raises(SummaryError):
        stuck.result(10)
    store.close()


def test_the_worker_exits_with_a_killed_parent(db: Path) -> None:
    code = (
        "import os\n"
        "from livethink.ab_test.store import EventStore\n"
        "from livethink.ab_test.summary_worker import SummaryWorker\n"
        "from tests.ab_test.test_summary_worker import probe\n"
        f"w = SummaryWorker(EventStore({str(db)!r}), probe)\n"
        "print(w.submit('pid', 0).result(120)['pid'], flush=True)\n"
        "os._exit(0)\n"  # gone without close(), as after kill -9
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    pid = int(out.stdout.strip())

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + 20
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone()


def test_in_memory_store_is_summarised_in_process(caplog: pytest.LogCaptureFixture) -> None:
    assert not opens_by_url("sqlite://") and not opens_by_url("sqlite:///:memory:")
    assert opens_by_url("sqlite:////tmp/ab.db") and opens_by_url("postgresql+psycopg://u@h/db")
    store: Any = SimpleNamespace(url="sqlite://")
    w = SummaryWorker(store, probe)
    try:
        with caplog.at_level(logging.INFO, logger="livethink.ab_test.summary_worker"):
            assert w.in_process and w.submit("pid", 0).result(WAIT_S)["pid"] == os.getpid()
            w.submit("pid", 0).result(WAIT_S)
        assert sum("computed in this process" in r.message for r in caplog.records) == 1
    finally:
        w.close()
