"""Citation accuracy of answers that cite their sources: ALCE's citation recall and precision.

Source: Gao, Yen, Yu, Chen, "Enabling Large Language Models to Generate Text with Citations"
(ALCE), EMNLP 2023, §2.3 "Citation quality", and its ``eval.py`` (``compute_autoais``). The
response is split into statements s_1..s_n (sentences); each statement cites the passages C_i
named by its markers, and φ(P, s) is the entailment check of statement s by the concatenated
passages P (an NLI model in ALCE; here the claim layer's checker, :mod:`~rag_experiments.
metrics.claim_layer`, memoised per (statement, passages)).

* **citation_recall** = (1/n) Σ_i 1[C_i ≠ ∅ ∧ φ(concat(C_i), s_i)] — a statement is recalled
  when it cites something and its citations together entail it.
* **citation_precision** = (Σ_i Σ_{c ∈ C_i} prec(c, i)) / Σ_i |C_i|, where a citation is
  precise unless it is *irrelevant*: with |C_i| = 1, prec = φ(c, s_i); with |C_i| > 1,
  prec = 0 for every citation when φ(concat(C_i), s_i) fails, else c is irrelevant (prec 0)
  when φ(c, s_i) fails **and** φ(concat(C_i ∖ {c}), s_i) holds (the others suffice without it),
  otherwise prec = 1.

Markers: ``[k]`` cites the k-th retrieved context (1-based, as the baseline numbers them), and
``[id]`` (not a number) cites the retrieved chunk whose id (``retrieved_ids``) is ``id``; one
marker may list several, ``[1, 3]``. A marker naming no retrieved context (k out of range, an
unknown id: a fabricated citation) counts as a citation whose statement it cannot support (ALCE:
"citations out of range" make the joint check fail). Markers are removed from the statement
before it is checked.

Edges: target failed → NaN ``target_error``; no answer → ``no_response``; a refusal →
``refusal``; no statement → ``no_claims``; precision with no citation at all → NaN
``no_citations`` (ALCE reports 0; recall is then 0, since no statement is cited).
"""

from __future__ import annotations

import re
from typing import Any

from rag_experiments.metrics.claim_layer import ClaimLayer, Usage
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.metrics.diagnostics import ClaimMetric
from rag_experiments.metrics.refusal import is_refusal
from rag_experiments.records import MetricValue, RagResponse, Sample
from rag_experiments.text.sentences import split_sentences

ALCE = "ALCE (Gao et al., EMNLP 2023, §2.3; eval.py compute_autoais)"
"""Source line of the citation formulas."""

MARKER = re.compile(r"\[([^\[\]]+)\]")
"""A citation marker: ``[1]``, ``[1, 3]``, ``[doc-7]``."""


def parse_citations(
    sentence: str, n_contexts: int, ids: list[str] | None
) -> tuple[str, list[int | None]]:
    """The statement without its markers, and the context indices (0-based) it cites; None
    for a marker that names no retrieved context.

    Args:
        sentence: One statement with its markers.
        n_contexts: Retrieved contexts.
        ids: Their chunk ids, when the target gives them.
    """
    cited: list[int | None] = []
    for group in MARKER.findall(sentence):
        for part in (p.strip() for p in group.split(",")):
            if not part:
                continue
            if part.isdigit():
                k = int(part)
                cited.append(k - 1 if 1 <= k <= n_contexts else None)
            else:
                cited.append(ids.index(part) if ids and part in ids else None)
    text = " ".join(MARKER.sub(" ", sentence).split())
    text = re.sub(r"\s+([.!?,;:])", r"\1", text)
    return text, cited


def citation_scores(
    statements: list[tuple[str, list[int | None]]],
    contexts: list[str],
    entails: Any,
) -> tuple[MetricValue, MetricValue]:
    """ALCE's citation recall and precision of one response (module docstring).

    Args:
        statements: ``(statement, cited context indices)`` per statement (None = names no
            context).
        contexts: The retrieved context texts.
        entails: ``entails(passage_text, statement) -> bool``.

    Returns:
        ``(citation_recall, citation_precision)``.
    """
    if not statements:
        nan = MetricValue.nan("no_claims")
        return nan, nan

    def joint(refs: list[int | None], s: str) -> bool:
        if not refs or any(r is None for r in refs):
            return False
        return bool(entails("\n".join(contexts[r] for r in refs), s))  # type: ignore[index]

    recalled, precise, total = 0, 0, 0
    for s, refs in statements:
        ok = joint(refs, s)
        recalled += ok
        total += len(refs)
        if ok and len(refs) > 1:
            for c in refs:
                alone = bool(entails(contexts[c], s))  # type: ignore[index]
                if alone:
                    precise += 1
                    continue
                rest = list(refs)
                rest.remove(c)  # one copy, as ALCE's subset_exclude.remove
                precise += not joint(rest, s)
        else:
            precise += ok
    recall = MetricValue(recalled / len(statements))
    precision = MetricValue(precise / total) if total else MetricValue.nan("no_citations")
    return recall, precision


class CitationAccuracy(ClaimMetric):
    """ALCE citation recall and precision of a response's ``[k]`` / ``[id]`` markers (module
    docstring); entailment by the shared claim layer's checker (judge, verifier or lexical)."""

    name = "citation_accuracy"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "citation_recall",
                True,
                0.0,
                1.0,
                "statements whose citations together entail them / statements",
                ALCE,
            ),
            MetricDefinition(
                "citation_precision",
                True,
                0.0,
                1.0,
                "citations that support their statement (not irrelevant) / citations",
                ALCE,
            ),
        )
    )

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.error is not None:
            return self._nan_all("target_error")
        if resp.no_response:
            return self._nan_all("no_response")
        text = resp.response.strip()
        if text and is_refusal(MARKER.sub(" ", text), self.refusal_patterns):
            return self._nan_all("refusal")
        contexts = list(resp.retrieved_contexts)
        statements = [
            parse_citations(s, len(contexts), resp.retrieved_ids) for s in split_sentences(text)
        ]
        statements = [(s, refs) for s, refs in statements if s.strip(" .")]
        layer: ClaimLayer = self.layer()
        usage, verdicts = Usage(), []

        def entails(passage: str, statement: str) -> bool:
            checked, used = layer.check([statement], [passage], sample.user_input)
            usage.add(used)
            if checked.error is not None:
                raise _CheckFailed(checked.error)
            verdicts.append((statement, passage[:60], checked.entailed[0][0]))
            return checked.entailed[0][0]

        try:
            recall, precision = citation_scores(statements, contexts, entails)
        except _CheckFailed as exc:
            recall = precision = MetricValue.nan(str(exc))
        lines = [
            f"{s} | cites {', '.join('?' if r is None else str(r + 1) for r in refs) or 'nothing'}"
            for s, refs in statements
        ]
        record = {
            "judge_calls": usage.calls,
            "judge_prompt_tokens": usage.prompt_tokens,
            "judge_completion_tokens": usage.completion_tokens,
            "judgements": usage.judgements,
            "statements": [{"statement": s, "cites": refs} for s, refs in statements],
            "claim_lines": lines,
        }
        return {"citation_recall": recall, "citation_precision": precision}, record


class _CheckFailed(Exception):
    """An entailment check failed (its reason is the NaN reason)."""
