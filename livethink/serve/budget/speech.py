"""Speech pacing of a streamed livestream reply: pure math, seconds and words.

A speaking avatar starts a sentence as soon as it has it and speaks at ``rate_wps`` words per second. So only the
*first* sentence has to be ready by the deadline; each later one only has to arrive before the avatar would
finish speaking the ones before it. With sentence ``k`` arriving at ``t_k`` with ``w_k`` words:

    speech_end_1 = t_1 + w_1 / rate
    speech_end_k = max(t_k, speech_end_(k−1)) + w_k / rate
    stall_k      = t_k > speech_end_(k−1)            (k ≥ 2: the avatar fell silent, waiting for it)

Generation of a streamed reply is cut (``paced_bound``) at the first-sentence cut ``first_cut`` (the deadline
less the send reserve) until a sentence has been sent, and afterwards at ``first_cut + W / rate`` with ``W`` the
words sent so far, never later than ``limit``. Every sentence sent under that bound arrives by
``first_cut + W_(k−1) / rate``, so by induction ``speech_end_k ≤ first_cut + W_k / rate``: a reply paced this way
never keeps the avatar speaking past the deadline plus its own speaking time.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SPEECH_RATE_WPS = 2.5  # conversational speech, about 150 words a minute


def word_count(text: str) -> int:
    """Words the avatar speaks in ``text`` (whitespace-separated; ``$39.50`` is one)."""
    return len(text.split())


def speaking_s(words: int, rate_wps: float) -> float:
    """Seconds it takes to speak ``words`` words at ``rate_wps`` words per second."""
    if rate_wps <= 0:
        raise ValueError(f"rate_wps must be > 0, got {rate_wps}")
    return max(0, words) / rate_wps


def paced_bound(first_cut: float, words_sent: int, rate_wps: float, limit: float) -> float:
    """When generation of a streamed reply is cut: ``first_cut`` until a sentence is sent, then
    ``first_cut + words_sent / rate_wps``, at most ``limit`` (and never before ``first_cut``)."""
    return max(first_cut, min(limit, first_cut + speaking_s(words_sent, rate_wps)))


@dataclass
class SpeechClock:
    """The avatar's speech, sentence by sentence: when it will have finished speaking what it was sent, and how
    often it fell silent waiting for the next sentence (a *stall*)."""

    rate_wps: float = DEFAULT_SPEECH_RATE_WPS
    end: float | None = None  # when the avatar finishes speaking what it has (None: nothing yet)
    words: int = 0
    sentences: int = 0
    stalls: int = 0

    def add(self, t: float, words: int) -> bool:
        """A sentence of ``words`` words arrives at ``t``; True when it is a stall (it came after the avatar had
        finished speaking the ones before it)."""
        stall = self.end is not None and t > self.end
        start = t if self.end is None else max(t, self.end)
        self.end = start + speaking_s(words, self.rate_wps)
        self.words += max(0, words)
        self.sentences += 1
        self.stalls += int(stall)
        return stall
