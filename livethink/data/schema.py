"""The task record: one viewer question about products shown in a livestream.

LiveThinking's task: given product docs D, the viewer's question Q and the dialogue history H, produce a
reasoning trace T and a reply R. A record carries everything needed to judge a reply without an LLM:
the reference answer (with its kind) and the doc facts a helpful reply would add.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Split = Literal["train", "validation", "test", "holdout"]
AnswerKind = Literal["number", "entity", "yes_no", "not_stated"]
QuestionKind = Literal["attribute", "availability", "price", "comparison", "dialogue_ref", "unanswerable"]
QUESTION_KINDS: tuple[str, ...] = QuestionKind.__args__  # type: ignore[attr-defined]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProductDoc(_Strict):
    """One product's documentation as the avatar sees it (rendered text)."""

    product_id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    text: str = Field(min_length=1)


class Turn(_Strict):
    """One earlier message of the livestream chat."""

    role: Literal["viewer", "host"]
    content: str = Field(min_length=1)


class Reference(_Strict):
    """The machine-checkable answer.

    - ``number``: ``value`` is a float, ``unit`` says what it counts (``usd``, ``days``, ``months``, ``items``, ...).
    - ``entity``: ``value`` is the canonical string; ``aliases`` are other accepted spellings.
    - ``yes_no``: ``value`` is a bool.
    - ``not_stated``: ``value`` is None; the right reply says the docs do not state it.
    """

    kind: AnswerKind
    value: float | bool | str | None = None
    unit: str | None = None
    aliases: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _value_matches_kind(self) -> Reference:
        expected = {
            "number": (int, float),
            "entity": (str,),
            "yes_no": (bool,),
            "not_stated": (type(None),),
        }[self.kind]
        value = self.value
        ok = isinstance(value, expected) and not (self.kind == "number" and isinstance(value, bool))
        if not ok:
            raise ValueError(f"reference.value {value!r} does not fit kind {self.kind!r}")
        if self.kind == "entity" and not str(value).strip():
            raise ValueError("reference.value must be a non-empty string for kind 'entity'")
        return self


class HelpfulFact(_Strict):
    """A doc fact that a helpful reply adds beyond the bare answer.

    ``fact`` is the sentence; ``match`` lists lower-case phrases, any one of which shows the reply mentions it.
    """

    fact: str = Field(min_length=1)
    match: tuple[str, ...] = Field(min_length=1)

    @field_validator("match")
    @classmethod
    def _lower_non_empty(cls, phrases: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(p.strip().lower() for p in phrases)
        if any(not p for p in cleaned):
            raise ValueError("helpful_facts.match phrases must be non-empty")
        return cleaned


class Task(_Strict):
    """One LiveShop (or user-supplied) question with its reference."""

    id: str = Field(min_length=1)
    split: Split
    product_docs: tuple[ProductDoc, ...] = Field(min_length=1)
    question: str = Field(min_length=1)
    history: tuple[Turn, ...] = ()
    reference: Reference
    helpful_facts: tuple[HelpfulFact, ...] = ()
    kind: QuestionKind
    difficulty: int = Field(ge=1, le=3)

    @property
    def product_ids(self) -> tuple[str, ...]:
        return tuple(doc.product_id for doc in self.product_docs)

    @property
    def docs_text(self) -> str:
        return "\n\n".join(doc.text for doc in self.product_docs)
