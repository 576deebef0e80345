"""Deterministic, sticky assignment compatible with GrowthBook's SDKs.

Pure functions mirroring growthbook-python ``core.py`` (``fnv1a32``, ``gbhash``, ``getBucketRanges``,
``chooseVariation``, ``inNamespace``) so a platform's GrowthBook SDK and livethink put a viewer in the same
arm. Characters are hashed by code point (``ord``) as the Python SDK does; for ASCII ids this equals the JS SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from livethink.ab_test.experiment import Experiment

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF


def fnv1a32(text: str) -> int:
    """32-bit FNV-1a over the string's code points."""
    h = FNV_OFFSET
    for ch in text:
        h = ((h ^ ord(ch)) * FNV_PRIME) & _MASK32
    return h


def gb_hash(seed: str, value: str, version: int) -> float | None:
    """GrowthBook ``hash``: v2 → k/10000 of a double FNV, v1 → k/1000; unknown version → None."""
    if version == 2:
        return (fnv1a32(str(fnv1a32(seed + value))) % 10000) / 10000
    if version == 1:
        return (fnv1a32(value + seed) % 1000) / 1000
    return None


def equal_weights(num_variations: int) -> list[float]:
    return [1 / num_variations for _ in range(num_variations)] if num_variations >= 1 else []


def bucket_ranges(
    num_variations: int, coverage: float = 1.0, weights: Sequence[float] | None = None
) -> list[tuple[float, float]]:
    """GrowthBook ``getBucketRanges``: range i = [cum_i, cum_i + coverage·w_i).

    Like the SDK, coverage is clamped to [0, 1] and invalid weights (wrong length, sum outside 1±0.01) fall
    back to equal weights; livethink's own configs are validated strictly before they get here.
    """
    coverage = min(max(coverage, 0.0), 1.0)
    w = list(weights) if weights is not None else equal_weights(num_variations)
    if len(w) != num_variations or not 0.99 <= sum(w) <= 1.01:
        w = equal_weights(num_variations)
    ranges, cumulative = [], 0.0
    for weight in w:
        start = cumulative
        cumulative += weight
        ranges.append((start, start + coverage * weight))
    return ranges


def choose_variation(n: float, ranges: Sequence[tuple[float, float]]) -> int:
    """Index of the range holding n (start inclusive, end exclusive), or -1 (not in the experiment)."""
    for i, (start, end) in enumerate(ranges):
        if start <= n < end:
            return i
    return -1


def in_namespace(viewer_id: str, namespace_id: str, start: float, end: float) -> bool:
    """GrowthBook ``inNamespace``: v1 hash of the viewer with seed ``"__" + namespace_id``."""
    n = gb_hash("__" + namespace_id, viewer_id, 1)
    return n is not None and start <= n < end


@dataclass(frozen=True)
class Assignment:
    """Result of assigning one viewer. ``arm`` is None and ``variation`` -1 when not in the experiment."""

    arm: str | None
    bucket: float | None
    in_experiment: bool
    variation: int = -1
    experiment: str = ""
    hash_version: int = 2


class Assigner:
    """Assigns viewers of one experiment; ranges are computed once. Schedule (start/stop) is the hooks' job."""

    def __init__(self, experiment: Experiment):
        self.experiment = experiment
        self.ranges = bucket_ranges(len(experiment.arms), experiment.coverage, experiment.weights)
        self._arms = experiment.arm_names
        self._seed = experiment.hash_seed
        self._version = experiment.hash_version

    def __call__(self, viewer_id: str) -> Assignment:
        if not isinstance(viewer_id, str) or not viewer_id:
            raise ValueError("viewer_id: must be a non-empty string")
        exp = self.experiment
        bucket = gb_hash(self._seed, viewer_id, self._version)
        ns = exp.namespace
        if bucket is None or (ns is not None and not in_namespace(viewer_id, ns.id, ns.start, ns.end)):
            return Assignment(None, bucket, False, -1, exp.name, self._version)
        i = choose_variation(bucket, self.ranges)
        if i < 0:
            return Assignment(None, bucket, False, -1, exp.name, self._version)
        return Assignment(self._arms[i], bucket, True, i, exp.name, self._version)


def assign(experiment: Experiment, viewer_id: str) -> Assignment:
    """One-off assignment (build an ``Assigner`` to assign many viewers)."""
    return Assigner(experiment)(viewer_id)
