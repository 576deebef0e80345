"""Split a streamed completion into reasoning and reply deltas, and pick what is usable at a deadline.

The server pre-fills the model's reasoning start (``<think>\\n`` by default; see ``ReasoningFormat``), so generated
text starts inside the reasoning; everything after the reasoning end (``</think>``) is the reply. A model that does not
think (format ``none``) produces only reply. Tags may arrive split across deltas, so a
possible tag prefix at the end of a delta is held back until the next one. The final, non-streamed split
uses ``livethink.rewards.parse.parse_completion`` (same rules as the rewards).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from livethink.data.reasoning_format import THINK, ReasoningFormat

Phase = Literal["reasoning", "reply"]
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


@dataclass
class ThinkSplitter:
    """Incremental splitter: ``feed(text)`` → [(phase, text), ...]; ``flush()`` at the end."""

    phase: Phase = "reasoning"
    fmt: ReasoningFormat = THINK
    _held: str = ""
    _reply_started: bool = field(default=False, init=False)
    reasoning: str = field(default="", init=False)
    reply: str = field(default="", init=False)

    def feed(self, text: str) -> list[tuple[Phase, str]]:
        text = self._held + text
        self._held = ""
        out: list[tuple[Phase, str]] = []
        if not self.fmt.thinks:
            self.phase = "reply"
        while text:
            if self.phase == "reasoning":
                close = text.find(self.fmt.end)
                if close >= 0:
                    self._emit(out, "reasoning", text[:close])
                    self.phase = "reply"
                    text = text[close + len(self.fmt.end) :]
                    continue
                keep = max(_partial_suffix(text, self.fmt.end), _partial_suffix(text, self.fmt.start))
                self._emit(out, "reasoning", text[: len(text) - keep])
                self._held = text[len(text) - keep :]
                return out
            self._emit(out, "reply", text)
            return out
        return out

    def flush(self) -> list[tuple[Phase, str]]:
        out: list[tuple[Phase, str]] = []
        if self._held:
            self._emit(out, self.phase, self._held)
            self._held = ""
        return out

    def _emit(self, out: list[tuple[Phase, str]], phase: Phase, text: str) -> None:
        if phase == "reasoning":
            text = text.replace(self.fmt.start, "")
            if not self.reasoning:
                text = text.lstrip()
        elif not self._reply_started:
            text = text.lstrip()
            self._reply_started = bool(text)
        if not text:
            return
        if phase == "reasoning":
            self.reasoning += text
        else:
            self.reply += text
        out.append((phase, text))


def usable_reply(reply: str, complete: bool) -> str:
    """The part of a reply worth speaking: all of it when generation finished, else its complete sentences.

    A reply cut by the deadline is kept up to its last sentence end (``.``, ``!``, ``?``); without one it is
    not usable ("" — the caller sends the fallback).
    """
    reply = reply.strip()
    if complete or not reply:
        return reply
    ends = [m.end() for m in _SENTENCE_END.finditer(reply)]
    return reply[: ends[-1]].strip() if ends else ""
