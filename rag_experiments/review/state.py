"""The review state: one card per question–answer pair, persisted on every change.

A card holds the pair as the reviewer sees and edits it (question, reference answer, type,
answerable flag), where it came from (document, source file, page, the reference passages),
its review ``status`` (``pending``, ``approved``, ``rejected``), whether it was ``edited``, and
the ``original`` text it had when it arrived. The full sample it came from is kept, so a saved
pair keeps its ids, contexts and provenance.

Cards arrive from the generator's ``eval.jsonl`` as pairs are accepted, or from a dataset in our
JSONL format (``rag-exp review dataset=<path>``). The state is one JSON file in the workspace,
rewritten atomically (temporary file + :func:`os.replace`) under a lock after every change and
read back on start, so a page reload or a server restart on the same ``--workspace`` loses
nothing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag_experiments.errors import ReviewError
from rag_experiments.records import QUESTION_TYPES, Sample

Status = Literal["pending", "approved", "rejected"]
STATUSES: tuple[str, ...] = ("pending", "approved", "rejected")
EDITABLE: tuple[str, ...] = ("user_input", "reference", "question_type", "answerable")
"""Card fields a reviewer can change (the ``original`` keeps their first values)."""

STATE_VERSION = 1

MAX_QUESTION_CHARS = 2000
MAX_ANSWER_CHARS = 10000


class Card(BaseModel):
    """One pair under review.

    Attributes:
        id: The card's id, also the saved sample's id: the sample id, or
            ``<origin>-<sample id>`` when a card of another origin has that id already (a
            generation into a workspace that reviews a generated dataset).
        user_input: The question, as edited.
        reference: The reference answer, as edited (``""`` for unanswerable questions).
        reference_contexts: The source passages the pair was written from.
        question_type: The type, as edited.
        answerable: The answerable flag, as edited.
        doc_id: The first reference document's id.
        source: The source file, relative to the corpus folder, when known.
        page: The 1-based page of the (first) source passage, when known (PDFs).
        status: ``pending``, ``approved`` or ``rejected``.
        edited: True when an editable field differs from its original value.
        original: The editable fields as they arrived.
        origin: ``generation`` (from the generator) or ``dataset`` (a loaded file).
        sample: The sample as it arrived (JSON form), written back with the edits on save.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    user_input: str
    reference: str = ""
    reference_contexts: list[str] = Field(default_factory=list)
    question_type: str | None = None
    answerable: bool = True
    doc_id: str | None = None
    source: str | None = None
    page: int | None = None
    status: Status = "pending"
    edited: bool = False
    original: dict[str, Any] = Field(default_factory=dict)
    origin: str = "generation"
    sample: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_sample(cls, sample: Sample, origin: str) -> Card:
        """A pending card for ``sample``."""
        meta = sample.metadata
        page = meta.get("page")
        return cls(
            id=sample.id,
            user_input=sample.user_input,
            reference=sample.reference,
            reference_contexts=list(sample.reference_contexts),
            question_type=sample.question_type,
            answerable=sample.answerable,
            doc_id=sample.reference_doc_ids[0] if sample.reference_doc_ids else None,
            source=str(meta["source"]) if meta.get("source") else None,
            page=page if isinstance(page, int) and not isinstance(page, bool) else None,
            original={k: getattr(sample, k) for k in EDITABLE},
            origin=origin,
            sample=sample.model_dump(mode="json"),
        )

    def public(self) -> dict[str, Any]:
        """The card for the page and the JSON API (without the stored sample)."""
        return self.model_dump(mode="json", exclude={"sample"})

    def sample_fields(self) -> dict[str, Any]:
        """The sample's fields with the edits applied and the review recorded in
        ``metadata.review`` (status, edited, and the original text when edited)."""
        fields = {**self.sample, "id": self.id, **{k: getattr(self, k) for k in EDITABLE}}
        review: dict[str, Any] = {"status": self.status, "edited": self.edited}
        if self.edited:
            review["original"] = dict(self.original)
        fields["metadata"] = {**(self.sample.get("metadata") or {}), "review": review}
        return fields


