"""Assignment: GrowthBook's published vectors, stickiness, coverage, namespaces, minimal reassignment."""

from __future__ import annotations

import pytest

from livethink.ab_test.assignment import (
    Assigner,
    bucket_ranges,
    choose_variation,
    fnv1a32,
    gb_hash,
    in_namespace,
)
from livethink.ab_test.cli import main as ab_main
from livethink.ab_test.experiment import parse_experiment

# growthbook/growthbook packages/sdk-js/test/cases.json, "hash": [seed, value, version, expected]
GROWTHBOOK_HASH = [
    ("", "a", 1, 0.22),
    ("", "b", 1, 0.077),
    ("b", "a", 1, 0.946),
    ("ef", "d", 1, 0.652),
    ("asdf", "8952klfjas09ujk", 1, 0.549),
    ("", "123", 1, 0.011),
    ("", '___)((*":&', 1, 0.563),
    ("seed", "a", 2, 0.0505),
    ("seed", "b", 2, 0.2696),
    ("foo", "ab", 2, 0.2575),
    ("foo", "def", 2, 0.2019),
    ("89123klj", "8952klfjas09ujkasdf", 2, 0.124),
    ("90850943850283058242805", "123", 2, 0.7516),
    ("()**(%$##$%#$#", '___)((*":&', 2, 0.0128),
]

# cases.json "getBucketRange": [numVariations, coverage, weights] -> ranges
GROWTHBOOK_RANGES = [
    ((2, 1, None), [(0, 0.5), (0.5, 1)]),
    ((2, 0.5, None), [(0, 0.25), (0.5, 0.75)]),
    ((2, 0, None), [(0, 0), (0.5, 0.5)]),
    ((4, 1, None), [(0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1)]),
    ((2, 1, [0.4, 0.6]), [(0, 0.4), (0.4, 1)]),
    ((3, 1, [0.2, 0.3, 0.5]), [(0, 0.2), (0.2, 0.5), (0.5, 1)]),
    ((3, 0.2, [0.2, 0.3, 0.5]), [(0, 0.04), (0.2, 0.26), (0.5, 0.6)]),
    ((2, -0.2, None), [(0, 0), (0.5, 0.5)]),
    ((2, 1.5, None), [(0, 0.5), (0.5, 1)]),
    ((2, 1, [0.4, 0.1]), [(0, 0.5), (0.5, 1)]),
    ((2, 1, [0.7, 0.6]), [(0, 0.5), (0.5, 1)]),
    ((4, 1, [0.4, 0.4, 0.2]), [(0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1)]),
    ((2, 1, [0.4, 0.5999]), [(0, 0.4), (0.4, 0.9999)]),
]

# cases.json "chooseVariation": [name, n, ranges, expected index]
GROWTHBOOK_CHOOSE = [
    ("even range, 0.2", 0.2, [(0, 0.5), (0.5, 1)], 0),
    ("even range, 0.4", 0.4, [(0, 0.5), (0.5, 1)], 0),
    ("even range, 0.6", 0.6, [(0, 0.5), (0.5, 1)], 1),
    ("even range, 0.8", 0.8, [(0, 0.5), (0.5, 1)], 1),
    ("even range, 0", 0, [(0, 0.5), (0.5, 1)], 0),
    ("even range, 0.5", 0.5, [(0, 0.5), (0.5, 1)], 1),
    ("reduced range, 0.2", 0.2, [(0, 0.25), (0.5, 0.75)], 0),
    ("reduced range, 0.4", 0.4, [(0, 0.25), (0.5, 0.75)], -1),
    ("reduced range, 0.6", 0.6, [(0, 0.25), (0.5, 0.75)], 1),
    ("reduced range, 0.8", 0.8, [(0, 0.25), (0.5, 0.75)], -1),
    ("reduced range, 0.25", 0.25, [(0, 0.25), (0.5, 0.75)], -1),
    ("reduced range, 0.5", 0.5, [(0, 0.25), (0.5, 0.75)], 1),
    ("zero range", 0.5, [(0, 0.5), (0.5, 0.5), (0.5, 1)], 2),
]

