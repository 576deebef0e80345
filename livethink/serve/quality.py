"""Quality-aware admission: each model's minimum thinking budget, and what to do when a request cannot get it.

The floor comes from the model's config (``models.<name>.min_thinking_tokens``) or, when that is unset, from
the thinking calibration saved beside its checkpoint by ``livethink eval --thinking-caps ...``
(``livethink.eval.thinking_curve``); without either it is 0 (no floor). A request whose planned thinking cap
falls below the floor is shed (429 + Retry-After), answered with the configured honest fallback reply, or
answered anyway (a forced guess), per endpoint (``endpoints.<name>.below_min_thinking``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livethink.eval.thinking_curve import load_curve
from livethink.serve.config import ServeConfig


@dataclass(frozen=True)
class ThinkingFloor:
    tokens: int  # 0 = no floor
    source: str  # config | calibration | none
    calibration: str | None = None  # the file it came from

    def describe(self) -> str:
        """One line for people: the floor and where it came from."""
        if self.source == "config":
            return f"{self.tokens} thinking tokens (min_thinking_tokens in the config)"
        if self.source == "calibration":
            return f"{self.tokens} thinking tokens (calibrated: {self.calibration})"
        return "none (no min_thinking_tokens, no thinking_calibration.json beside the checkpoint)"

    def card(self) -> dict[str, Any]:
        return {"min_thinking_tokens": self.tokens, "min_thinking_source": self.source,
                **({"thinking_calibration": self.calibration} if self.calibration else {})}


def floor_for(config: ServeConfig, model: str) -> ThinkingFloor:
    """The floor of ``model``: configured, else calibrated (the adapter's directory first, then the
    checkpoint's), else none. A calibration in which no cap reached the target asks for the largest cap."""
    spec = config.models[model]
    if spec.min_thinking_tokens is not None:
        return ThinkingFloor(spec.min_thinking_tokens, "config")
    dirs = [spec.lora, spec.path if spec.path else config.models[spec.base].path]  # type: ignore[index]
    for d in dirs:
        if not d:
            continue
        curve = load_curve(d)
        if curve is not None:
            tokens = curve.min_thinking_tokens if curve.min_thinking_tokens is not None else max(curve.caps)
            return ThinkingFloor(tokens, "calibration", str(Path(d) / "thinking_calibration.json"))
    return ThinkingFloor(0, "none")


def required_thinking(floor: int, thinking: bool, max_thinking: int | None) -> int:
    """Thinking tokens a request needs: the floor, but never more than the request's (or arm's) own cap, and
    none when thinking is off."""
    if not thinking or floor <= 0:
        return 0
    return floor if max_thinking is None else min(floor, max_thinking)
