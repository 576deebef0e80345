"""SIRI length schedules: the completion cap L(t) over training steps, and the phase boundaries.

SIRI (arXiv 2509.25176) alternates a *compression* phase (the cap falls from
L_max to L_min) and an *expansion* phase (it rises back) in cycles of T steps:

- ``cosine``:        L(t) = (L_max+L_min)/2 + (L_max−L_min)/2 · cos(2πt/T)
- ``stair``:         compression half: L_max stepped down to L_min in ``stair_steps`` equal stairs (1 = straight to
                     L_min); expansion half: L_max
- ``stair_cosine``:  φ = 2π(t mod T)/T; L_max for φ < π/4 or φ ≥ 7π/4, cosine descent on [π/4, 3π/4),
                     L_min on [3π/4, 5π/4), cosine ascent on [5π/4, 7π/4)

Caps are whole tokens (rounded to the nearest integer). Schedules are chosen by name from ``SCHEDULES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

COMPRESSION = "compression"
EXPANSION = "expansion"


@dataclass(frozen=True)
class Schedule:
    l_max: int
    l_min: int
    period: int  # T: steps per compression + expansion cycle
    cycles: int = 1
    stair_steps: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.l_min <= self.l_max:
            raise ValueError(f"need 0 < l_min <= l_max, got l_min={self.l_min}, l_max={self.l_max}")
        if self.period < 2 or self.period % 2:
            raise ValueError(f"period must be an even number >= 2 (two equal phases), got {self.period}")
        if self.cycles < 1 or self.stair_steps < 1:
            raise ValueError(f"cycles and stair_steps must be >= 1, got {self.cycles}, {self.stair_steps}")

    @property
    def total_steps(self) -> int:
        return self.period * self.cycles

    @property
    def mid(self) -> float:
        return (self.l_max + self.l_min) / 2

    @property
    def half(self) -> float:
        return (self.l_max - self.l_min) / 2


def cosine(t: int, s: Schedule) -> int:
    """L(t) = (L_max+L_min)/2 + (L_max−L_min)/2·cos(2πt/T)."""
    return round(s.mid + s.half * math.cos(2 * math.pi * t / s.period))


def stair(t: int, s: Schedule) -> int:
    """Compression half: ``stair_steps`` equal drops from L_max to L_min; expansion half: L_max."""
    pos = t % s.period
    half = s.period // 2
    if pos >= half:
        return s.l_max
    stair_index = pos * s.stair_steps // half  # 0 .. stair_steps-1
    return round(s.l_max - (stair_index + 1) * (s.l_max - s.l_min) / s.stair_steps)


def stair_cosine(t: int, s: Schedule) -> int:
    """Flat L_max, cosine descent, flat L_min, cosine ascent, each a quarter of the cycle."""
    phi = 2 * math.pi * (t % s.period) / s.period
    q = math.pi / 4
    if phi < q or phi >= 7 * q:
        return s.l_max
    if phi < 3 * q:
        return round(s.mid + s.half * math.cos(2 * (phi - q)))
    if phi < 5 * q:
        return s.l_min
    return round(s.mid - s.half * math.cos(2 * (phi - 5 * q)))


SCHEDULES: dict[str, Callable[[int, Schedule], int]] = {"cosine": cosine, "stair": stair, "stair_cosine": stair_cosine}


def length_cap(name: str, t: int, s: Schedule) -> int:
    """The cap at step ``t`` (0-based) for the schedule called ``name``."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown SIRI schedule {name!r}: choose one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name](t, s)


def phase(t: int, s: Schedule) -> str:
    """``compression`` for the first half of each cycle, ``expansion`` for the second."""
    return COMPRESSION if t % s.period < s.period // 2 else EXPANSION


def phase_boundaries(s: Schedule) -> dict[int, tuple[str, int]]:
    """Optimizer step at which each phase ends -> (phase, cycle index from 1).

    With T = 640: compression ends at 320, 960, ...; expansion ends at 640, 1280, ... (SIRI-low / SIRI-high).
    """
    out: dict[int, tuple[str, int]] = {}
    for k in range(s.cycles):
        out[k * s.period + s.period // 2] = (COMPRESSION, k + 1)
        out[(k + 1) * s.period] = (EXPANSION, k + 1)
    return out
