"""Shared helpers of the serving benchmarks: the repository's paths, the environment of the servers they start, a
rounded percentile and an untrained student to serve when no trained one exists."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
# under a runs folder (runs/tiny): make demo's two arms, the RFT student and the one trained for the cut that it
# serves (livethink.demo_job's Settings.rft and Settings.served)
RFT_STUDENT = "rft/final"
SERVED_STUDENT = "grpo/drpo_then_budget64/final"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}


def pct(values: list[float], q: float, digits: int | None = 1) -> float | None:
    """The ``q``-th percentile of ``values`` rounded to ``digits`` (None: unrounded); None for no values."""
    if not values:
        return None
    value = float(np.percentile(values, float(q)))
    return value if digits is None else round(value, digits)


def untrained_student(workdir: Path) -> Path:
    """A freshly initialised tiny student (``livethink.models.student.untrained_student``) under ``workdir``."""
    from livethink.models.student import untrained_student as build

    return build(workdir / "untrained-student")
