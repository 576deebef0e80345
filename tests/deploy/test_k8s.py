"""The Kubernetes manifests in ``deploy/k8s``: each validates (strict: no unknown field) against a current
Kubernetes schema bundled by ``kubernetes-validate`` (offline), and they fit together: probes on the server's
health routes, a grace period above the drain, the ConfigMap's serve.yaml a valid livethink config whose store
comes from the Secret, an HPA on a metric the server exports."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from livethink.ab_test.experiment import parse_experiment
from livethink.serve.config import parse_config
from livethink.serve.telemetry.metrics import ServeMetrics
from tests.support.serve import ROOT

K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.35.0"  # a current release whose schemas kubernetes-validate 1.37.0 bundles


def _docs() -> dict[str, dict]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


DOCS = _docs()


@pytest.mark.parametrize("kind", sorted(k for k in DOCS if k != "Kustomization"))
def test_manifest_validates_against_the_schema(kind):
    assert kubernetes_validate.validate(DOCS[kind], KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_a_misspelt_field():
    bad = copy.deepcopy(DOCS["Deployment"])
    bad["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_every_resource_is_applied_by_kustomize():
    listed = set(DOCS["Kustomization"]["resources"])
    files = {p.name for p in Path(K8S).glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == files


def test_the_pieces_fit_together():
    serve = parse_config(yaml.safe_load(DOCS["ConfigMap"]["data"]["serve.yaml"]))
    parse_experiment(yaml.safe_load(DOCS["ConfigMap"]["data"]["experiments.yaml"]), where="experiments.yaml")
    assert serve.experiment.file == "/etc/livethink/experiments.yaml"
    assert serve.experiment.store == "postgresql+psycopg://"  # host and credentials: libpq's PG* from the Secret
    secret_keys = set(DOCS["Secret"]["stringData"])
    assert {"PGHOST", "PGUSER", "PGPASSWORD", "PGDATABASE", "LIVETHINK_API_KEY"} <= secret_keys
    pod = DOCS["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["envFrom"] == [{"secretRef": {"name": DOCS["Secret"]["metadata"]["name"]}}]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]["httpGet"]["path"] == c["startupProbe"]["httpGet"]["path"] == "/health/live"
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # minutes of start-up allowed
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + serve.server.drain_s + 10  # + the engines' stop
    longest = max(serve.deadline_ms(ep) for ep in ("livestream", "chat")) / 1000
    assert serve.server.drain_s >= longest  # a request in flight finishes within its deadline
    assert DOCS["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0  # one at a time
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert c["args"][c["args"].index("--config") + 1] == f"{mount}/serve.yaml"
    assert DOCS["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert DOCS["Service"]["spec"]["selector"] == DOCS["Deployment"]["spec"]["selector"]["matchLabels"]
    hpa_metric = DOCS["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert f"# TYPE {hpa_metric} gauge" in ServeMetrics().render().decode()
