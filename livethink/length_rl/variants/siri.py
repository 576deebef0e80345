"""``siri``: the generation cap follows a SIRI schedule L(t) (arXiv 2509.25176, ``schedules.py``); a reply cut by
the cap scores C = H = 0. A checkpoint is forced at the end of every phase and the policy is copied to
``<output_dir>/phases/{compression,expansion}-<cycle>`` (SIRI-low / SIRI-high)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from livethink.length_rl import schedules
from livethink.length_rl.callbacks import PhaseSaveCallback
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS
from livethink.length_rl.schedules import SCHEDULES, Schedule


@dataclass
class SiriOptions:
    siri_schedule: str = field(default="cosine", metadata={"help": f"one of {', '.join(SCHEDULES)}"})
    siri_l_max: int = field(default=0, metadata={"help": "tokens; 0 = max_completion_length"})
    siri_l_min: int = field(default=128)
    siri_period: int = field(default=20, metadata={"help": "steps per compression + expansion cycle (even)"})
    siri_cycles: int = field(default=1)
    siri_stair_steps: int = field(default=1)

    def siri(self) -> Schedule:
        return Schedule(self.siri_l_max or self.max_completion_length, self.siri_l_min, self.siri_period,
                        self.siri_cycles, self.siri_stair_steps)


@register_variant("siri")
class Siri(Variant):
    summary = "SIRI: interleaved compression/expansion of the generation cap; cut replies score 0"
    rewards = (CORRECTNESS, HELPFULNESS)
    options = SiriOptions

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful]

    def validate(self) -> None:
        cfg = self.cfg
        if cfg.siri_schedule not in SCHEDULES:
            raise ValueError(f"siri_schedule must be one of {', '.join(SCHEDULES)}, got {cfg.siri_schedule!r}")
        cfg.siri()  # validates the numbers
        if cfg.siri_l_max and cfg.siri_l_max > cfg.max_completion_length:
            raise ValueError(f"siri_l_max ({cfg.siri_l_max}) exceeds max_completion_length ({cfg.max_completion_length})")

    def describe(self) -> tuple[dict[str, Any], list[str]]:
        cfg, s = self.cfg, self.cfg.siri()
        report = {"siri": {"schedule": cfg.siri_schedule, "l_max": s.l_max, "l_min": s.l_min, "period": s.period,
                           "cycles": s.cycles, "total_steps": s.total_steps,
                           "caps_at_quarters": [schedules.length_cap(cfg.siri_schedule, t, s)
                                                for t in range(0, s.period + 1, s.period // 4)],
                           "phase_saves": {str(k): f"{p}-{c}" for k, (p, c) in sorted(schedules.phase_boundaries(s).items())}}}
        notes = []
        if cfg.max_steps > 0 and cfg.max_steps != s.total_steps:
            notes.append(f"max_steps={cfg.max_steps} but the SIRI schedule spans {s.total_steps} steps")
        return report, notes

    def setup(self, trainer: Any) -> None:
        self.schedule = self.cfg.siri()
        trainer.add_callback(PhaseSaveCallback(schedules.phase_boundaries(self.schedule)))

    def generation_cap(self, trainer: Any, step: int, training: bool) -> int:
        if not training:
            return self.schedule.l_max
        cap = schedules.length_cap(self.cfg.siri_schedule, step, self.schedule)
        trainer.log_metric("siri/cap", cap)
        return cap

    def on_save(self, trainer: Any, step: int) -> None:
        boundary = schedules.phase_boundaries(self.schedule).get(step)
        if boundary is not None:
            name, cycle = boundary
            trainer.save_model(os.path.join(self.cfg.output_dir, "phases", f"{name}-{cycle}"))