class CardPatch(BaseModel):
    """A change to one card (``PATCH /cards/<id>``): any subset of the editable fields and
    the status; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    user_input: str | None = Field(default=None, max_length=MAX_QUESTION_CHARS)
    reference: str | None = Field(default=None, max_length=MAX_ANSWER_CHARS)
    question_type: str | None = Field(default=None, max_length=100)
    answerable: bool | None = None
    status: Status | None = None


class ReviewState:
    """The cards of one workspace, persisted to ``path`` after every change (thread-safe).

    Args:
        path: The state file; read when it exists.

    Raises:
        ReviewError: The file exists but is not a valid state file (the message says how to
            start afresh).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._cards: dict[str, Card] = {}
        if self.path.is_file():
            self._cards = {card.id: card for card in self._read()}

    def _read(self) -> list[Card]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [Card.model_validate(row) for row in data["cards"]]
        except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
            raise ReviewError(
                f"{self.path} is not a readable review state ({exc}); move it away or start "
                "with another --workspace"
            ) from exc

    def _write(self) -> None:
        """Write every card atomically (caller holds the lock)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = {
            "format_version": STATE_VERSION,
            "cards": [card.model_dump(mode="json") for card in self._cards.values()],
        }
        with tmp.open("w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def cards(self) -> list[Card]:
        """Copies of every card, in arrival order."""
        with self._lock:
            return [card.model_copy(deep=True) for card in self._cards.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._cards)

    def add_samples(self, samples: Iterable[Sample], origin: str) -> int:
        """Add a pending card for each sample of ``origin`` that has no card yet.

        Returns:
            The number of cards added.
        """
        with self._lock:
            known = {(c.origin, c.sample.get("id", c.id)) for c in self._cards.values()}
            added = 0
            for sample in samples:
                if (origin, sample.id) in known:
                    continue
                card = Card.from_sample(sample, origin)
                if card.id in self._cards:  # the same id from another origin
                    card.id = f"{origin}-{sample.id}"
                    number = 2
                    while card.id in self._cards:
                        card.id = f"{origin}-{sample.id}-{number}"
                        number += 1
                self._cards[card.id] = card
                known.add((origin, sample.id))
                added += 1
            if added:
                self._write()
            return added

    def remove_origin(self, origin: str) -> int:
        """Drop every card of ``origin`` (a generation started over).

        Returns:
            The number of cards removed.
        """
        with self._lock:
            gone = [key for key, card in self._cards.items() if card.origin == origin]
            for key in gone:
                del self._cards[key]
            if gone:
                self._write()
            return len(gone)

    def update(self, card_id: str, patch: CardPatch) -> Card:
        """Apply ``patch`` to card ``card_id`` and persist it.

        Returns:
            The updated card.

        Raises:
            ReviewError: No card has that id (404), or the new question type is neither one
                of the 8 nor the card's original one (400).
        """
        with self._lock:
            card = self._cards.get(card_id)
            if card is None:
                raise ReviewError(f"no card with id {card_id!r}; reload the page", status=404)
            changes = patch.model_dump(exclude_unset=True, exclude_none=True)
            if "question_type" in patch.model_fields_set and patch.question_type is None:
                changes["question_type"] = None
            kind = changes.get("question_type")
            allowed = (*QUESTION_TYPES, card.original.get("question_type"))
            if kind is not None and kind not in allowed:
                raise ReviewError(
                    f"card {card_id}: question_type {kind!r} is not one of "
                    f"{', '.join(QUESTION_TYPES)} (or the card's own type)"
                )
            updated = card.model_copy(update=changes)
            updated.edited = any(getattr(updated, k) != updated.original.get(k) for k in EDITABLE)
            self._cards[card_id] = updated
            self._write()
            return updated.model_copy(deep=True)


def card_stats(cards: Iterable[Card]) -> dict[str, Any]:
    """``GET /stats``: counts and average lengths of the cards as they are now (edits included).

    Lengths follow :mod:`rag_experiments.generate.stats` (``rag-exp dataset stats``): question
    words averaged over every card, answer words over the cards with a non-empty reference.

    Returns:
        ``total``, ``by_type`` (cards per type, ``(none)`` when unset),
        ``avg_question_words``, ``avg_question_chars``, ``avg_answer_words``, ``by_status``
        (``pending`` / ``approved`` / ``rejected``), ``edited`` and ``approved_by_type``.
    """
    from rag_experiments.generate.stats import compute_stats

    cards = list(cards)
    samples = [
        Sample.model_construct(**{**c.sample, **{k: getattr(c, k) for k in EDITABLE}})
        for c in cards
    ]  # no validation: a card may be mid-edit (blank question)
    stats = compute_stats(samples)
    by_status = {status: sum(c.status == status for c in cards) for status in STATUSES}
    approved_by_type: dict[str, int] = {}
    for card in cards:
        if card.status == "approved":
            kind = card.question_type or "(none)"
            approved_by_type[kind] = approved_by_type.get(kind, 0) + 1
    return {
        "total": stats.n_samples,
        "by_type": stats.by_type,
        "avg_question_words": stats.avg_question_words,
        "avg_question_chars": stats.avg_question_chars,
        "avg_answer_words": stats.avg_answer_words,
        "by_status": by_status,
        "edited": sum(c.edited for c in cards),
        "approved_by_type": approved_by_type,
    }
