"""livethink's own server (fault-injection engine, real loopback HTTP) with a two-arm experiment whose ``tight``
arm's deadline cannot be met, against the HTTP simulator in its own process: the A/B log says what each viewer
got (refused, fallback, answered), as the clients counted it, and latency is on answered replies only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from livethink.ab_test.analysis import analyze
from livethink.ab_test.store import EventStore
from livethink.serve.api.app import create_app
from tests.support.serve import (
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(180)]
EXPERIMENT = """
name: truth_ab
arms:
  - {name: roomy, weight: 0.5, variant: rft, budget: {deadline_ms: 3000}}
  - {name: tight, weight: 0.5, variant: rft, budget: {deadline_ms: 20}}
min_viewers_per_arm: 2
guardrails: [latency_ms, refusal_rate, fallback_rate, goodput]
"""
CLIENT = ("import asyncio, json, sys; from livethink.ab_test.simulate import simulate_http; "
          "print(json.dumps(asyncio.run(simulate_http(sys.argv[1], 'truth_ab', requests=40, seed=5, concurrency=1, "
          "run_id='st')), default=str))")  # fmt: skip


def test_livethink_server_records_what_each_viewer_got(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    db = tmp_path / "ab.db"
    config = make_config(tiny_student_dir(), experiment={"file": str(exp), "store": str(db)})
    server = ServerThread(create_app(config, engine_set(SlowEngine(load_tokenizer(tiny_student_dir()),
                                                                   token_s=0.004), 4)))  # fmt: skip
    try:
        out = subprocess.run([sys.executable, "-c", CLIENT, server.url], capture_output=True, text=True, timeout=150)
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout)
    finally:
        server.close()
    client = result["per_arm"]
    assert result["errors"] == 0 and result["malformed"] == 0 and result["outcome_errors"] == 0, result
    with EventStore(db) as store:
        s = analyze(store, "truth_ab").summary
    log = s["arms"]
    for arm in client:  # what the log says each viewer got is what the clients counted
        c, a = client[arm], log[arm]
        assert (a["responses"], a["answered"], a["fallback"], a["refused"], a["error"]) == (
            c["sent"], c["answered"], c["fallback"], c["refused"], c["errors"]), arm
        assert a["good"] == c["good"], arm
    assert log["tight"]["answered"] == 0 and log["tight"]["latency_ms"]["n"] == 0  # no reply is a fast reply
    assert log["tight"]["refusal_rate"] + log["tight"]["fallback_rate"] == 1.0
    # within 5 ms at p50 on a quiet machine; the bound a loaded CI machine keeps (the client's process scheduling)
    assert abs(log["roomy"]["latency_ms"]["p50"] - client["roomy"]["answered_p50_ms"]) < 40.0
