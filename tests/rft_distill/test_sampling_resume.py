"""Resumable sampling: kill -9 / SIGTERM a real `livethink teacher` run against a faulty HTTP server, resume,
and check that every task has exactly its k samples, once, and nothing written before the kill changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from livethink.data.io import write_jsonl
from livethink.rft_distill.sampling import read_samples, sample_to_shards, shard_paths
from livethink.rft_distill.teachers.base import Sample, SamplingConfig
from livethink.rft_distill.teachers.scripted import ScriptedTeacher
from tests.support.teacher_fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)
K = 4
ROOT = Path(__file__).resolve().parents[2]


def _complete_lines(out: Path, k: int = K) -> dict[str, list[str]]:
    """Raw lines of every complete task in the shards (the torn tail and partial tasks excluded)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for path in shard_paths(out):
        for line in path.read_text().splitlines():
            try:
                groups[json.loads(line)["task_id"]].append(line)
            except ValueError:
                continue
    return {t: lines for t, lines in groups.items() if len(lines) == k}


def _cli(base_url: str, data: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "livethink.cli", "teacher", "--data", str(data), "--k", str(K),
            "--teacher-type", "openai", "--teacher-base-url", base_url, "--teacher-model", "fake-r1", "--out", str(out),
            "--teacher-concurrency", "3", "--teacher-timeout-s", "0.5", "--teacher-max-retries", "2",
            "--teacher-api-key-env", "LIVETHINK_TEST_NO_KEY", "--teacher-max-tokens", "512", "--no-progress"]


def _wait_for_tasks(out: Path, n: int, proc: subprocess.Popen, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while len(_complete_lines(out)) < n:
        assert proc.poll() is None, f"sampler exited early: {proc.communicate()}"
        assert time.monotonic() < deadline, "sampler too slow"
        time.sleep(0.02)


def _check_exactly_once(out: Path, task_ids: list[str]) -> list[dict]:
    records = list(read_samples(out))
    assert Counter((r["task_id"], r["sample_index"]) for r in records) == Counter(
        {(t, i): 1 for t in task_ids for i in range(K)})
    raw = [line for p in shard_paths(out) for line in p.read_text().splitlines()]
    assert len(raw) == len(task_ids) * K  # the repaired shards hold nothing else
    return records


@pytest.fixture(scope="module")
def tasks(liveshop_small):
    return liveshop_small.tasks["train"][:48]


def test_kill_9_and_resume_loses_and_duplicates_nothing(tasks, tmp_path):
    data = tmp_path / "train.jsonl"
    write_jsonl(tasks, data)
    out = tmp_path / "samples"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ids = [t.id for t in tasks]
    with FaultServer(tasks, slow_s=1.0, delay_s=0.08) as server:
        proc = subprocess.Popen(_cli(server.base_url, data, out), cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for_tasks(out, 10, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        before = _complete_lines(out)
        assert 10 <= len(before) < len(tasks), "the kill must land mid-run"

        # A crash in the middle of a write: half a task and a torn line at the end of the last shard.
        todo = next(t for t in ids if t not in before)
        half = [Sample.failed(task_id=todo, sample_index=i, teacher="x", error="x: y").model_dump_json()
                for i in range(2)]
        with shard_paths(out)[-1].open("a") as fh:
            fh.write("\n".join(half) + "\n" + half[0][: len(half[0]) // 2])

        resumed = subprocess.run(_cli(server.base_url, data, out), cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=45)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["done"] and summary["tasks_skipped_resume"] == len(before)
    assert summary["tasks_written"] == len(tasks) - len(before)
    assert summary["dropped_on_resume"] == {"torn_lines": 1, "partial_tasks": 1}
    assert summary["failed_by_reason"] == server.expected_failures(ids, K)

    _check_exactly_once(out, ids)
    after = _complete_lines(out)
    for task_id, lines in before.items():  # nothing written before the kill was lost or changed
        assert after[task_id] == lines


def test_sigterm_stops_cleanly_and_resumes(tasks, tmp_path):
    few = tasks[:24]
    data = tmp_path / "train.jsonl"
    write_jsonl(few, data)
    out = tmp_path / "samples"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with FaultServer(few, faults=("ok", "500_once", "429_once"), delay_s=0.1) as server:
        proc = subprocess.Popen(_cli(server.base_url, data, out), cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_tasks(out, 4, proc)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
        assert proc.returncode == 130, stderr
        stopped = json.loads((out / "summary.json").read_text())
        assert stopped["interrupted"] and not stopped["done"] and stopped["tasks_complete"] < len(few)
        resumed = subprocess.run(_cli(server.base_url, data, out), cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=45)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["done"]
    records = _check_exactly_once(out, [t.id for t in few])
    assert all(r["error"] is None for r in records)


# ------------------------------------------------------------------------------------------- in-process runner


class _Interrupting(ScriptedTeacher):
    """Scripted teacher that raises KeyboardInterrupt (Ctrl-C) after ``after`` tasks."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def generate(self, tasks, k, sampling=None):
        for i, samples in enumerate(super().generate(tasks, k, sampling)):
            if i == self.after:
                raise KeyboardInterrupt
            yield samples


def test_ctrl_c_then_resume_and_shard_rotation(tasks, tmp_path):
    few = tasks[:10]
    with pytest.raises(KeyboardInterrupt):
        sample_to_shards(_Interrupting(after=4), few, 2, SamplingConfig(), tmp_path, shard_size=3, progress=False)
    assert json.loads((tmp_path / "summary.json").read_text())["tasks_complete"] == 4
    summary = sample_to_shards(ScriptedTeacher(), few, 2, SamplingConfig(), tmp_path, shard_size=3, progress=False)
    assert summary.done and summary.tasks_skipped_resume == 4 and summary.tasks_written == 6
    assert [len(p.read_text().splitlines()) for p in shard_paths(tmp_path)] == [6, 6, 6, 2]
    assert Counter(r["task_id"] for r in read_samples(tmp_path)) == {t.id: 2 for t in few}
    again = sample_to_shards(ScriptedTeacher(), few, 2, SamplingConfig(), tmp_path, progress=False)
    assert again.tasks_written == 0 and again.samples == 20


def test_duplicate_task_across_shards_is_dropped(tasks, tmp_path):
    few = tasks[:3]
    sample_to_shards(ScriptedTeacher(), few, 2, SamplingConfig(), tmp_path, shard_size=2, progress=False)
    first = shard_paths(tmp_path)[0].read_text().splitlines()[:2]
    (tmp_path / "samples-00009.jsonl").write_text("\n".join(first) + "\n")
    summary = sample_to_shards(ScriptedTeacher(), few, 2, SamplingConfig(), tmp_path, progress=False)
    assert summary.dropped_on_resume == {"duplicate_tasks": 1} and summary.samples == 6
    assert (tmp_path / "samples-00009.jsonl").read_text() == ""


def test_resume_with_other_k_is_refused(tasks, tmp_path):
    sample_to_shards(ScriptedTeacher(), tasks[:2], 2, SamplingConfig(), tmp_path, progress=False)
    with pytest.raises(ValueError, match="k: .* k=2, this run asks k=3"):
        sample_to_shards(ScriptedTeacher(), tasks[:2], 3, SamplingConfig(), tmp_path, progress=False)