# cases.json "inNamespace": [user id, (namespace, start, end), expected]
GROWTHBOOK_NAMESPACE = [
    ("1", ("namespace1", 0, 0.4), False),
    ("1", ("namespace1", 0.4, 1), True),
    ("1", ("namespace2", 0, 0.4), False),
    ("1", ("namespace2", 0.4, 1), True),
    ("2", ("namespace1", 0, 0.4), False),
    ("2", ("namespace1", 0.4, 1), True),
    ("2", ("namespace2", 0, 0.4), False),
    ("2", ("namespace2", 0.4, 1), True),
    ("3", ("namespace1", 0, 0.4), False),
    ("3", ("namespace1", 0.4, 1), True),
    ("3", ("namespace2", 0, 0.4), True),
    ("3", ("namespace2", 0.4, 1), False),
    ("4", ("namespace1", 0, 0.4), False),
    ("4", ("namespace1", 0.4, 1), True),
    ("4", ("namespace2", 0, 0.4), True),
    ("4", ("namespace2", 0.4, 1), False),
]

# cases.json "feature" experiment rules: (seed, hash version, weights, coverage, id) -> (bucket, variation)
GROWTHBOOK_EXPERIMENTS = [
    ("feature", 1, [1 / 3] * 3, 1.0, "123", 0.863, 2),  # "empty experiment rule - c"
    ("feature", 1, [1 / 3] * 3, 1.0, "456", 0.178, 0),  # "empty experiment rule - a"
    ("feature", 1, [1 / 3] * 3, 1.0, "fds", 0.514, 1),  # "empty experiment rule - b"
    ("feature", 2, [0.1, 0.9], 0.99, "123", 0.5231, 1),  # "creates experiments properly"
]


def test_fnv1a32_reference_values() -> None:
    # Landon Curt Noll's FNV test suite (32-bit FNV-1a)
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C
    assert fnv1a32("foobar") == 0xBF9CF968


@pytest.mark.parametrize(("seed", "value", "version", "expected"), GROWTHBOOK_HASH)
def test_growthbook_hash_vectors(seed: str, value: str, version: int, expected: float) -> None:
    assert gb_hash(seed, value, version) == pytest.approx(expected, abs=1e-12)


def test_hash_v2_by_hand() -> None:
    # v2 = fnv(str(fnv(seed + value))) % 10000 / 10000, spelled out
    inner = fnv1a32("seed" + "a")
    assert gb_hash("seed", "a", 2) == (fnv1a32(str(inner)) % 10000) / 10000
    assert gb_hash("seed", "a", 99) is None


@pytest.mark.parametrize(("args", "expected"), GROWTHBOOK_RANGES)
def test_growthbook_bucket_ranges(args: tuple, expected: list) -> None:
    got = bucket_ranges(*args)
    assert len(got) == len(expected)
    for (a, b), (c, d) in zip(got, expected, strict=True):
        assert a == pytest.approx(c, abs=1e-9) and b == pytest.approx(d, abs=1e-9)


@pytest.mark.parametrize(("name", "n", "ranges", "expected"), GROWTHBOOK_CHOOSE)
def test_growthbook_choose_variation(name: str, n: float, ranges: list, expected: int) -> None:
    assert choose_variation(n, ranges) == expected, name


@pytest.mark.parametrize(("vid", "ns", "expected"), GROWTHBOOK_NAMESPACE)
def test_growthbook_in_namespace(vid: str, ns: tuple, expected: bool) -> None:
    assert in_namespace(vid, *ns) is expected


@pytest.mark.parametrize(
    ("seed", "version", "weights", "coverage", "vid", "bucket", "variation"), GROWTHBOOK_EXPERIMENTS
)
def test_growthbook_experiment_vectors(seed, version, weights, coverage, vid, bucket, variation) -> None:
    arms = [{"name": f"v{i}", "weight": w} for i, w in enumerate(weights)]
    if abs(sum(weights) - 1) > 1e-9:  # 1/3 * 3 in floats: give the last arm the remainder
        arms[-1]["weight"] = 1 - sum(weights[:-1])
    exp = parse_experiment(
        {"name": "x", "seed": seed, "hash_version": version, "coverage": coverage, "arms": arms}
    )
    a = Assigner(exp)(vid)
    assert a.bucket == pytest.approx(bucket, abs=1e-12)
    assert a.variation == variation and a.arm == f"v{variation}"


