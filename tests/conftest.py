"""Shared fixtures and markers. Tests run offline (no model hub) on CPU.

Markers (``pyproject.toml``): ``slow`` (more than ~20 s), ``vllm`` (starts a vLLM engine), ``postgres`` (uses the
session's PostgreSQL cluster), ``browser`` (drives headless Chromium), ``timing`` (asserts wall-clock behaviour).
``postgres`` is added here to every test that uses the cluster, so ``-m "not postgres"`` works. The ``vllm`` /
``browser`` tests and the ``slow`` ``timing`` ones share one ``xdist_group``; the other ``timing`` tests run
before the rest lower their priority (``pytest_runtest_setup``).

The expensive things are built once per session and shared: the LiveShop draw, the small and the serving
students (``tests.support.students``) and the PostgreSQL cluster (``pg``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from livethink.ab_test.pg_cluster import LocalPostgres, PostgresUnavailable  # noqa: E402
from livethink.data.liveshop.generate import generate  # noqa: E402
from tests.support import students  # noqa: E402

POSTGRES_FIXTURES = {"pg", "pg_store_url"}


ENGINE_MARKERS = ("vllm", "browser")  # an engine, a server or a browser: CPU and memory of their own
ENGINES_GROUP = "engines"
TIMING_GROUP = "timing"
LIGHT_NICE = 19  # the light tests take only the CPU the engines group leaves
_lowered = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist names the group in each test id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``postgres`` on every test that uses the cluster (a ``store_url`` test on its PostgreSQL parameter), every
    ``vllm`` / ``browser`` test and every ``slow`` ``timing`` test in the ``engines`` ``xdist_group``, and the
    other ``timing`` tests in the ``timing`` group (a ``slow`` training test joins neither: it runs beside the
    engines at nice 19).

    Under ``pytest -n 2 --dist loadgroup`` (``make test``) the engines group runs on one worker, one test at a time
    and first, while the other worker takes the rest: two engine-starting tests never compete for the CPU (their
    deadlines and their engines' memory assume they have the machine to themselves).
    """
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())) or params.get("store_url") == "postgresql":
            item.add_marker(pytest.mark.postgres)
        timing = item.get_closest_marker("timing") is not None
        slow_timing = timing and item.get_closest_marker("slow") is not None
        if slow_timing or any(item.get_closest_marker(name) for name in ENGINE_MARKERS):
            item.add_marker(pytest.mark.xdist_group(ENGINES_GROUP))
        elif timing:
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a pytest-xdist worker, at its first test in neither group: lower the worker's CPU priority to nice 19.

    ``--dist loadgroup`` hands each worker one of the two groups (the largest units of work) first. The worker
    with the ``timing`` group runs it at normal priority, then the light tests at nice 19 (with their
    subprocesses): they take the CPU the engines group leaves, and the group runs nearly as fast as alone
    (~80 s less on 2 cores). Nothing raises the priority again, so no ``timing`` or engines test runs after."""
    global _lowered
    if _lowered or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if not any({ENGINES_GROUP, TIMING_GROUP} & set(m.args) for m in item.iter_markers("xdist_group")):
        _lowered = True
        os.nice(LIGHT_NICE)


@pytest.fixture(autouse=True)
def _holdout_log_elsewhere(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test appends to the tracked ``benchmarks/results/holdout_log.jsonl``: the log goes to a temp file."""
    monkeypatch.setenv("LIVETHINK_HOLDOUT_LOG", str(tmp_path_factory.mktemp("holdout-log") / "holdout_log.jsonl"))


@pytest.fixture(scope="session", autouse=True)
def _shared_students_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where the session builds its shared students, on first use (a pytest temp dir: no cleanup of our own)."""
    students.use_session_dir(tmp_path_factory.mktemp("shared-students"))


@pytest.fixture(scope="session")
def liveshop_small():
    """A small deterministic LiveShop draw shared by tests."""
    return generate(seed=7, n_train=300, n_validation=30, n_test=60)


@pytest.fixture(scope="session")
def small_student_dir(tmp_path_factory: pytest.TempPathFactory, liveshop_small) -> Path:
    """An untrained 1-layer MoE student on ``liveshop_small``'s tokenizer, built once (read it, don't write to it)."""
    return students.small_student(tmp_path_factory.mktemp("small-student"), liveshop_small)


@pytest.fixture(scope="session")
def tiny_student_dir() -> Path:
    """The session's untrained tiny serving student (real tokenizer + Qwen3-MoE weights), built once."""
    return students.tiny_student_dir()


@pytest.fixture(scope="session")
def liveshop_test_tasks() -> list:
    """The LiveShop test tasks that go with ``tiny_student_dir``."""
    return students.liveshop_test_tasks()


@pytest.fixture(scope="session")
def vllm_moe_student(tmp_path_factory: pytest.TempPathFactory, liveshop_small) -> tuple[Path, Path]:
    """``(data root, student dir)``: a 2-layer tiny MoE whose experts matter (for the stage-2 vLLM tests)."""
    return students.vllm_moe_student(tmp_path_factory.mktemp("grpo_vllm"), liveshop_small)


@pytest.fixture(scope="session")
def pg() -> Iterator[LocalPostgres]:
    """A throwaway PostgreSQL cluster for the session, on a free loopback port (its files in a fresh /tmp dir the
    ``postgres`` user can reach).

    PostgreSQL is part of the suite (``make test`` installs Debian's ``postgresql`` first): if it cannot start, the
    tests that use it fail with the reason, they are never skipped.
    """
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
