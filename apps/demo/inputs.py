"""What the Live reply tab sends: the product catalog, pasted docs and the chat history, parsed from text.

Catalog lines (``artifacts/tiny/data/catalog.jsonl``, written by ``livethink data generate``):
``{"split", "product_id", "title", "text"}``. The docs box holds one product per paragraph (products are
separated by a blank line); a pasted paragraph that does not start with ``[ID]`` becomes product ``pasted-N``.
History lines read ``viewer: ...`` or ``host: ...`` (a line without a prefix is the viewer's).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from livethink.data.schema import ProductDoc, Turn

_ID_LINE = re.compile(r"^\[(?P<id>[^\]\s]{1,64})\]\s*(?P<title>.*?)(?:\s*\([^)]*\))?\s*$")
_ROLE = re.compile(r"^\s*(viewer|host|user|assistant)\s*:\s*(.*)$", re.IGNORECASE)
MAX_PRODUCTS = 50  # the server's limit on product_docs


class InputError(ValueError):
    """Something typed into the form cannot be sent (the message says what and where)."""


@dataclass(frozen=True)
class CatalogEntry:
    split: str
    product_id: str
    title: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.product_id} · {self.title} ({self.split})"


def load_catalog(path: str | Path | None) -> tuple[list[CatalogEntry], str | None]:
    """Read the catalog; returns (entries, a warning for the UI or None). Never raises on a bad file."""
    if path is None:
        return [], "no catalog given (--catalog): paste product docs instead"
    p = Path(path)
    if not p.is_file():
        return (
            [],
            f"catalog {p} not found (run `livethink data generate` or `make demo`): paste product docs instead",
        )
    entries: list[CatalogEntry] = []
    bad = 0
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            entries.append(
                CatalogEntry(str(d.get("split", "")), str(d["product_id"]), str(d["title"]), str(d["text"]))
            )
        except (ValueError, KeyError, TypeError):
            bad += 1
    warning = f"catalog {p}: skipped {bad} malformed line(s)" if bad else None
    if not entries:
        warning = f"catalog {p} has no products: paste product docs instead"
    return entries, warning


def docs_for(entries: list[CatalogEntry], labels: list[str] | str | None) -> str:
    """The docs-box text for the chosen catalog labels (one paragraph per product)."""
    if isinstance(labels, str):
        labels = [labels]
    by_label = {e.label: e for e in entries}
    return "\n\n".join(by_label[x].text for x in labels or [] if x in by_label)


def parse_docs(text: str) -> tuple[ProductDoc, ...]:
    """Docs-box text → product docs (one per blank-line-separated paragraph)."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]
    if not paragraphs:
        raise InputError("Product docs: pick a product from the catalog or paste its docs")
    if len(paragraphs) > MAX_PRODUCTS:
        raise InputError(f"Product docs: {len(paragraphs)} products, at most {MAX_PRODUCTS}")
    docs = []
    for i, para in enumerate(paragraphs, 1):
        first = para.splitlines()[0].strip()
        m = _ID_LINE.match(first)
        pid, title = (m["id"], m["title"] or m["id"]) if m else (f"pasted-{i}", first[:120])
        docs.append(ProductDoc(product_id=pid, title=title or pid, text=para))
    return tuple(docs)


def parse_history(text: str) -> tuple[Turn, ...]:
    """History-box text → turns (``viewer: ...`` / ``host: ...`` lines, oldest first)."""
    turns = []
    for n, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        m = _ROLE.match(line)
        role, content = (m[1].lower(), m[2].strip()) if m else ("viewer", line.strip())
        role = {"user": "viewer", "assistant": "host"}.get(role, role)
        if not content:
            raise InputError(f"History line {n}: empty message after '{role}:'")
        try:
            turns.append(Turn(role=role, content=content))
        except ValidationError as exc:  # pragma: no cover - the regex already restricts roles
            raise InputError(f"History line {n}: {exc.errors()[0]['msg']}") from None
    return tuple(turns)


def parse_question(text: str) -> str:
    q = (text or "").strip()
    if not q:
        raise InputError("Question: type the viewer's question")
    if len(q) > 4000:
        raise InputError(f"Question: {len(q)} characters, at most 4000")
    return q
