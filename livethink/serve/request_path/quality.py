"""Quality-aware admission: each model's minimum thinking budget, and what to do when a request cannot get it.

The floor comes from the model's config (``models.<name>.min_thinking_tokens``) or, when that is unset, from
the thinking calibration saved beside its checkpoint by ``livethink eval --thinking-caps ...``
(``livethink.eval.thinking_curve``); without either it is 0 (no floor). A request whose planned thinking cap
falls below the floor is shed (429 + Retry-After), answered with the configured honest fallback reply, or
answered anyway (a forced reply), per endpoint (``endpoints.<name>.below_min_thinking``); ``auto`` picks per
model and per request from the calibration curve (``below_floor_action``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from livethink.eval.thinking_curve import ThinkingCurve, load_curve
from livethink.serve.config import ServeConfig


@dataclass(frozen=True)
class ThinkingFloor:
    tokens: int  # 0 = no floor
    source: str  # config | calibration | none
    calibration: str | None = None  # the file it came from
    curve: ThinkingCurve | None = field(default=None, compare=False, repr=False)  # the calibration's curve

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
            return ThinkingFloor(tokens, "calibration", str(Path(d) / "thinking_calibration.json"), curve)
    return ThinkingFloor(0, "none")


def required_thinking(floor: int, thinking: bool, max_thinking: int | None) -> int:
    """Thinking tokens a request needs: the floor, but never more than the request's (or arm's) own cap, and
    none when thinking is off."""
    if not thinking or floor <= 0:
        return 0
    return floor if max_thinking is None else min(floor, max_thinking)


# -- what to do below the floor --------------------------------------------------------------------------
def forced_correct(caps: Sequence[int], correct: Sequence[float], cap: int) -> float:
    """The share of budget-forced replies that are correct at thinking cap ``cap``, read off a calibration
    curve (``caps`` increasing, ``correct`` per cap): the measured share at a measured cap, linear
    interpolation between the two measured caps around ``cap``, and the nearest end's share outside them."""
    if not caps or len(caps) != len(correct):
        raise ValueError("a curve needs one correct share per cap, and at least one cap")
    i = bisect_right(caps, cap)
    if i == 0:
        return correct[0]
    if i == len(caps) or caps[i - 1] == cap:
        return correct[i - 1]
    lo, hi = caps[i - 1], caps[i]
    return correct[i - 1] + (correct[i] - correct[i - 1]) * (cap - lo) / (hi - lo)


@dataclass(frozen=True)
class FloorAction:
    """What a request below its model's thinking floor gets (``action``: shed, fallback or answer) and why."""

    action: str
    why: str


def _source(floor: ThinkingFloor) -> str:
    curve = floor.curve
    assert curve is not None
    split = f" {curve.split}" if curve.split else ""
    return f"{floor.calibration}, {curve.n_tasks}{split} tasks"


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def below_floor_action(setting: str, floor: ThinkingFloor, cap: int) -> FloorAction:
    """The action for one request whose thinking cap ``cap`` is below ``floor``, for the endpoint setting
    ``setting`` (``endpoints.<name>.below_min_thinking``): shed, fallback and answer are taken as configured.

    ``auto`` maximises goodput (correct replies in time, per request sent; ``livethink.eval.goodput``). Shed
    and fallback give 0 correct replies; a forced reply at ``cap`` is correct with the share the calibration
    curve gives there (``forced_correct``). So ``auto`` answers when that share is > 0 (goodput can only
    gain), and gives the fallback reply when it is 0.0 (the curve says a forced reply at this cap is never
    right: goodput is equal, and the viewer still gets a reply in time, where shed gives none). Without a
    calibration curve (a floor set in the config, or none) ``auto`` answers: nothing says a forced reply is
    never right. This weighs each request alone, not the engine time a forced reply takes from later ones.
    """
    if setting == "shed":
        return FloorAction("shed", "configured; 429 at admission, the fallback reply when the wait for an engine "
                                   "slot ate the floor")
    if setting != "auto":
        return FloorAction(setting, "configured")
    curve = floor.curve
    if curve is None:
        source = "the floor is set in the config" if floor.source == "config" else "no floor"
        return FloorAction("answer", f"no thinking calibration ({source}): a forced reply may be right, shed and "
                                     f"fallback never are")
    share = forced_correct(curve.caps, curve.correct, cap)
    where = f"{_source(floor)}"
    if cap not in curve.caps and curve.caps[0] < cap < curve.caps[-1]:
        i = next(i for i, c in enumerate(curve.caps) if c > cap)
        where += f"; interpolated between caps {curve.caps[i - 1]} and {curve.caps[i]}"
    if share > 0:
        return FloorAction("answer", f"forced reply {_pct(share)} correct at cap {cap} ({where}) > 0 for "
                                     f"shed/fallback")
    return FloorAction("fallback", f"forced reply 0.0% correct at cap {cap} ({where}): no goodput to gain, "
                                   f"the fallback reply reaches the viewer in time")


def _ranges(caps: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> "0-2, 5"."""
    out: list[str] = []
    start = prev = caps[0]
    for c in [*caps[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ", ".join(out)


def below_floor_summary(setting: str, floor: ThinkingFloor) -> dict[str, str]:
    """What requests below ``floor`` get on an endpoint set to ``setting``, over every cap below the floor:
    ``{"setting", "action", "why"}``, ``action`` one of shed, fallback, answer, or answer_or_fallback
    (``auto`` answers at some caps and falls back at others; ``why`` names which)."""
    if floor.tokens <= 0:
        return {"setting": setting, "action": "answer", "why": "no thinking floor: every request gets the "
                                                               "thinking cap that fits"}
    if setting != "auto" or floor.curve is None:
        choice = below_floor_action(setting, floor, 0)
        return {"setting": setting, "action": choice.action, "why": choice.why}
    curve = floor.curve
    below = range(floor.tokens)
    zero = [c for c in below if forced_correct(curve.caps, curve.correct, c) <= 0]
    measured = [(c, s) for c, s in zip(curve.caps, curve.correct, strict=True) if c < floor.tokens]
    if not measured:  # every measured cap is at or above the floor: the smallest one stands for those below
        measured = [(curve.caps[0], curve.correct[0])]
    points = ", ".join(f"{_pct(s)}{' correct' if i == 0 else ''} at cap {c}" for i, (c, s) in enumerate(measured))
    if not zero:
        action = "answer"
        why = (f"forced replies {points} ({_source(floor)}) > 0 for shed/fallback: answer below the "
               f"{floor.tokens}-token floor")
    elif len(zero) == len(below):
        action = "fallback"
        why = (f"forced replies 0.0% correct at every cap below the {floor.tokens}-token floor "
               f"({_source(floor)}): the fallback reply, in time")
    else:
        action = "answer_or_fallback"
        why = (f"fallback at caps {_ranges(zero)} (forced replies 0.0% correct there), answer at the other "
               f"caps below the {floor.tokens}-token floor: forced replies {points} ({_source(floor)})")
    return {"setting": setting, "action": action, "why": why}


def below_floor_report(config: ServeConfig, floors: Mapping[str, ThinkingFloor]) -> dict[str, dict[str, dict[str, str]]]:
    """``{endpoint: {model: below_floor_summary(...)}}`` for both endpoints: what ``/health``,
    ``livethink serve --dry-run`` and ``livethink doctor`` show."""
    return {
        ep: {m: below_floor_summary(getattr(config.endpoints, ep).below_min_thinking, f) for m, f in floors.items()}
        for ep in ("livestream", "chat")
    }
