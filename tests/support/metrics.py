"""Reading a /metrics exposition in tests: names, the Grafana dashboard's queried metrics, Prometheus' linter."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "livethink.json"
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created")
PROMQL_WORDS = {"sum", "rate", "increase", "by", "max", "min", "avg", "le", "histogram_quantile", "without", "on"}
VLLM_PREFIX = "livethink_vllm_"  # vLLM's own engine statistics (a vLLM engine only)


def metric_names(text: str) -> set[str]:
    """Every metric family name and sample name in an exposition text."""
    out = set()
    for family in text_string_to_metric_families(text):
        out.add(family.name)
        out.update(s.name for s in family.samples)
    return out


def metric_exists(name: str, names: set[str]) -> bool:
    return any(name == n + sfx for n in names for sfx in SUFFIXES)


def dashboard_metrics() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs, "the dashboard queries nothing"
    found = set()
    for expr in exprs:
        expr = re.sub(r"\{[^}]*\}|\[[^]]*\]|\"[^\"]*\"", "", expr)  # label matchers, ranges, strings
        expr = re.sub(r"\b(by|without|on)\s*\([^)]*\)", "", expr)  # grouping labels
        found.update(w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if w not in PROMQL_WORDS)
    return found


def promtool_check(text: str) -> None:
    """``promtool check metrics`` (Debian's prometheus package, ``make promtool``) passes on ``text``."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (`make promtool`)"
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
