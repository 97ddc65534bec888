"""``rag-exp dataset stats``: the type distribution and lengths of a dataset in our JSONL format.

Definitions (``n`` = samples counted):

- question length: characters of ``user_input`` and its whitespace-separated words, averaged
  over all samples;
- answer length: whitespace-separated words of ``reference``, averaged over the samples that
  have a non-empty reference (unanswerable questions have none);
- per type: samples per ``question_type`` (``(none)`` when unset), answerable and not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rag_experiments.data.jsonl import JsonlDataset
from rag_experiments.errors import DatasetError
from rag_experiments.generate.checkpoint import EVAL_FILE
from rag_experiments.records import Sample


@dataclass
class DatasetStats:
    """Counts and average lengths of a dataset (see the module docstring).

    Attributes:
        path: The file read.
        n_samples: Samples.
        n_answerable: Samples with ``answerable = true``.
        n_unanswerable: Samples with ``answerable = false``.
        by_type: Samples per question type.
        unanswerable_by_type: Unanswerable samples per question type.
        avg_question_chars: Mean characters per question.
        avg_question_words: Mean words per question.
        avg_answer_words: Mean words per non-empty reference answer (0 when none).
        n_with_reference: Samples with a non-empty reference answer.
        n_reference_docs: Distinct documents referenced.
    """

    path: str
    n_samples: int
    n_answerable: int
    n_unanswerable: int
    by_type: dict[str, int] = field(default_factory=dict)
    unanswerable_by_type: dict[str, int] = field(default_factory=dict)
    avg_question_chars: float = 0.0
    avg_question_words: float = 0.0
    avg_answer_words: float = 0.0
    n_with_reference: int = 0
    n_reference_docs: int = 0

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict."""
        return asdict(self)

    def format(self) -> str:
        """A human-readable table for the console."""
        lines = [
            f"{self.path}: {self.n_samples} samples ({self.n_answerable} answerable, "
            f"{self.n_unanswerable} unanswerable), {self.n_reference_docs} documents referenced",
            f"  question: {self.avg_question_chars:.1f} characters, "
            f"{self.avg_question_words:.1f} words on average",
            f"  answer:   {self.avg_answer_words:.1f} words on average "
            f"({self.n_with_reference} with a reference answer)",
            "  type                   count  unanswerable",
        ]
        for kind, count in sorted(self.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {kind:<22} {count:>5}  {self.unanswerable_by_type.get(kind, 0):>12}")
        return "\n".join(lines)


def compute_stats(samples: Sequence[Sample], path: str = "") -> DatasetStats:
    """Statistics of ``samples`` (see the module docstring for the definitions)."""
    n = len(samples)
    answers = [s.reference for s in samples if s.reference.strip()]
    return DatasetStats(
        path=path,
        n_samples=n,
        n_answerable=sum(s.answerable for s in samples),
        n_unanswerable=sum(not s.answerable for s in samples),
        by_type=dict(Counter(s.question_type or "(none)" for s in samples)),
        unanswerable_by_type=dict(
            Counter(s.question_type or "(none)" for s in samples if not s.answerable)
        ),
        avg_question_chars=sum(len(s.user_input) for s in samples) / n if n else 0.0,
        avg_question_words=sum(len(s.user_input.split()) for s in samples) / n if n else 0.0,
        avg_answer_words=sum(len(a.split()) for a in answers) / len(answers) if answers else 0.0,
        n_with_reference=len(answers),
        n_reference_docs=len({d for s in samples for d in s.reference_doc_ids}),
    )


def dataset_stats(path: str | Path) -> DatasetStats:
    """Read a dataset in our JSONL format (or a generation output folder holding
    ``eval.jsonl``) and compute its statistics.

    Raises:
        DatasetError: The file is missing or has invalid rows (every bad row listed).
    """
    target = Path(path).expanduser()
    if target.is_dir():
        target = target / EVAL_FILE
    if not target.is_file():
        raise DatasetError(
            f"{target} does not exist; pass a dataset .jsonl file or the "
            "output folder of `rag-exp generate`"
        )
    dataset = JsonlDataset(str(target)).load()
    return compute_stats(dataset.samples, str(target))
