"""Validate the approved cards and write them as a dataset in our JSONL format.

Every approved card must pass, as its current (possibly edited) text:

1. the :class:`~rag_experiments.records.Sample` model (non-blank question, field types);
2. the generator's filters (:mod:`rag_experiments.generate.filters`): ``QA_FILTERS`` for an
   answerable pair, ``UNANSWERABLE_FILTERS`` otherwise, with the card's reference passages as
   the source; every failing filter is reported, not only the first;
3. the JSON Schema of one line (``rag_experiments/data/schema/sample.schema.json``);
4. no exact duplicate (same normalised question) among the approved cards.

If any card fails, nothing is written and the failures are returned per card id; otherwise the
approved cards are written with :func:`~rag_experiments.data.jsonl.write_jsonl` and read back
with :class:`~rag_experiments.data.jsonl.JsonlDataset`, the loader ``rag-exp run`` uses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rag_experiments.data.jsonl import SCHEMA_PATH, JsonlDataset, write_jsonl
from rag_experiments.generate.dedup import question_key
from rag_experiments.generate.filters import QA_FILTERS, UNANSWERABLE_FILTERS
from rag_experiments.records import Sample
from rag_experiments.review.state import Card


@dataclass
class SaveResult:
    """What ``POST /save`` did.

    Attributes:
        path: The file written (None when nothing was).
        n_written: Samples written.
        failures: Per card id, every problem found (``filter: detail``).
    """

    path: str | None = None
    n_written: int = 0
    failures: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the file was written."""
        return self.path is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (with ``ok``)."""
        return {**asdict(self), "ok": self.ok}


@cache
def _schema_validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def card_problems(card: Card) -> tuple[Sample | None, list[str]]:
    """The sample a card saves as, and every validation problem of it (see the module
    docstring; the duplicate check needs all cards and is in :func:`validate_cards`)."""
    fields = card.sample_fields()
    problems: list[str] = []
    try:
        sample: Sample | None = Sample.model_validate(fields)
    except ValidationError as exc:
        sample = None
        problems += [f"{'.'.join(map(str, e['loc'])) or 'sample'}: {e['msg']}"
                     for e in exc.errors()]
    pair = {"question": card.user_input, "answer": card.reference,
            "question_type": card.question_type, "answerable": card.answerable,
            "contexts": card.reference_contexts}
    for check in QA_FILTERS if card.answerable else UNANSWERABLE_FILTERS:
        detail = check(pair)
        if detail is not None:
            problems.append(f"{check.__name__}: {detail}")
    if sample is not None:
        for error in _schema_validator().iter_errors(sample.model_dump(mode="json")):
            where = "/".join(map(str, error.absolute_path)) or "sample"
            problems.append(f"schema {where}: {error.message}")
    return sample, problems


def validate_cards(cards: Sequence[Card]) -> tuple[list[Sample], dict[str, list[str]]]:
    """Validate ``cards`` (the approved ones).

    Returns:
        The samples (in card order) and the problems per card id (empty when all pass).
    """
    samples: list[Sample] = []
    failures: dict[str, list[str]] = {}
    first_with: dict[str, str] = {}
    for card in cards:
        sample, problems = card_problems(card)
        key = question_key(card.user_input)
        if key in first_with:
            problems.append(f"duplicate_exact: same question as {first_with[key]}")
        else:
            first_with[key] = card.id
        if problems:
            failures[card.id] = problems
        elif sample is not None:
            samples.append(sample)
    return samples, failures


def save_approved(cards: Sequence[Card], out: Path) -> SaveResult:
    """Write the approved cards of ``cards`` to ``out`` when every one passes validation.

    Args:
        cards: All cards; only ``approved`` ones are written.
        out: The dataset file (decided by the app, never by a request).

    Returns:
        The path and count written, or the failures (nothing written).
    """
    approved = [card for card in cards if card.status == "approved"]
    samples, failures = validate_cards(approved)
    if failures or not samples:
        return SaveResult(failures=failures)
    write_jsonl(samples, out)
    JsonlDataset(str(out)).load()  # what `rag-exp run` will read
    return SaveResult(path=str(out), n_written=len(samples))
