"""Correctness against the thinking cap, and the minimum thinking budget it implies for a model.

The curve is measured by budget forcing (s1, arXiv 2501.19393) exactly as the server forces, in token space
(``livethink.data.budget_forcing``): the greedy completion of the prompt the server renders is cut once its
thinking (the tokens after the start delimiter, pre-filled ones included) reaches the cap ``c``, the format's
forced end follows, and the model writes its reply from those token ids with the server's reply reserve; a
completion whose thinking closes before ``c`` is unchanged. The model's minimum thinking budget is the smallest cap
whose correctness reaches ``ratio`` times the uncapped one: below it, a forced reply is wrong more often. Below the
floor the server sheds, falls back or answers per endpoint; its default (``auto``) reads this curve's correctness at
the request's cap (``livethink.serve.request_path.quality``).

The result is saved beside the checkpoint as ``thinking_calibration.json`` and read by the server.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CALIBRATION_FILE = "thinking_calibration.json"
DEFAULT_CAPS = (0, 32, 64, 96, 128, 192)  # ``livethink eval --thinking-caps`` without a list (uncapped is measured too)


@dataclass(frozen=True)
class ThinkingCurve:
    """Correct (and helpful) shares per thinking cap; ``None`` as a cap means uncapped."""

    caps: tuple[int, ...]
    correct: tuple[float, ...]
    helpful: tuple[float, ...]
    uncapped_correct: float
    uncapped_helpful: float
    ratio: float
    min_thinking_tokens: int | None  # None: no cap reaches ratio × uncapped (think without a cap)
    n_tasks: int
    split: str = ""
    command: str = ""
    reply_reserve: int | None = None  # reply tokens after a forced end (None: not recorded)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_caps(text: str) -> tuple[int, ...]:
    """``"0,16,32"`` -> (0, 16, 32): non-negative, increasing, at least one."""
    try:
        caps = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--thinking-caps: expected comma-separated integers, got {text!r}") from None
    if not caps:
        raise ValueError("--thinking-caps: give at least one cap")
    if any(c < 0 for c in caps) or any(b <= a for a, b in zip(caps, caps[1:], strict=False)):
        raise ValueError(f"--thinking-caps: caps must be >= 0 and increasing, got {text!r}")
    return caps


def min_thinking(caps: Sequence[int], correct: Sequence[float], reference: float, ratio: float) -> int | None:
    """Smallest cap with ``correct ≥ ratio · reference`` (a small tolerance for float error), else None."""
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    target = ratio * reference
    for cap, share in zip(caps, correct, strict=True):
        if share + 1e-12 >= target:
            return cap
    return None


def build_curve(
    caps: Sequence[int],
    correct: Sequence[float],
    helpful: Sequence[float],
    uncapped_correct: float,
    uncapped_helpful: float,
    ratio: float,
    n_tasks: int,
    split: str = "",
    command: str = "",
    reply_reserve: int | None = None,
) -> ThinkingCurve:
    return ThinkingCurve(
        tuple(caps),
        tuple(correct),
        tuple(helpful),
        uncapped_correct,
        uncapped_helpful,
        ratio,
        min_thinking(caps, correct, uncapped_correct, ratio),
        n_tasks,
        split,
        command,
        reply_reserve,
    )


def save_curve(curve: ThinkingCurve, path: str | Path) -> Path:
    """Write the curve (a directory means ``<dir>/thinking_calibration.json``)."""
    path = Path(path)
    if path.is_dir():
        path = path / CALIBRATION_FILE
    path.write_text(json.dumps(curve.to_json(), indent=2) + "\n")
    return path


def load_curve(path: str | Path) -> ThinkingCurve | None:
    """The curve saved at ``path`` (a file, or a checkpoint directory holding one); None when there is none.
    A file that exists but does not parse is an error naming it (never ignored silently)."""
    path = Path(path)
    if path.is_dir():
        path = path / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["caps"], data["correct"], data["helpful"] = (tuple(data[k]) for k in ("caps", "correct", "helpful"))
        curve = ThinkingCurve(**data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a thinking calibration ({exc})") from None
    if curve.min_thinking_tokens is not None and (curve.min_thinking_tokens < 0 or math.isnan(curve.ratio)):
        raise ValueError(f"{path}: min_thinking_tokens must be >= 0")
    return curve

