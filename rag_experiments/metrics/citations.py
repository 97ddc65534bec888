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

**Structured citations.** When the target returns them (``RagResponse.citations``, each a
:class:`~rag_experiments.records.Citation`: the statement's text and a source), they are used
instead of the markers (markers are still removed from the statements). A citation belongs to
the first statement of the response whose normalised text (markers removed, whitespace
collapsed, case-folded, final punctuation dropped) contains the citation's normalised
statement or is contained in it; a citation that belongs to no statement counts in the
precision denominator and is never precise. Its source is matched to the retrieved contexts
in this order, the first rule that matches wins:

1. **chunk id**: ``chunk_id`` equals ``retrieved_ids[i]`` → context i;
2. **doc id**: ``doc_id`` names the document of contexts: those whose chunk id is ``doc_id``
   or starts with ``doc_id + "#"`` (our ``Chunk.id`` form), else, when
   ``retrieved_doc_ids`` has one id per context and holds ``doc_id``, the context at its rank
   → those contexts, concatenated;
3. **text, exactly**: ``text``, whitespace collapsed, equals a context (whitespace collapsed)
   or is contained in it (a quote) → the first such context in rank order;
4. **text, by overlap**: else the context holding the largest share of the text's distinct
   words (:class:`~rag_experiments.text.overlap.NormalisedText`: NFKC, case-folded ``\\w+``),
   ``|T(text) ∩ T(ctx)| / |T(text)|``, when that share is at least ``text_min_overlap``
   (default 0.7, the document matcher's default); ties go to the higher rank.

A citation no rule matches is **fabricated**: it cites nothing retrieved and supports nothing,
exactly as an out-of-range marker. An empty citation list is an answer that cites nothing.

Edges: target failed → NaN ``target_error``; no answer → ``no_response``; a refusal →
``refusal``; no statement → ``no_claims``; precision with no citation at all → NaN
``no_citations`` (ALCE reports 0; recall is then 0, since no statement is cited).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rag_experiments.metrics.claim_layer import ClaimLayer, Usage
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.metrics.diagnostics import ClaimMetric
from rag_experiments.metrics.refusal import is_refusal
from rag_experiments.records import Citation, MetricValue, RagResponse, Sample
from rag_experiments.text.overlap import NormalisedText, check_overlap
from rag_experiments.text.sentences import split_sentences

ALCE = "ALCE (Gao et al., EMNLP 2023, §2.3; eval.py compute_autoais)"
"""Source line of the citation formulas."""

MARKER = re.compile(r"\[([^\[\]]+)\]")
"""A citation marker: ``[1]``, ``[1, 3]``, ``[doc-7]``."""

TEXT_MIN_OVERLAP = 0.7
"""Default share of a cited text's distinct words a context must hold to match it (rule 4)."""

Ref = int | tuple[int, ...] | None
"""What one citation cites: a context index (0-based), several (a document's contexts), or
None (names no retrieved context: fabricated)."""


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
    return _unmarked(sentence), cited


def _unmarked(sentence: str) -> str:
    """The sentence without citation markers, whitespace collapsed."""
    text = " ".join(MARKER.sub(" ", sentence).split())
    return re.sub(r"\s+([.!?,;:])", r"\1", text)


def _key(statement: str) -> str:
    """A statement as citations are attached by: unmarked, case-folded, no final punctuation."""
    return _unmarked(statement).casefold().rstrip(" .!?;:,")


def attach_citation(statement: str, statements: Sequence[str]) -> int | None:
    """Index of the statement a citation belongs to (module docstring), or None.

    Args:
        statement: The citation's statement text.
        statements: The response's statements, markers removed.
    """
    key = _key(statement)
    for i, s in enumerate(statements):
        own = _key(s)
        if key and own and (key in own or own in key):
            return i
    return None


def match_source(
    citation: Citation,
    contexts: Sequence[str],
    ids: Sequence[str] | None,
    doc_ids: Sequence[str] | None,
    min_overlap: float = TEXT_MIN_OVERLAP,
) -> Ref:
    """The retrieved context(s) a structured citation names, by the rules of the module
    docstring (chunk id, doc id, exact text, word overlap), or None (fabricated).

    Args:
        citation: The citation.
        contexts: Retrieved context texts, rank order.
        ids: Their chunk ids, or None.
        doc_ids: The ranked retrieved document ids, or None.
        min_overlap: Share in (0, 1] for rule 4.

    Returns:
        A context index, a tuple of indices (a document's contexts), or None.
    """
    if citation.chunk_id is not None and ids and citation.chunk_id in ids:
        return list(ids).index(citation.chunk_id)
    doc = citation.doc_id
    if doc is not None:
        if ids:
            own = tuple(i for i, c in enumerate(ids) if c == doc or c.startswith(doc + "#"))
            if own:
                return own[0] if len(own) == 1 else own
        if doc_ids and len(doc_ids) == len(contexts) and doc in doc_ids:
            return list(doc_ids).index(doc)
    if citation.text is not None:
        quote = " ".join(citation.text.split())
        if quote:
            for i, ctx in enumerate(contexts):
                if quote in " ".join(ctx.split()):
                    return i
        words = NormalisedText.of(citation.text).tokens
        if words:
            shares = [len(words & NormalisedText.of(c).tokens) / len(words) for c in contexts]
            best = max(range(len(shares)), key=lambda i: (shares[i], -i), default=None)
            if best is not None and shares[best] >= min_overlap:
                return best
    return None


def structured_statements(
    statements: Sequence[str],
    citations: Sequence[Citation],
    contexts: Sequence[str],
    ids: Sequence[str] | None,
    doc_ids: Sequence[str] | None,
    min_overlap: float = TEXT_MIN_OVERLAP,
) -> tuple[list[tuple[str, list[Ref]]], int]:
    """The statements with the sources their structured citations name.

    Returns:
        ``([(statement, refs)], unattached)``: ``unattached`` counts citations that belong to
        no statement (module docstring).
    """
    refs: list[list[Ref]] = [[] for _ in statements]
    unattached = 0
    for c in citations:
        i = attach_citation(c.statement, statements)
        if i is None:
            unattached += 1
        else:
            refs[i].append(match_source(c, contexts, ids, doc_ids, min_overlap))
    return list(zip(statements, refs, strict=True)), unattached


def _indices(ref: Ref) -> tuple[int, ...]:
    return (ref,) if isinstance(ref, int) else tuple(ref or ())


def citation_scores(
    statements: Sequence[tuple[str, Sequence[Ref]]],
    contexts: Sequence[str],
    entails: Any,
    unattached: int = 0,
) -> tuple[MetricValue, MetricValue]:
    """ALCE's citation recall and precision of one response (module docstring).

    Args:
        statements: ``(statement, refs)`` per statement; a ref is a context index, a tuple of
            indices (one document's contexts, concatenated), or None (names no context).
        contexts: The retrieved context texts.
        entails: ``entails(passage_text, statement) -> bool``.
        unattached: Citations that belong to no statement (counted, never precise).

    Returns:
        ``(citation_recall, citation_precision)``.
    """
    if not statements:
        nan = MetricValue.nan("no_claims")
        return nan, nan

    def joint(refs: Sequence[Ref], s: str) -> bool:
        if not refs or any(r is None for r in refs):
            return False
        seen = dict.fromkeys(i for r in refs for i in _indices(r))
        return bool(entails("\n".join(contexts[i] for i in seen), s))

    recalled, precise, total = 0, 0, unattached
    for s, refs in statements:
        ok = joint(refs, s)
        recalled += ok
        total += len(refs)
        if ok and len(refs) > 1:
            for c in refs:
                alone = joint([c], s)
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
    """ALCE citation recall and precision of a response's structured citations, else of its
    ``[k]`` / ``[id]`` markers (module docstring); entailment by the shared claim layer's
    checker (judge, verifier or lexical).

    Args:
        text_min_overlap: Share in (0, 1] of a cited text's distinct words a retrieved context
            must hold to match it (matching rule 4); default :data:`TEXT_MIN_OVERLAP`.
        **kwargs: Those of :class:`~rag_experiments.metrics.diagnostics.ClaimMetric`.

    Raises:
        ConfigError: ``text_min_overlap`` outside (0, 1], or a bad ``checker``.
    """

    def __init__(self, *, text_min_overlap: float = TEXT_MIN_OVERLAP, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text_min_overlap = check_overlap(
            text_min_overlap,
            f"{self.name}.text_min_overlap",
            "share of a cited text's distinct words a retrieved context must hold",
        )

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
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        text = resp.response.strip()
        if text and is_refusal(MARKER.sub(" ", text), self.refusal_patterns):
            return self._nan_all("refusal")
        contexts = list(resp.retrieved_contexts)
        parsed = [
            parse_citations(s, len(contexts), resp.retrieved_ids) for s in split_sentences(text)
        ]
        statements: list[tuple[str, list[Ref]]] = [
            (s, list(refs)) for s, refs in parsed if s.strip(" .")
        ]
        unattached = 0
        if resp.citations is not None:  # structured citations replace the markers
            statements, unattached = structured_statements(
                [s for s, _ in statements],
                resp.citations,
                contexts,
                resp.retrieved_ids,
                resp.retrieved_doc_ids,
                self.text_min_overlap,
            )
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
            recall, precision = citation_scores(statements, contexts, entails, unattached)
        except _CheckFailed as exc:
            recall = precision = MetricValue.nan(str(exc))
        lines = [
            f"{s} | cites {', '.join(map(_label, refs)) or 'nothing'}" for s, refs in statements
        ]
        if unattached:
            lines.append(f"{unattached} citation(s) of no statement of the answer")
        record = {
            "judge_calls": usage.calls,
            "judge_prompt_tokens": usage.prompt_tokens,
            "judge_completion_tokens": usage.completion_tokens,
            "judgements": usage.judgements,
            "statements": [
                {"statement": s, "cites": [list(r) if isinstance(r, tuple) else r for r in refs]}
                for s, refs in statements
            ],
            "unattached_citations": unattached,
            "citation_source": "inline" if resp.citations is None else "structured",
            "claim_lines": lines,
        }
        return {"citation_recall": recall, "citation_precision": precision}, record


def _label(ref: Ref) -> str:
    """A cited source for the rationale: 1-based context rank(s), ``?`` when fabricated."""
    if ref is None:
        return "?"
    return "+".join(str(i + 1) for i in _indices(ref))


class _CheckFailed(Exception):
    """An entailment check failed (its reason is the NaN reason)."""
