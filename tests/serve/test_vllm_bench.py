"""vLLM's own benchmark client (``vllm bench serve --backend openai-chat``) against ``livethink serve`` on the real
vLLM engine (the tiny untrained student), started for this module alone: its requests teach the controller
nothing the other engine tests depend on."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from tests.support.serve import CLIServer, tiny_student_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import vllm_bench  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.timeout(400),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = {
        "models": {"rft": {"path": str(tiny_student_dir())}},
        "default_model": "rft",
        "engine": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1, "max_concurrency": 8},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "server": {"log_level": "info"},  # the access lines, as JSON: vllm bench serve's TTFTs are joined to them
    }
    srv = CLIServer(config, tmp_path_factory.mktemp("vllm-bench"), log_format="json")
    yield srv
    srv.close()


def test_vllm_bench_serve_completes_and_its_ttft_is_the_servers(server, tmp_path):
    """vLLM's own benchmark client (``vllm bench serve --backend openai-chat``) against the server: no failed
    request, and its median time to first token within 10 ms of the server's own for the same requests (joined by
    ``X-Request-Id`` to the JSON access lines): the first chunk leaves with the first engine output."""
    prefix, n = "bench-ci-", 12
    command = vllm_bench.bench_command(server.url, "rft", tiny_student_dir(), tmp_path, "bench.json", num_prompts=n,
                                       prefix=prefix, rate=None, input_len=32, output_len=32)
    result = vllm_bench.run_bench(command, tmp_path / "bench.json", timeout_s=300)
    time.sleep(1.0)  # the last access line is written once its response is sent
    row = vllm_bench.compare(result, vllm_bench.server_first_tokens(server.log_path, prefix), prefix)
    assert (row["completed"], row["failed"], row["joined"]) == (n, 0, n), row
    assert abs(row["median_difference_ms"]) <= vllm_bench.TTFT_TARGET_MS, json.dumps(row)
    assert row["gap_ms"]["min"] >= 0, row  # the client cannot see a token before the server produced it
