"""Text helpers shared by the rubric rewards: normalisation, word-boundary phrase search, number mentions.

A *number mention* is a numeral in text with the unit its context gives it:

- ``usd``: ``$`` / ``USD`` before it or ``dollars`` / ``usd`` / ``bucks`` after it (``$1,299.00``, ``76.80 dollars``);
- ``pct``: ``%`` or ``percent`` after it;
- ``days`` / ``months``: ``day(s)``, ``-day``, ``business days`` / ``month(s)``; ``weeks`` and ``years`` are
  converted (×7 days, ×12 months);
- ``items``: ``left``, ``items``, ``units``, ``pieces``, ``pairs``, ``remaining``, ``in stock``, ``available``;
- ``ml``; otherwise ``None`` (a bare number: a quantity, a size, ...).

Digits glued to letters (``P0384``) are not numbers. Number words (``one`` … ``twenty``) count only when a unit
follows them (``two days``, ``three left``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})


def clean(text: str) -> str:
    """Lower-case, unify quotes and collapse whitespace (keeps punctuation)."""
    return re.sub(r"\s+", " ", text.translate(_APOSTROPHES).lower()).strip()


def lower_same_length(text: str) -> str:
    """Lower-case with quotes unified, character for character: offsets into it are offsets into ``text``."""
    text = text.translate(_APOSTROPHES)
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


# The reply says the docs do not state the answer ("the docs don't say", "not stated", "no information", ...).
NOT_STATED = re.compile(
    r"\bnot (?:stated|specified|mentioned|listed)\b"
    r"|\b(?:doesn't|does not|don't|do not|didn't|did not)\s+(?:say|state|mention|specify|list)\b"
    r"|\b(?:isn't|is not|aren't|are not|wasn't|was not)\s+(?:stated|specified|mentioned|listed|in the docs)\b"
    r"|\bno (?:info|information|details?|mention|data)\b"
    r"|\b(?:can't|cannot|couldn't|can not) (?:find|see|tell|say|confirm)\b"
    r"|\b(?:don't|do not) know\b|\bnot sure\b|\bunknown\b"
)


def normalize_entity(text: str) -> str:
    """Entity form: lower-case words only, no leading article (``The Pebble-Trail!`` -> ``pebble trail``)."""
    words = re.sub(r"[^0-9a-z]+", " ", text.translate(_APOSTROPHES).lower()).split()
    while words and words[0] in {"the", "a", "an"}:
        words = words[1:]
    return " ".join(words)


@lru_cache(maxsize=4096)
def _phrase_re(phrase: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)")


def find_phrase(text: str, phrase: str) -> int:
    """Position of ``phrase`` in ``text`` with word boundaries, case-insensitive (on ``clean``ed text); -1 if absent."""
    match = _phrase_re(clean(phrase)).search(clean(text))
    return match.start() if match else -1


def has_phrase(text: str, phrase: str) -> bool:
    return find_phrase(text, phrase) >= 0


def find_entity(text: str, name: str) -> int:
    """Position of an entity name in ``normalize_entity(text)`` (word boundaries); -1 if absent or empty."""
    name = normalize_entity(name)
    if not name:
        return -1
    match = _phrase_re(name).search(normalize_entity(text))
    return match.start() if match else -1


@dataclass(frozen=True)
class Mention:
    value: float
    unit: str | None
    start: int
    end: int
    text: str
    is_word: bool = False
    unit_end: int = -1  # end of the unit word after the number ("3 days"), else ``end``


_NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)
_WORDS = {w: i for i, w in enumerate(_NUMBER_WORDS)}
_NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\d])"
    r"|(?<![\w])(?P<word>" + "|".join(_WORDS) + r")(?!\w)",
    re.IGNORECASE,
)
_PREFIX_USD = re.compile(r"(?:\$|\bus\$|\busd)\s?$", re.IGNORECASE)
# (pattern on the text after the number, unit, multiplier)
_SUFFIXES: tuple[tuple[re.Pattern[str], str, float], ...] = tuple(
    (re.compile(p, re.IGNORECASE), unit, mult)
    for p, unit, mult in (
        (r"\s?%|\s*percent\b", "pct", 1.0),
        (r"\s*(?:us\s)?(?:dollars?|usd|bucks)\b", "usd", 1.0),
        (r"[\s-]*(?:business\s+|working\s+)?days?\b", "days", 1.0),
        (r"[\s-]*weeks?\b", "days", 7.0),
        (r"[\s-]*months?\b", "months", 1.0),
        (r"[\s-]*years?\b", "months", 12.0),
        (r"\s*ml\b", "ml", 1.0),
        (r"\s*(?:left|items?|units?|pieces?|pcs|pairs?|remaining|in stock|available)\b", "items", 1.0),
    )
)


def number_mentions(text: str) -> list[Mention]:
    """Every number mention in ``text``, in order (see the module docstring for units)."""
    mentions = []
    for match in _NUMBER.finditer(text):
        is_word = match.group("word") is not None
        value = float(_WORDS[match.group("word").lower()]) if is_word else float(match.group("num").replace(",", ""))
        unit, mult, start, unit_end = None, 1.0, match.start(), match.end()
        prefix = None if is_word else _PREFIX_USD.search(text[max(0, start - 4) : start])
        if prefix:
            unit, start = "usd", start - (len(prefix.group(0)))
        else:
            after = text[match.end() : match.end() + 24]
            for pattern, name, factor in _SUFFIXES:
                if suffix := pattern.match(after):
                    unit, mult, unit_end = name, factor, match.end() + suffix.end()
                    break
        if is_word and unit is None:
            continue
        mentions.append(Mention(value * mult, unit, start, match.end(), text[start : match.end()], is_word, unit_end))
    return mentions


def sentences(text: str) -> list[str]:
    """Split into sentences at ``.``, ``!``, ``?`` followed by space (decimals like ``67.12`` stay whole)."""
    return [s for s in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if s]
