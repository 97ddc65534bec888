"""``rag-exp dataset report``: the quality of an evaluation dataset in our JSONL format.

Everything :mod:`~rag_experiments.generate.stats` computes (counts per type, answerability,
average lengths), plus (``n`` = samples):

- **type balance**: each type's share of the samples, and the normalised Shannon entropy
  ``H / ln(k)`` over the k types present (1 = every type equally frequent; 1.0 by convention
  for a single type; Pielou's evenness, 1966);
- **answerable share**: answerable samples / n;
- **question length**: words of ``user_input`` (whitespace split, as ``stats``) — min, 25th
  percentile, median, 75th percentile, max (``numpy.percentile``, linear) and a histogram;
- **near-duplicate pairs**: two questions whose word-token sets (NFKC, case-folded ``\\w+``,
  :func:`~rag_experiments.text.normalize.word_tokens`) have a Jaccard index
  ``|A ∩ B| / |A ∪ B| ≥ 0.8`` (``--dup-threshold``). Token sets, not embeddings: the report
  needs no model, and a reworded question with the same words is what it should catch
  (``rag-exp generate`` already drops embedding near-duplicates at cosine 0.95);
- **corpus coverage** (with ``--corpus``): the corpus is split by the configured chunker
  (``chunker``, default ``semantic``). A chunk is *covered* when at least one sample's
  reference context matches it by the rule of the chunk-level metrics
  (:func:`~rag_experiments.metrics.context_match.context_matches`, ``min_overlap`` 0.7: the
  chunk holds ≥ 70 % of the reference's distinct words, or one text holds the other); a
  sample's references are compared with the chunks of its ``reference_doc_ids`` when those
  are in the corpus, else with every chunk. A document is covered when a sample names it in
  ``reference_doc_ids`` or one of its chunks is covered. Reported: covered / all, for
  documents and for chunks, and the uncovered documents;
- **groundedness** (with ``--judge``): each answerable sample's reference answer judged
  against its reference contexts with our faithfulness prompt
  (:class:`~rag_experiments.metrics.faithfulness.Faithfulness`: supported claims / claims).
  Reported: the mean over valid scores, the share fully grounded (score 1.0), the NaN
  reasons, and the ids scoring below 1. Samples without a reference or reference contexts
  are not judged.

Output: Markdown on the console (``--json``: JSON); with ``--out DIR``: ``report.md``,
``report.json`` and PNG plots (``question_length.png``, ``question_types.png``,
``groundedness.png`` with a judge; matplotlib, Agg backend). ``--log`` logs the report to
MLflow experiment ``datasets`` (metrics, files as artifacts).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag_experiments.generate.stats import DatasetStats, compute_stats
from rag_experiments.metrics.audit import nan_to_none
from rag_experiments.records import Chunk, Document, Sample
from rag_experiments.text.normalize import word_tokens

DUP_THRESHOLD = 0.8
"""Token Jaccard index at or above which two questions are near-duplicates."""

MIN_OVERLAP = 0.7
"""The context-match share used for coverage (the chunk-level metrics' default)."""

DATASETS_EXPERIMENT = "datasets"


@dataclass
class Coverage:
    """Corpus coverage (definitions in the module docstring).

    Attributes:
        chunker: The chunker's ``config_id``.
        n_documents: Documents in the corpus.
        n_documents_covered: Documents a question is drawn from.
        n_chunks: Chunks of the corpus.
        n_chunks_covered: Chunks a reference context matches.
        uncovered_documents: Ids of the documents no question is drawn from.
    """

    chunker: str
    n_documents: int
    n_documents_covered: int
    n_chunks: int
    n_chunks_covered: int
    uncovered_documents: list[str] = field(default_factory=list)

    @property
    def document_share(self) -> float:
        """Covered documents / documents, in [0, 1]; NaN for an empty corpus."""
        return self.n_documents_covered / self.n_documents if self.n_documents else math.nan

    @property
    def chunk_share(self) -> float:
        """Covered chunks / chunks, in [0, 1]; NaN without chunks."""
        return self.n_chunks_covered / self.n_chunks if self.n_chunks else math.nan


@dataclass
class Groundedness:
    """Reference answers judged against their reference contexts.

    Attributes:
        n_judged: Samples judged (answerable, with a reference and reference contexts).
        n_valid: Of those, samples with a score.
        mean: Mean faithfulness over valid scores (NaN when none).
        share_grounded: Share of valid scores equal to 1.0.
        scores: Per sample id, the score (None = NaN).
        failures: NaN reasons and counts.
        judge: The judge's identity (provider, model, digest).
        judge_calls: Judge calls made.
    """

    n_judged: int
    n_valid: int
    mean: float
    share_grounded: float
    scores: dict[str, float | None]
    failures: dict[str, int]
    judge: dict[str, str]
    judge_calls: int

    @property
    def not_grounded(self) -> list[str]:
        """Ids whose score is below 1.0."""
        return [k for k, v in self.scores.items() if v is not None and v < 1.0]


@dataclass
class DatasetReport:
    """The whole report.

    Attributes:
        stats: What ``rag-exp dataset stats`` computes.
        type_shares: Per type, its share of the samples.
        type_evenness: Normalised entropy of the type counts in [0, 1].
        answerable_share: Answerable samples / samples.
        question_words: Words per question, in sample order.
        near_duplicates: ``(id_a, id_b, jaccard)`` pairs, highest first.
        coverage: Corpus coverage, None without a corpus.
        groundedness: Judge groundedness, None without a judge.
    """

    stats: DatasetStats
    type_shares: dict[str, float]
    type_evenness: float
    answerable_share: float
    question_words: list[int]
    near_duplicates: list[tuple[str, str, float]]
    coverage: Coverage | None = None
    groundedness: Groundedness | None = None

    @property
    def question_length(self) -> dict[str, float]:
        """min, p25, median, p75, max of :attr:`question_words` (NaN when empty)."""
        keys = ("min", "p25", "median", "p75", "max")
        if not self.question_words:
            return dict.fromkeys(keys, math.nan)
        values = np.percentile(np.asarray(self.question_words, dtype=float), [0, 25, 50, 75, 100])
        return {k: float(v) for k, v in zip(keys, values, strict=True)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN → None)."""
        out: dict[str, Any] = {
            "stats": self.stats.to_dict(),
            "type_shares": self.type_shares,
            "type_evenness": self.type_evenness,
            "answerable_share": self.answerable_share,
            "question_length_words": self.question_length,
            "near_duplicates": [{"a": a, "b": b, "jaccard": j} for a, b, j in self.near_duplicates],
        }
        if self.coverage is not None:
            out["coverage"] = {
                **asdict(self.coverage),
                "document_share": self.coverage.document_share,
                "chunk_share": self.coverage.chunk_share,
            }
        if self.groundedness is not None:
            out["groundedness"] = {
                **asdict(self.groundedness),
                "not_grounded": self.groundedness.not_grounded,
            }
        return nan_to_none(out)

    def metrics(self) -> dict[str, float]:
        """The report's numbers as MLflow metrics."""
        out = {
            "n_samples": float(self.stats.n_samples),
            "answerable_share": self.answerable_share,
            "type_evenness": self.type_evenness,
            "n_near_duplicates": float(len(self.near_duplicates)),
        }
        out.update({f"question_words_{k}": v for k, v in self.question_length.items()})
        if self.coverage is not None:
            out["coverage_documents"] = self.coverage.document_share
            out["coverage_chunks"] = self.coverage.chunk_share
        if self.groundedness is not None:
            out["groundedness_mean"] = self.groundedness.mean
            out["groundedness_share_grounded"] = self.groundedness.share_grounded
            out["groundedness_n_valid"] = float(self.groundedness.n_valid)
            out["judge_calls"] = float(self.groundedness.judge_calls)
        return out

    def markdown(self) -> str:
        """The report as Markdown."""
        s = self.stats
        q = self.question_length
        lines = [
            f"# Dataset report: {s.path}",
            "",
            f"- samples: {s.n_samples} ({s.n_answerable} answerable, {s.n_unanswerable} "
            f"unanswerable; answerable share {self.answerable_share:.3f})",
            f"- question length (words): min {q['min']:g}, p25 {q['p25']:g}, median "
            f"{q['median']:g}, p75 {q['p75']:g}, max {q['max']:g} "
            f"(mean {s.avg_question_words:.1f})",
            f"- reference answer length: {s.avg_answer_words:.1f} words on average",
            f"- type evenness (normalised entropy): {self.type_evenness:.3f}",
            "",
            "| type | count | share | unanswerable |",
            "|---|---:|---:|---:|",
        ]
        for kind, count in sorted(s.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(
                f"| {kind} | {count} | {self.type_shares[kind]:.3f} | "
                f"{s.unanswerable_by_type.get(kind, 0)} |"
            )
        lines += [
            "",
            f"## Near-duplicate questions (token Jaccard ≥ {DUP_THRESHOLD}): "
            f"{len(self.near_duplicates)}",
        ]
        lines += [f"- {a} ~ {b}: {j:.3f}" for a, b, j in self.near_duplicates]
        if self.coverage is not None:
            c = self.coverage
            lines += [
                "",
                f"## Corpus coverage (chunker {c.chunker})",
                f"- documents: {c.n_documents_covered} / {c.n_documents} ({c.document_share:.3f})",
                f"- chunks: {c.n_chunks_covered} / {c.n_chunks} ({c.chunk_share:.3f})",
                f"- documents no question is drawn from: "
                f"{', '.join(c.uncovered_documents) or '(none)'}",
            ]
        if self.groundedness is not None:
            g = self.groundedness
            lines += [
                "",
                f"## Groundedness of reference answers (judge "
                f"{g.judge.get('provider')}/{g.judge.get('model')})",
                f"- judged {g.n_judged}, valid {g.n_valid}, mean faithfulness "
                f"{g.mean:.3f}, fully grounded {g.share_grounded:.3f}",
                f"- failures: {g.failures or '(none)'}",
                f"- below 1.0: {', '.join(g.not_grounded) or '(none)'}",
            ]
        return "\n".join(lines) + "\n"


def evenness(counts: Sequence[int]) -> float:
    """Normalised Shannon entropy ``H / ln(k)`` of positive counts (1.0 for k ≤ 1)."""
    x = np.asarray([c for c in counts if c > 0], dtype=float)
    if x.size <= 1:
        return 1.0
    p = x / x.sum()
    return float(-(p * np.log(p)).sum() / math.log(x.size))


def near_duplicates(
    samples: Sequence[Sample], threshold: float = DUP_THRESHOLD
) -> list[tuple[str, str, float]]:
    """Question pairs whose word-token Jaccard index is ``≥ threshold``, highest first (ties
    in sample order)."""
    sets = [frozenset(word_tokens(s.user_input)) for s in samples]
    found = []
    for i in range(len(samples)):
        for j in range(i + 1, len(samples)):
            union = sets[i] | sets[j]
            if not union:
                continue
            jac = len(sets[i] & sets[j]) / len(union)
            if jac >= threshold:
                found.append((samples[i].id, samples[j].id, jac))
    return sorted(found, key=lambda t: -t[2])


def corpus_coverage(
    samples: Sequence[Sample],
    documents: Sequence[Document],
    chunker: Any,
    min_overlap: float = MIN_OVERLAP,
) -> Coverage:
    """Coverage of ``documents`` split by ``chunker`` (rule in the module docstring)."""
    from rag_experiments.metrics.context_match import context_matches

    chunks: list[Chunk] = [c for doc in documents for c in chunker.split(doc)]
    by_doc: dict[str, list[int]] = {}
    for i, c in enumerate(chunks):
        by_doc.setdefault(c.doc_id, []).append(i)
    covered_chunks: set[int] = set()
    covered_docs = {d for s in samples for d in s.reference_doc_ids if d in by_doc}
    for s in samples:
        named = [i for d in s.reference_doc_ids for i in by_doc.get(d, [])]
        candidates = named or range(len(chunks))
        for ref in s.reference_contexts:
            covered_chunks.update(
                i for i in candidates if context_matches(ref, chunks[i].text, min_overlap)
            )
    covered_docs |= {chunks[i].doc_id for i in covered_chunks}
    ids = [d.id for d in documents]
    return Coverage(
        chunker=str(chunker.config_id),
        n_documents=len(ids),
        n_documents_covered=len(covered_docs & set(ids)),
        n_chunks=len(chunks),
        n_chunks_covered=len(covered_chunks),
        uncovered_documents=[d for d in ids if d not in covered_docs],
    )


def groundedness(samples: Sequence[Sample], judge: Any) -> Groundedness:
    """Judge each answerable sample's reference answer against its reference contexts with
    the faithfulness metric (its public ``evaluate`` / ``audit``)."""
    from rag_experiments.metrics.faithfulness import Faithfulness
    from rag_experiments.records import RagResponse

    judged = [
        s
        for s in samples
        if s.answerable and s.reference.strip() and any(c.strip() for c in s.reference_contexts)
    ]
    metric = Faithfulness(judge=judge)
    rows = metric.evaluate(
        judged,
        [
            RagResponse(response=s.reference, retrieved_contexts=list(s.reference_contexts))
            for s in judged
        ],
    )
    values = [row["faithfulness"] for row in rows]
    valid = [v.value for v in values if v.is_valid]
    return Groundedness(
        n_judged=len(judged),
        n_valid=len(valid),
        mean=float(np.mean(valid)) if valid else math.nan,
        share_grounded=sum(v == 1.0 for v in valid) / len(valid) if valid else math.nan,
        scores={
            s.id: (v.value if v.is_valid else None) for s, v in zip(judged, values, strict=True)
        },
        failures=dict(Counter(v.reason or "nan" for v in values if not v.is_valid)),
        judge={k: str(v) for k, v in judge.describe().items()},
        judge_calls=sum(int(r.get("judge_calls", 0)) for r in metric.audit()),
    )


def build_report(
    samples: Sequence[Sample],
    path: str = "",
    *,
    documents: Sequence[Document] | None = None,
    chunker: Any = None,
    judge: Any = None,
    dup_threshold: float = DUP_THRESHOLD,
) -> DatasetReport:
    """The report of ``samples`` (coverage when ``documents`` and ``chunker`` are given,
    groundedness when ``judge`` is)."""
    stats = compute_stats(samples, path)
    n = stats.n_samples
    return DatasetReport(
        stats=stats,
        type_shares={k: v / n for k, v in stats.by_type.items()},
        type_evenness=evenness(list(stats.by_type.values())),
        answerable_share=stats.n_answerable / n if n else math.nan,
        question_words=[len(s.user_input.split()) for s in samples],
        near_duplicates=near_duplicates(samples, dup_threshold),
        coverage=(
            corpus_coverage(samples, documents, chunker)
            if documents is not None and chunker is not None
            else None
        ),
        groundedness=groundedness(samples, judge) if judge is not None else None,
    )


def write_report(report: DatasetReport, out: Path) -> list[Path]:
    """Write ``report.md``, ``report.json`` and the PNG plots into ``out`` (created)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    files = [out / "report.md", out / "report.json"]
    files[0].write_text(report.markdown(), encoding="utf-8")
    files[1].write_text(
        json.dumps(report.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8"
    )

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        files.append(out / name)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    words = report.question_words or [0]
    ax.hist(words, bins=range(min(words), max(words) + 2), color="#4c72b0")
    ax.set(xlabel="words per question", ylabel="questions", title="Question length")
    save(fig, "question_length.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    kinds = sorted(report.stats.by_type, key=lambda k: -report.stats.by_type[k])
    ax.barh(kinds, [report.stats.by_type[k] for k in kinds], color="#55a868")
    ax.invert_yaxis()
    ax.set(xlabel="questions", title="Question types")
    save(fig, "question_types.png")
    if report.groundedness is not None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        scores = [v for v in report.groundedness.scores.values() if v is not None]
        ax.hist(scores, bins=np.linspace(0, 1, 11), color="#c44e52")
        ax.set(
            xlabel="faithfulness of the reference answer", ylabel="samples", title="Groundedness"
        )
        save(fig, "groundedness.png")
    return files
