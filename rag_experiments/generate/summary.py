"""The summary of one generation run: what was accepted, what was rejected and why, what was
skipped. Printed at the end and logged to MLflow (metrics + ``summary.json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GenerationSummary:
    """Counts of one generation run (resumed runs include what earlier runs produced).

    Attributes:
        mode: ``llm`` or ``template``.
        eval_path: The dataset file written.
        corpus: What ``dataset.corpus`` must point at to evaluate the dataset.
        n_requested: Answerable pairs asked for (``n``).
        n_unanswerable_requested: Unanswerable questions asked for.
        accepted_by_type: Accepted answerable pairs per question type.
        unanswerable_by_type: Accepted unanswerable questions per question type.
        rejects_by_filter: Rejected attempts per filter name (``question_too_short``,
            ``duplicate_near``, ``answered_by_corpus``, ``unparseable_output`` …).
        errors_by_reason: Attempts that failed on a model error, per reason (tried again on
            the next run).
        skipped_files: Input files that could not be used, ``{path: reason}``.
        n_documents: Documents read.
        n_chunks: Chunks made from them.
        n_eligible_chunks: Chunks long enough to ask about.
        n_planned: Attempts in the schedule (the attempt buffer).
        n_attempts: Attempts finished (accepted + rejected), this run and earlier ones.
        n_resumed: Samples already in the output when this run started.
        wall_time_s: Duration of this run in seconds.
        interrupted: True when the run was stopped (Ctrl-C) before it finished.
    """

    mode: str
    eval_path: str
    corpus: str
    n_requested: int = 0
    n_unanswerable_requested: int = 0
    accepted_by_type: dict[str, int] = field(default_factory=dict)
    unanswerable_by_type: dict[str, int] = field(default_factory=dict)
    rejects_by_filter: dict[str, int] = field(default_factory=dict)
    errors_by_reason: dict[str, int] = field(default_factory=dict)
    skipped_files: dict[str, str] = field(default_factory=dict)
    n_documents: int = 0
    n_chunks: int = 0
    n_eligible_chunks: int = 0
    n_planned: int = 0
    n_attempts: int = 0
    n_resumed: int = 0
    wall_time_s: float = 0.0
    interrupted: bool = False

    @property
    def n_accepted(self) -> int:
        """Accepted answerable pairs."""
        return sum(self.accepted_by_type.values())

    @property
    def n_unanswerable(self) -> int:
        """Accepted unanswerable questions."""
        return sum(self.unanswerable_by_type.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (with the two totals)."""
        data = asdict(self)
        data["n_accepted"] = self.n_accepted
        data["n_unanswerable"] = self.n_unanswerable
        return data

    def metrics(self) -> dict[str, float]:
        """Flat numeric metrics for MLflow: totals, ``accepted/<type>``,
        ``unanswerable/<type>``, ``rejected/<filter>``, ``errors/<reason>``."""
        out: dict[str, float] = {
            "n_accepted": float(self.n_accepted),
            "n_unanswerable": float(self.n_unanswerable),
            "n_requested": float(self.n_requested),
            "n_attempts": float(self.n_attempts),
            "n_planned": float(self.n_planned),
            "n_rejected": float(sum(self.rejects_by_filter.values())),
            "n_documents": float(self.n_documents),
            "n_chunks": float(self.n_chunks),
            "n_skipped_files": float(len(self.skipped_files)),
            "wall_time_s": float(self.wall_time_s),
        }
        for prefix, counts in (
            ("accepted", self.accepted_by_type),
            ("unanswerable", self.unanswerable_by_type),
            ("rejected", self.rejects_by_filter),
            ("errors", self.errors_by_reason),
        ):
            out.update({f"{prefix}/{key}": float(value) for key, value in counts.items()})
        return out

    def format(self) -> str:
        """A human-readable report for the console."""
        lines = [
            f"Dataset: {self.eval_path}",
            f"  mode {self.mode}; {self.n_documents} documents, {self.n_chunks} chunks "
            f"({self.n_eligible_chunks} long enough to ask about)",
            f"  accepted {self.n_accepted} of {self.n_requested} requested pairs, "
            f"{self.n_unanswerable} of {self.n_unanswerable_requested} unanswerable; "
            f"{self.n_attempts} of {self.n_planned} planned attempts made"
            + (
                f"; {self.n_resumed} samples were there from an earlier run"
                if self.n_resumed
                else ""
            ),
        ]
        if self.accepted_by_type:
            lines.append("  accepted per type:")
            lines += [f"    {k:<22} {v}" for k, v in sorted(self.accepted_by_type.items())]
        if self.unanswerable_by_type:
            lines.append("  unanswerable per type:")
            lines += [f"    {k:<22} {v}" for k, v in sorted(self.unanswerable_by_type.items())]
        if self.rejects_by_filter:
            lines.append("  rejected per filter:")
            lines += [
                f"    {k:<22} {v}"
                for k, v in sorted(self.rejects_by_filter.items(), key=lambda kv: (-kv[1], kv[0]))
            ]
        if self.errors_by_reason:
            lines.append("  model errors (tried again on the next run):")
            lines += [f"    {k:<22} {v}" for k, v in sorted(self.errors_by_reason.items())]
        if self.skipped_files:
            lines.append("  skipped files:")
            lines += [f"    {path}: {why}" for path, why in sorted(self.skipped_files.items())]
        lines.append(
            f"  wall time {self.wall_time_s:.1f} s"
            + ("  (INTERRUPTED: run the same command again to resume)" if self.interrupted else "")
        )
        lines.append(
            "  evaluate it with: rag-exp run dataset=jsonl "
            f"dataset.path={self.eval_path} dataset.corpus={self.corpus}"
        )
        return "\n".join(lines)
