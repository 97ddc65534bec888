"""Validate the approved cards and write them as a dataset in our JSONL format.

Every approved card must pass, as its current (possibly edited) text:

1. the :class:`~rag_experiments.records.Sample` model (non-blank question, field types);
2. for a generated card, the generator's filters (:mod:`rag_experiments.generate.filters`):
   ``QA_FILTERS`` for an answerable pair, ``UNANSWERABLE_FILTERS`` otherwise, with the card's
   reference passages as the source; every failing filter is reported, not only the first.
   Cards of a loaded dataset skip them: those heuristics judge model output, and a dataset
   written by people (the bundled sample included) need not phrase questions with the words
   of its passages or use the generator's 8 types;
3. the answerable flag agrees with the sources: an answerable pair names a source passage or
   document (``answerable_without_source``), an unanswerable question names none
   (``unanswerable_with_source``) — flipping the flag of a card does not make it a valid pair
   of the other kind; reject it instead;
4. the JSON Schema of one line (``rag_experiments/data/schema/sample.schema.json``);
5. no exact duplicate (same normalised question) among the approved cards.

If any card fails, nothing is written and the failures are returned per card id; otherwise the
approved cards are written with :func:`~rag_experiments.data.jsonl.write_jsonl` to a temporary
file next to the output, read back with :class:`~rag_experiments.data.jsonl.JsonlDataset` (the
loader ``rag-exp run`` uses) and moved over the output in one step, so an earlier file is never
left half-written.
"""

from __future__ import annotations

import json
import os
import tempfile
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
        problems += [
            f"{'.'.join(map(str, e['loc'])) or 'sample'}: {e['msg']}" for e in exc.errors()
        ]
    pair = {
        "question": card.user_input,
        "answer": card.reference,
        "question_type": card.question_type,
        "answerable": card.answerable,
        "contexts": card.reference_contexts,
    }
    if card.origin == "generation":
        for check in QA_FILTERS if card.answerable else UNANSWERABLE_FILTERS:
            detail = check(pair)
            if detail is not None:
                problems.append(f"{check.__name__}: {detail}")
    has_source = bool(card.reference_contexts or card.sample.get("reference_doc_ids"))
    if card.answerable and not has_source:
        problems.append(
            "answerable_without_source: an answerable pair needs the passage or "
            "document that answers it; this card has none (reject it instead)"
        )
    if not card.answerable and has_source:
        problems.append(
            "unanswerable_with_source: the card still names the passage it was "
            "written from, so its answer is in the corpus (reject it instead)"
        )
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
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(
        dir=out.parent, prefix=f".{out.stem}.saving-", suffix=".jsonl"
    )
    os.close(handle)
    tmp = Path(tmp_name)
    try:
        write_jsonl(samples, tmp)
        JsonlDataset(str(tmp)).load()  # what `rag-exp run` will read
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return SaveResult(path=str(out), n_written=len(samples))
