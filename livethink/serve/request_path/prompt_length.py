"""How long a request's prompt is, part by part, and the 400 that names the part that is too long.

Two checks guard ``max_prompt_tokens`` (``jobs.JobBuilder``):

- **Before any tokenising**, on the event loop: a count of characters. No token of a model's tokenizer spans more
  characters than its longest vocabulary entry (``chars_per_token``: a byte-level entry has one character per
  byte, a SentencePiece or WordPiece one at least one per character), and Unicode normalisation (NFC, NFKC)
  composes at most 4 code points into one character, so a prompt of ``c`` characters has at least
  ``c / (4 * longest)`` tokens. A request whose parts alone cannot fit is refused without rendering or tokenising
  it (a 1 MiB body of product docs costs a count of characters, not a second of tokenising). Tokenizers that may
  drop characters (a normaliser or pre-tokeniser this module does not know to keep every character) get no
  bound, and only the exact check.
- **The exact count**, in a worker thread: the rendered prompt's ids. Past the limit, each part is tokenised on
  its own (only then: the error path) and the message gives every part's count and the template's (the system
  prompt, the chat markup and the thinking prefill: the rest of the prompt), naming the longest part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from livethink.serve.errors import APIError, bad_request

CODE = "context_length_exceeded"
NORMALISATION_SHRINK = 4  # the most code points canonical composition (NFC, NFKC) turns into one character
TEMPLATE = "template"  # the part of the prompt no request field supplies
SHOWN = 6  # parts listed in a message (the longest first once there are more)
# normalisers and pre-tokenisers (``tokenizers`` JSON ``type``) that keep every character of the text (or add
# some); anything else (Strip, Replace, BertNormalizer, Whitespace, a Split that removes its matches) may drop
# characters, so its tokenizer gets no bound
_KEEPING_NORMALISERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Prepend"}
_KEEPING_PRE_TOKENISERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "Split"}


def _keeps_characters(component: Mapping[str, Any] | None, keeping: set[str]) -> bool:
    if component is None:
        return True
    kind = component.get("type")
    if kind == "Sequence":
        members = component.get("normalizers") or component.get("pretokenizers") or []
        return all(_keeps_characters(m, keeping) for m in members)
    if kind == "Split" and str(component.get("behavior", "")).lower() == "removed":
        return False
    return kind in keeping


def chars_per_token(tokenizer: Any) -> int | None:
    """The most characters of text one token of ``tokenizer`` (a Hugging Face fast tokenizer) can stand for,
    normalisation included (``NORMALISATION_SHRINK`` times its longest vocabulary entry); None when it cannot
    be bounded (not a fast tokenizer, or one that may drop characters)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        spec = json.loads(backend.to_str())
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 (an unusual tokenizer: no bound, the exact check still applies)
        return None
    if not vocab or not _keeps_characters(spec.get("normalizer"), _KEEPING_NORMALISERS):
        return None
    if not _keeps_characters(spec.get("pre_tokenizer"), _KEEPING_PRE_TOKENISERS):
        return None
    longest = max(len(token) for token in vocab)
    shrink = 1 if spec.get("normalizer") is None else NORMALISATION_SHRINK
    return max(1, longest) * shrink


def fewest_tokens(chars: int, per_token: int) -> int:
    """The fewest tokens ``chars`` characters can take when no token stands for more than ``per_token``."""
    return math.ceil(chars / per_token)


def longest(sizes: Mapping[str, int]) -> str:
    """The name of the largest part (the first of equals); the template only when no other part exists."""
    named = {k: v for k, v in sizes.items() if k != TEMPLATE}
    pool = named or sizes
    return max(pool, key=lambda k: pool[k])


def with_template(total: int, parts: Mapping[str, int]) -> dict[str, int]:
    """``parts`` (tokens of each request part, tokenised alone) and the template's: the rest of ``total``."""
    return {**parts, TEMPLATE: max(0, total - sum(parts.values()))}


def _listing(sizes: Mapping[str, int]) -> str:
    items = list(sizes.items())
    if len(items) > SHOWN:
        template = [(k, v) for k, v in items if k == TEMPLATE]
        rest = sorted((kv for kv in items if kv[0] != TEMPLATE), key=lambda kv: -kv[1])
        items = rest[: SHOWN - len(template)] + template
        items.append(("others", sum(v for _, v in rest[SHOWN - len(template):])))
    return ", ".join(f"{k} {v:,}" for k, v in items)


def too_many_characters(
    chars: Mapping[str, int], limit: int, per_token: int, param: str | None
) -> APIError | None:
    """The 400 for parts of ``chars`` characters (part → characters) that cannot fit ``limit`` tokens when a
    token spans at most ``per_token`` characters, else None. ``param``: the field to name (None: the longest
    part)."""
    total = sum(chars.values())
    least = fewest_tokens(total, per_token)
    if least <= limit:
        return None
    part = longest(chars)
    return bad_request(
        f"{param or part}: the prompt has at least {least:,} tokens ({total:,} characters, and no token of this "
        f"model spans more than {per_token} characters), more than this server's limit of {limit:,}; {part} is the "
        f"longest part (characters: {_listing(chars)})",
        param or part,
        CODE,
    )


def too_many_tokens(
    tokenizer: Any, total: int, limit: int, parts: Mapping[str, Sequence[str]] | None, param: str | None
) -> APIError:
    """The 400 for a prompt of ``total`` tokens over ``limit``: each of ``parts`` (part → its texts) tokenised
    alone, the template's share, the longest part named. ``param``: the field to name (None: the longest part)."""
    if not parts:
        return bad_request(
            f"{param}: the prompt has {total:,} tokens, more than this server's limit of {limit:,}", param, CODE
        )
    counts = {
        name: sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts if text)
        for name, texts in parts.items()
    }
    sizes = with_template(total, counts)
    part = longest(sizes)
    return bad_request(
        f"{param or part}: the prompt has {total:,} tokens, more than this server's limit of {limit:,}; {part} is "
        f"the longest part (tokens: {_listing(sizes)})",
        param or part,
        CODE,
    )


__all__ = [
    "CODE",
    "chars_per_token",
    "fewest_tokens",
    "longest",
    "too_many_characters",
    "too_many_tokens",
    "with_template",
]
