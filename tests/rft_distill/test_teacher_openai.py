"""OpenAI-compatible teacher against a real local HTTP server (uvicorn on 127.0.0.1) that injects faults."""

from __future__ import annotations

import json
import socket
import time
from collections import Counter

import pytest

from livethink.rft_distill.sampling import read_samples, sample_to_shards
from livethink.rft_distill.teachers.base import SamplingConfig
from livethink.rft_distill.teachers.factory import make_teacher
from livethink.rft_distill.teachers.openai_compat import OpenAITeacher, OpenAITeacherConfig
from tests.support.teacher_fault_server import FaultServer

pytestmark = [pytest.mark.timing, pytest.mark.timeout(60)]
K = 4


def _teacher(url: str, **options) -> OpenAITeacher:
    base = {"base_url": url, "model": "fake-r1", "concurrency": 8, "timeout_s": 0.6, "max_retries": 2,
            "api_key_env": "LIVETHINK_TEST_NO_KEY"}
    return OpenAITeacher(OpenAITeacherConfig(**{**base, **options}))


@pytest.fixture(scope="module")
def tasks(liveshop_small):
    return liveshop_small.tasks["train"][:24]


def test_faults_are_retried_or_recorded_and_counted(tasks, tmp_path):
    with FaultServer(tasks, slow_s=1.5) as server:
        start = time.perf_counter()
        summary = sample_to_shards(_teacher(server.base_url), tasks, K, SamplingConfig(max_tokens=512),
                                   tmp_path, progress=False)
        wall = time.perf_counter() - start
    expected = server.expected_failures([t.id for t in tasks], K)
    assert summary.done and summary.tasks_complete == len(tasks) and summary.samples == len(tasks) * K
    assert summary.failed_by_reason == expected
    assert summary.failed_samples == sum(expected.values())
    assert json.loads((tmp_path / "summary.json").read_text())["failed_by_reason"] == expected
    assert wall < 20

    records = list(read_samples(tmp_path))
    assert Counter((r["task_id"], r["sample_index"]) for r in records) == Counter(
        {(t.id, i): 1 for t in tasks for i in range(K)})
    by_fault: dict[str, list[dict]] = {}
    for r in records:
        by_fault.setdefault(server.fault_of[r["task_id"]], []).append(r)
    # transient faults were retried into good samples
    for fault in ("ok", "500_once", "429_once", "slow_once", "malformed_once", "reasoning_field"):
        assert all(r["error"] is None and r["reply"] and r["reasoning"] for r in by_fault[fault]), fault
        assert all(r["completion"].startswith("<think>\n") for r in by_fault[fault]), fault
    # the context error is not retried; permanent 5xx uses every attempt
    for t in tasks:
        fault = server.fault_of[t.id]
        if fault == "context":
            assert server.calls[t.id] == 1
        if fault in ("500_always", "malformed_always", "slow_always"):  # 1 + max_retries, whatever the cause
            assert server.calls[t.id] == 3, fault
    for fault in ("500_always", "malformed_always", "slow_always"):
        assert all(r["error"].endswith("(after 3 attempts)") for r in by_fault[fault]), fault
    assert all(r["finish_reason"] == "error" for r in by_fault["slow_always"])
    tokens = [r["meta"]["completion_tokens"] for r in by_fault["ok"]]
    assert all(n > 0 for n in tokens) and summary.completion_tokens > 0


def test_server_without_n_gets_k_requests(tasks, tmp_path):
    few = tasks[:3]
    with FaultServer(few, support_n=False, faults=("ok",)) as server:
        teacher = _teacher(server.base_url)
        results = list(teacher.generate(few, 3, SamplingConfig(max_tokens=512)))
    assert [[s.sample_index for s in samples] for samples in results] == [[0, 1, 2]] * 3
    assert [samples[0].task_id for samples in results] == [t.id for t in few]  # input order
    assert all(s.ok for samples in results for s in samples)
    assert 1 <= server.outcomes["n_refused"] <= 3 and server.outcomes["ok"] == 9


def test_rate_limit_spaces_requests(tasks):
    few = tasks[:6]
    with FaultServer(few, faults=("ok",)) as server:
        start = time.perf_counter()
        results = list(_teacher(server.base_url, rps=10.0).generate(few, 1, SamplingConfig(max_tokens=512)))
        wall = time.perf_counter() - start
    assert len(results) == 6 and wall >= 0.45


def test_unreachable_endpoint_gives_failed_samples(tasks, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the run: nothing listens there
    teacher = _teacher(f"http://127.0.0.1:{port}/v1", max_retries=1)
    summary = sample_to_shards(teacher, tasks[:3], 2, SamplingConfig(), tmp_path, progress=False)
    assert summary.done and summary.samples == 6 and summary.failed_by_reason == {"connection": 6}
    # a plain resume keeps them (failures are data); retry_failed redoes transient failures once it is back
    assert sample_to_shards(teacher, tasks[:3], 2, SamplingConfig(), tmp_path, progress=False).tasks_written == 0
    with FaultServer(tasks[:3], faults=("ok",)) as server:
        again = sample_to_shards(_teacher(server.base_url), tasks[:3], 2, SamplingConfig(max_tokens=512), tmp_path,
                                 progress=False, retry_failed=True)
    assert again.dropped_on_resume == {"retried_failed_tasks": 3} and again.tasks_written == 3
    assert again.samples == 6 and again.failed_samples == 0 and len(list(read_samples(tmp_path))) == 6


def test_retry_after_date_is_waited_for_and_a_long_one_is_not(tasks):
    few = tasks[:2]
    with FaultServer(few, faults=("429_date_once", "429_long")) as server:
        start = time.perf_counter()
        dated, refused = list(_teacher(server.base_url).generate(few, 2, SamplingConfig(max_tokens=512)))
        wall = time.perf_counter() - start
    assert all(s.ok for s in dated) and server.calls[few[0].id] == 2
    assert wall >= 1.0  # the HTTP date (1-2 s ahead), not the client's 0.5 s backoff
    # over the client's 120 s cap: failed at once, a transient reason for a later `retry_failed` run
    assert server.calls[few[1].id] == 1
    assert all(s.error.startswith("rate_limited: HTTP 429 from http://127.0.0.1:") for s in refused)
    assert all(s.error.endswith("come back later (after 1 attempt)") for s in refused)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="base_url"):
        OpenAITeacherConfig(base_url="localhost:8000", model="m")
    with pytest.raises(ValueError, match="model"):
        OpenAITeacherConfig(base_url="http://127.0.0.1:1/v1", model="")
    with pytest.raises(ValueError, match="concurency"):
        make_teacher({"type": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m", "concurency": 2})
    assert OpenAITeacherConfig(base_url="http://127.0.0.1:8000", model="m").base_url == "http://127.0.0.1:8000/v1"
