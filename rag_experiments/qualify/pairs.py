"""Labeled faithfulness pairs for judge qualification, and their loaders.

A :class:`LabeledPair` is a question, the contexts an answer must be grounded in, an answer and
a human-known label: ``faithful`` (every statement of the answer is in the contexts) or
``hallucinated`` (the answer contradicts them or adds facts they do not hold).

Sources:

- **bundled** (default): ``data/faithfulness_pairs.jsonl`` in this package, written by hand
  for this project from the bundled sample's documents (``datasets/sample``): 34 questions of
  ``datasets/sample/eval.jsonl``, each with a faithful answer and a hallucinated one (29 that
  contradict the contexts, 5 that add an unsupported fact), 68 pairs. The contexts are the
  sample's reference contexts plus one distractor passage from another document, first for
  even-numbered questions and last for odd ones (so the position probe reverses something);
  ``relevant`` lists the indices of the supporting contexts.
- **HaluEval QA** (``qa_one-turn_data.jsonl``, MIT; Li et al., 2023): each record
  ``{knowledge, question, right_answer, hallucinated_answer}`` gives two pairs, the right
  answer (faithful) and the hallucinated one, against the same knowledge. The knowledge is
  two HotpotQA paragraphs glued without a space; it is split into contexts where a sentence
  end is directly followed by a capital letter (``"…century.First for Women…"``).
- **FaithBench** (``FaithBench.csv``, CC BY-NC-SA 4.0; Bao et al., NAACL 2025): a source
  passage and an LLM summary with human labels. ``worst-label`` (the most severe label any
  annotator gave) ``Consistent`` or ``Benign`` → faithful, ``Questionable`` or ``Unwanted`` →
  hallucinated (the repository's strict binarisation). The question is "Summarize the
  passage." and the source is one context.
- **our format**: JSON Lines with ``question``, ``contexts``, ``answer``, ``label``
  (``faithful``/``hallucinated``) and optionally ``id`` and ``relevant`` — the bundled file's
  format.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_experiments.errors import DatasetError

BUNDLED = Path(__file__).resolve().parent / "data" / "faithfulness_pairs.jsonl"
"""The hand-written labeled set shipped with the package."""

FORMATS = ("auto", "pairs", "halueval", "faithbench")
"""Accepted ``judge_check.format`` values."""

FAITHFUL, HALLUCINATED = "faithful", "hallucinated"
FAITHBENCH_QUESTION = "Summarize the passage."
_FAITHBENCH_OK = frozenset({"Consistent", "Benign"})
_FAITHBENCH_LABELS = _FAITHBENCH_OK | {"Questionable", "Unwanted"}
_GLUED_SENTENCE = re.compile(r"(?<=[.!?])(?=[A-Z])")


@dataclass(frozen=True)
class LabeledPair:
    """One answer with a known faithfulness label.

    Attributes:
        id: Unique id within its set.
        question: The question the answer replies to.
        contexts: The passages the answer must be grounded in, in order.
        answer: The answer.
        faithful: True when every statement of the answer is supported by ``contexts``.
        relevant: Indices into ``contexts`` of the passages that support the faithful answer
            (all of them when the source does not say).
    """

    id: str
    question: str
    contexts: tuple[str, ...]
    answer: str
    faithful: bool
    relevant: tuple[int, ...] = field(default=())

    @property
    def relevant_text(self) -> str:
        """The supporting passages joined by blank lines (all contexts when unknown)."""
        chosen = self.relevant or tuple(range(len(self.contexts)))
        return "\n\n".join(self.contexts[i] for i in chosen)


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{path}:{line_no}: not valid JSON ({exc.msg}); the file "
                    "must hold one JSON object per line"
                ) from exc
    return rows


def load_our_pairs(path: str | Path = BUNDLED) -> list[LabeledPair]:
    """Read pairs in our JSON Lines format (the bundled set's; see the module docstring).

    Raises:
        DatasetError: A row misses a field or has another label.
    """
    path = Path(path)
    pairs = []
    for i, row in enumerate(_read_jsonl(path), start=1):
        try:
            label = row["label"]
            if label not in (FAITHFUL, HALLUCINATED):
                raise KeyError("label")
            pairs.append(
                LabeledPair(
                    id=str(row.get("id") or i),
                    question=row["question"],
                    contexts=tuple(row["contexts"]),
                    answer=row["answer"],
                    faithful=label == FAITHFUL,
                    relevant=tuple(row.get("relevant") or ()),
                )
            )
        except KeyError as exc:
            raise DatasetError(
                f"{path}: row {i} has no valid {exc.args[0]!r}; each row needs question, "
                "contexts (a list), answer and label (faithful or hallucinated)"
            ) from None
    return pairs


def load_halueval(path: str | Path) -> list[LabeledPair]:
    """Read HaluEval QA (``qa_one-turn_data.jsonl``): two pairs per record.

    Raises:
        DatasetError: A record misses one of the four fields.
    """
    path = Path(path)
    pairs = []
    for i, row in enumerate(_read_jsonl(path), start=1):
        try:
            contexts = tuple(
                p.strip() for p in _GLUED_SENTENCE.split(row["knowledge"]) if p.strip()
            )
            for suffix, answer, ok in (
                ("right", row["right_answer"], True),
                ("hallucinated", row["hallucinated_answer"], False),
            ):
                pairs.append(
                    LabeledPair(
                        f"halueval-{i}-{suffix}", row["question"], contexts, str(answer), ok
                    )
                )
        except KeyError as exc:
            raise DatasetError(
                f"{path}: record {i} has no {exc.args[0]!r}; HaluEval QA records hold "
                "knowledge, question, right_answer and hallucinated_answer"
            ) from None
    return pairs


def load_faithbench(path: str | Path) -> list[LabeledPair]:
    """Read FaithBench (``FaithBench.csv``): one pair per row, labeled by ``worst-label``.

    Raises:
        DatasetError: A column is missing or a label is unknown.
    """
    path = Path(path)
    pairs = []
    with path.open(encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=1):
            label = row.get("worst-label")
            if label not in _FAITHBENCH_LABELS or not row.get("source"):
                raise DatasetError(
                    f"{path}: row {i} has no source or an unknown worst-label {label!r}; "
                    f"FaithBench rows hold source, summary and worst-label "
                    f"({', '.join(sorted(_FAITHBENCH_LABELS))})"
                )
            pairs.append(
                LabeledPair(
                    f"faithbench-{i}",
                    FAITHBENCH_QUESTION,
                    (row["source"].strip(),),
                    row["summary"].strip(),
                    label in _FAITHBENCH_OK,
                )
            )
    return pairs


def load_pairs(path: str | Path | None = None, fmt: str = "auto") -> list[LabeledPair]:
    """Load a labeled set: the bundled one (``path`` None) or a file in one of
    :data:`FORMATS` (``auto``: ``.csv`` = FaithBench; JSON Lines with ``knowledge`` =
    HaluEval; otherwise our format).

    Raises:
        DatasetError: The file is missing, the format unknown, or a row invalid.
    """
    if fmt not in FORMATS:
        raise DatasetError(f"judge_check.format={fmt!r} is not one of {', '.join(FORMATS)}")
    if path is None:
        return load_our_pairs(BUNDLED)
    target = Path(path).expanduser()
    if not target.is_file():
        raise DatasetError(
            f"judge_check.data={target} does not exist; pass a HaluEval QA "
            ".jsonl, FaithBench.csv or a file in our pairs format"
        )
    if fmt == "auto":
        if target.suffix.lower() == ".csv":
            fmt = "faithbench"
        else:
            with target.open(encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), "{}")
            fmt = "halueval" if "knowledge" in json.loads(first) else "pairs"
    loader = {"pairs": load_our_pairs, "halueval": load_halueval, "faithbench": load_faithbench}
    return loader[fmt](target)


def balanced_subset(
    pairs: Sequence[LabeledPair], n: int | None, seed: int = 0
) -> list[LabeledPair]:
    """A seeded subset with both labels equally represented.

    Takes ``n // 2`` faithful and ``n - n // 2`` hallucinated pairs (each label drawn with
    ``numpy.random.default_rng(seed).permutation``, then kept in file order), or, when
    ``n`` is None, ``min(#faithful, #hallucinated)`` of each. A pair of HaluEval (right and
    hallucinated answer to one record) is not kept together on purpose: each label is drawn
    on its own.

    Raises:
        DatasetError: ``n`` < 2, or a label has fewer pairs than asked.
    """
    faithful = [i for i, p in enumerate(pairs) if p.faithful]
    hallucinated = [i for i, p in enumerate(pairs) if not p.faithful]
    if n is None:
        n_f = n_h = min(len(faithful), len(hallucinated))
    else:
        if n < 2:
            raise DatasetError(f"n={n}: a judge check needs at least 2 pairs (one per label)")
        n_f, n_h = n // 2, n - n // 2
    if n_f > len(faithful) or n_h > len(hallucinated):
        raise DatasetError(
            f"n={n} needs {n_f} faithful and {n_h} hallucinated pairs; the set has "
            f"{len(faithful)} and {len(hallucinated)}: lower n"
        )
    rng = np.random.default_rng(seed)
    keep = {faithful[i] for i in rng.permutation(len(faithful))[:n_f]}
    keep |= {hallucinated[i] for i in rng.permutation(len(hallucinated))[:n_h]}
    return [pairs[i] for i in sorted(keep)]
