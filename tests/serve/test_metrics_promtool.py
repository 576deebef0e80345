"""The server's /metrics: Prometheus' own linter (``promtool check metrics``, Debian's ``prometheus`` package,
``make promtool``) passes on it; it carries the process and Python collectors; the ratios a dashboard sums are
counters; every metric the Grafana dashboard (``deploy/grafana/livethink.json``) and the HPA query exists."""

from __future__ import annotations

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.metrics import VLLM_PREFIX, dashboard_metrics, metric_exists, metric_names, promtool_check
from tests.support.serve import (
    LIVE_BODY,
    ROOT,
    SlowEngine,
    load_tokenizer,
    serve_engine,
    tiny_student_dir,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def metrics_text():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()), think_words=2, token_s=0.001)
    server = serve_engine(engine, 4)
    try:
        with httpx.Client(timeout=10) as client:
            assert client.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY).status_code == 200
            yield client.get(f"{server.url}/metrics").text
    finally:
        server.close()


def test_promtool_check_metrics_passes(metrics_text):
    promtool_check(metrics_text)


def test_process_and_python_collectors_and_counters(metrics_text):
    names = metric_names(metrics_text)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info",
                 "python_gc_collections_total"):  # fmt: skip
        assert name in names, name
    # what a dashboard sums across replicas is a counter; the ratio gauges are derived from them
    types = {f.name: f.type for f in text_string_to_metric_families(metrics_text)}
    for counter in ("livethink_deadline_met", "livethink_deadline", "livethink_rejections", "livethink_requests"):
        assert types[counter] == "counter", counter
    assert 'livethink_deadline_hit_rate{arm="none",model="rft"} 1.0' in metrics_text  # 1 met of 1 reply


def test_every_metric_the_dashboard_and_the_hpa_query_exists(metrics_text):
    names = metric_names(metrics_text)
    wanted = dashboard_metrics()
    assert {"livethink_deadline_met_total", "livethink_rejections_total", "livethink_deadline_used_ratio_bucket",
            "livethink_engine_up", "livethink_queued"} <= wanted  # goodput, refusals, deadline use, engines, queue
    hpa = yaml.safe_load((ROOT / "deploy" / "k8s" / "hpa.yaml").read_text())
    wanted |= {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    # vLLM's own statistics exist only on a vLLM engine: tests/serve/test_vllm.py checks those
    missing = sorted(n for n in wanted if not metric_exists(n, names) and not n.startswith(VLLM_PREFIX))
    assert not missing, f"queried but not in /metrics: {missing}"
