"""Split a streamed completion into reasoning and reply deltas, and pick what is usable at a deadline.

The server pre-fills the model's reasoning start (``<think>\\n`` by default; see ``ReasoningFormat``), so generated
text starts inside the reasoning; everything after the reasoning end (``</think>``) is the reply. A model that does not
think (format ``none``) produces only reply. Tags may arrive split across deltas, so a
possible tag prefix at the end of a delta is held back until the next one. The final, non-streamed split
uses ``livethink.rewards.parse.parse_completion`` (same rules as the rewards).

What a sentence is, is decided in one place (``sentence_ends``) for both uses: the usable part of a reply cut at
the deadline (``usable_reply``) and the sentences a streamed reply sends as they are decoded (``SentenceStream``).
While text may still grow, a sentence end must be followed by whitespace (``$39.`` may become ``$39.50``); once it
is final (a cut or the end of generation), the end of the text counts too. Every streaming end is a final end of
the longer text, so the sentences streamed before a cut are a prefix of its usable reply: nothing sent is ever
retracted, and at a cut the reply is exactly the sentences sent (``SentenceStream.finish``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from livethink.data.reasoning_format import THINK, ReasoningFormat

Phase = Literal["reasoning", "reply"]
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")  # final text: a stop before whitespace or the end
_SENTENCE_END_GROWING = re.compile(r"[.!?](?=\s)")  # text that may still grow: a stop before whitespace


def sentence_ends(text: str, final: bool) -> list[int]:
    """Offsets just after each sentence end (``.``, ``!``, ``?``) of ``text``: followed by whitespace, or also by
    the end of the text when it is ``final`` (no more will come). The one rule of what a sentence is."""
    pattern = _SENTENCE_END if final else _SENTENCE_END_GROWING
    return [m.end() for m in pattern.finditer(text)]


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
    ends = sentence_ends(reply, final=True)
    return reply[: ends[-1]].strip() if ends else ""


@dataclass
class SentenceStream:
    """A reply's complete sentences as it is decoded (``feed`` the reply's text pieces), then the rest of its
    usable part (``finish``). Each sentence is the exact slice of the reply (with the whitespace before it), so
    the sentences joined are the reply; a think block opened inside the reply ends it (as in the final reply).
    """

    stop: str = THINK.start  # text from here on is not reply (the reasoning start: a second think block)
    text: str = ""  # the reply so far (left-stripped, up to ``stop``)
    sent: int = 0  # characters of ``text`` sent as sentences
    _stopped: bool = field(default=False, init=False)

    @property
    def spoken(self) -> str:
        """The sentences sent so far, joined: the reply the avatar has."""
        return self.text[: self.sent]

    def feed(self, piece: str) -> list[str]:
        """The sentences ``piece`` completes (none while the last one may still grow)."""
        if self._stopped:
            return []
        text = (self.text + piece).lstrip()
        if self.stop and self.stop in text:
            text, self._stopped = text[: text.index(self.stop)], True
        self.text = text
        return self._take(sentence_ends(text, final=self._stopped))

    def finish(self, complete: bool) -> list[str]:
        """Generation is over (``complete``: it ended by itself, not at a cut): the rest of the usable reply
        (``usable_reply``), as sentences. Afterwards ``spoken`` is the usable reply."""
        usable = usable_reply(self.text, complete or self._stopped)
        assert usable.startswith(self.spoken.strip()), "a sent sentence would be retracted"
        ends = [e for e in sentence_ends(usable, final=True) if e > self.sent]
        if len(usable) > self.sent and (not ends or ends[-1] < len(usable)):
            ends.append(len(usable))  # a complete reply's last words without a stop are spoken too
        self.text = usable
        return self._take(ends)

    def _take(self, ends: list[int]) -> list[str]:
        out = []
        for end in ends:
            if end > self.sent and self.text[self.sent : end].strip():
                out.append(self.text[self.sent : end])
                self.sent = end
        return out
