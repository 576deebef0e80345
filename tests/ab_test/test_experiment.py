"""Experiment YAML: the shipped configs load; bad configs fail with errors naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from livethink.ab_test.errors import ExperimentConfigError
from livethink.ab_test.experiment import load_experiment, load_experiments, parse_experiment

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "ab"


def _base(**kw: object) -> dict:
    return {"name": "e1", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}], **kw}


def test_shipped_configs_load() -> None:
    exp = load_experiment(CONFIGS / "drpo_vs_rft.yaml")
    assert exp.name == "drpo_vs_rft" and exp.control_arm == "rft"
    assert exp.arm("drpo").budget is not None and exp.arm("drpo").budget.deadline_ms == 1000 == exp.arm("rft").budget.deadline_ms
    many = load_experiments(CONFIGS / "experiments.yaml")
    assert set(many) == {"canary_dot", "thinking_budget"}
    tb = many["thinking_budget"]
    assert tb.start == datetime(2026, 11, 1, tzinfo=UTC) and tb.coverage == 0.5
    assert tb.is_running(datetime(2026, 12, 1, tzinfo=UTC)) and not tb.is_running(
        datetime(2027, 2, 1, tzinfo=UTC)
    )


def test_defaults() -> None:
    exp = parse_experiment(_base())
    assert exp.hash_seed == "e1" and exp.hash_version == 2 and exp.control_arm == "A"
    assert exp.primary_metric == "order_rate" and exp.srm_threshold == 0.001
    assert exp.digest() == parse_experiment(_base()).digest()
    assert exp.digest() != parse_experiment(_base(seed="other")).digest()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_base(arms=[{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.4}]), "weights sum to 0.9"),
        (_base(arms=[{"name": "A", "weight": 0.5}, {"name": "A", "weight": 0.5}]), "duplicate arm name"),
        (_base(arms=[{"name": "A", "weight": 1.0}]), "arms"),
        (_base(arms=[{"name": "A", "weight": 1.5}, {"name": "B", "weight": -0.5}]), "arms.0.weight"),
        (
            _base(arms=[{"name": "A", "weight": 0.5, "variant": "gpt9"}, {"name": "B", "weight": 0.5}]),
            "arms.0.variant",
        ),
        (
            _base(
                arms=[
                    {"name": "A", "weight": 0.5, "budget": {"deadline_ms": -1}},
                    {"name": "B", "weight": 0.5},
                ]
            ),
            "arms.0.budget.deadline_ms",
        ),
        (
            _base(arms=[{"name": "A", "weight": 0.5, "colour": "red"}, {"name": "B", "weight": 0.5}]),
            "arms.0.colour",
        ),
        (_base(control="C"), "control"),
        (_base(primary_metric="revenue"), "primary_metric"),
        (_base(primary_metric="latency_ms"), "primary_metric"),
        (_base(guardrails=["latency_ms", "vibes"]), "guardrails"),
        (_base(coverage=1.2), "coverage"),
        (_base(hash_version=3), "hash_version"),
        (_base(start="2026-12-01T00:00:00Z", stop="2026-11-01T00:00:00Z"), "start"),
        (_base(namespace={"id": "ns", "start": 0.5, "end": 0.2}), "namespace"),
        (_base(name="bad name!"), "name"),
        ({"arms": []}, "name"),
    ],
)
def test_invalid_configs_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(ExperimentConfigError, match=field.replace(".", r"\.")):
        parse_experiment(data)


def test_custom_known_variants() -> None:
    data = _base(arms=[{"name": "A", "weight": 0.5, "variant": "my-model"}, {"name": "B", "weight": 0.5}])
    assert parse_experiment(data, known_variants={"my-model"}).arms[0].variant == "my-model"


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ExperimentConfigError, match="file not found"):
        load_experiments(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ExperimentConfigError, match="not valid YAML"):
        load_experiments(bad)
    two = tmp_path / "two.yaml"
    two.write_text(
        "experiments:\n"
        "  - {name: x, arms: [{name: A, weight: 0.5}, {name: B, weight: 0.5}]}\n"
        "  - {name: x, arms: [{name: A, weight: 0.5}, {name: B, weight: 0.5}]}\n"
    )
    with pytest.raises(ExperimentConfigError, match=r"experiments\.1\.name: duplicate"):
        load_experiments(two)
    two.write_text(
        "experiments:\n"
        "  - {name: x, arms: [{name: A, weight: 0.5}, {name: B, weight: 0.5}]}\n"
        "  - {name: y, arms: [{name: A, weight: 0.5}, {name: B, weight: 0.5}]}\n"
    )
    with pytest.raises(ExperimentConfigError, match="pass the experiment name"):
        load_experiment(two)
    assert load_experiment(two, "y").name == "y"
    with pytest.raises(ExperimentConfigError, match="no experiment named 'z'"):
        load_experiment(two, "z")