def _exp(weights: list[float], **kw: object):
    arms = [{"name": f"arm{i}", "weight": w} for i, w in enumerate(weights)]
    return parse_experiment({"name": "exp1", "arms": arms, **kw})


def test_assignment_is_deterministic_and_matches_ranges() -> None:
    exp = _exp([0.5, 0.5])
    a1, a2 = Assigner(exp), Assigner(_exp([0.5, 0.5]))  # "another machine / restart"
    for i in range(500):
        vid = f"viewer-{i}"
        x, y = a1(vid), a2(vid)
        assert x == y
        assert x.bucket == gb_hash("exp1", vid, 2)
        assert x.arm == ("arm0" if x.bucket < 0.5 else "arm1")


def test_seed_overrides_name_and_v1() -> None:
    exp = _exp([0.5, 0.5], seed="salt", hash_version=1)
    a = Assigner(exp)("u1")
    assert a.bucket == gb_hash("salt", "u1", 1) and a.hash_version == 1


def test_coverage_and_namespace_exclude() -> None:
    exp = _exp([0.5, 0.5], coverage=0.2)
    assigner = Assigner(exp)
    got = [assigner(f"v{i}") for i in range(4000)]
    share_in = sum(a.in_experiment for a in got) / len(got)
    assert 0.17 < share_in < 0.23
    assert all((a.arm is None) == (not a.in_experiment) for a in got)
    ns = _exp([0.5, 0.5], namespace={"id": "live", "start": 0.0, "end": 0.3})
    nassign = Assigner(ns)
    for i in range(300):
        vid = f"v{i}"
        assert nassign(vid).in_experiment == in_namespace(vid, "live", 0.0, 0.3)


def test_weight_change_moves_only_the_minimum() -> None:
    before, after = Assigner(_exp([0.5, 0.5])), Assigner(_exp([0.6, 0.4]))
    ids = [f"user{i}" for i in range(20000)]
    moved = sum(before(v).arm != after(v).arm for v in ids)
    # 50/50 -> 60/40: exactly the viewers with bucket in [0.5, 0.6) move (total variation distance 0.1)
    expected = sum(0.5 <= gb_hash("exp1", v, 2) < 0.6 for v in ids)
    assert moved == expected
    assert abs(moved / len(ids) - 0.1) < 0.01
    # raising coverage never moves anyone who was already in the experiment
    small, big = Assigner(_exp([0.5, 0.5], coverage=0.5)), Assigner(_exp([0.5, 0.5], coverage=1.0))
    for v in ids[:3000]:
        s = small(v)
        if s.in_experiment:
            assert big(v).arm == s.arm


def test_empty_viewer_id_is_an_error() -> None:
    with pytest.raises(ValueError, match="viewer_id"):
        Assigner(_exp([0.5, 0.5]))("")


def test_cli_assign(tmp_path, capsys) -> None:
    cfg = tmp_path / "e.yaml"
    cfg.write_text(
        "name: exp1\narms:\n  - {name: A, weight: 0.5}\n  - {name: B, weight: 0.5}\ncoverage: 0.5\n"
    )
    ids = tmp_path / "ids.txt"
    ids.write_text("alice\nbob\n\ncarol\n")
    assert ab_main(["assign", "--config", str(cfg), "--ids", str(ids)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assigner = Assigner(_exp([0.5, 0.5], coverage=0.5).model_copy(update={"arms": _exp([0.5, 0.5]).arms}))
    for line in lines:
        vid, arm, bucket = line.split("\t")
        a = assigner(vid)
        assert bucket == f"{a.bucket:.4f}"
        assert arm == ({"arm0": "A", "arm1": "B"}[a.arm] if a.arm else "-")


def test_cli_assign_bad_config(tmp_path, capsys) -> None:
    cfg = tmp_path / "e.yaml"
    cfg.write_text("name: exp1\narms:\n  - {name: A, weight: 0.5}\n  - {name: B, weight: 0.4}\n")
    ids = tmp_path / "ids.txt"
    ids.write_text("x\n")
    assert ab_main(["assign", "--config", str(cfg), "--ids", str(ids)]) == 2
    assert "weights sum to 0.9" in capsys.readouterr().err
