"""Claim-level correctness and RAGChecker's diagnostics as suite entries, all reading one
shared claim layer (:mod:`~rag_experiments.metrics.claim_layer`), so a suite holding several
costs what their distinct extractions and checks cost (formulas and edges:
:mod:`~rag_experiments.metrics.claim_formulas`).

Entries (each usable alone in any suite; ``metrics=diagnostics`` holds them all):

=======================  ========================================================  =========
entry (class)            columns                                                   group
=======================  ========================================================  =========
ClaimCorrectness         claim_precision, claim_recall, claim_f1                   overall
RetrieverClaims          context_claim_recall, context_claim_precision             retriever
ContextClaimUtilization  context_claim_utilization                                 generator
NoiseSensitivity         noise_sensitivity_relevant, noise_sensitivity_irrelevant  generator
Unfaithfulness           hallucination, self_knowledge                             generator
ClaimFaithfulness        claim_faithfulness                                        generator
=======================  ========================================================  =========

Per row (before any judge call): target failed → every column NaN ``target_error``; no answer
recorded → ``no_response``. A table that needs the response's claims is missing with
``refusal`` (a refusal makes no claim) or ``no_claims`` (blank response); one that needs the
reference with ``unanswerable`` or ``no_reference``; a judge failure with its reason
(``parse_error``, ``timeout`` …). Each column is NaN with the reason of the first table it
needs that is missing.

The audit record lists every claim with its verdicts (the rationale lines: ``response claim
… | in reference ✓ | chunks 1, 3``) and the judge calls this entry paid for (0 and
``cached: true`` when another entry had already asked the same thing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.audit import RATIONALE_KEY
from rag_experiments.metrics.claim_formulas import REQUIRES, ClaimTables, claim_values
from rag_experiments.metrics.claim_layer import (
    ClaimChecker,
    ClaimLayer,
    JudgeClaimChecker,
    JudgeClaimExtractor,
    LexicalClaimChecker,
    SentenceClaimExtractor,
    Usage,
    VerifierClaimChecker,
)
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.metrics.judge import JudgedMetric, has_context
from rag_experiments.metrics.refusal import compile_patterns, is_refusal
from rag_experiments.records import MetricValue, RagResponse, Sample

RAGCHECKER = "RAGChecker (Ru et al., NeurIPS 2024 D&B; ragchecker/computation.py)"
"""Source line of the RAGChecker formulas."""


CHECKERS = frozenset({"auto", "judge", "verifier", "lexical"})
"""Values of the entries' ``checker`` option."""


def _lexical_layer(cache: bool = True) -> ClaimLayer:
    return ClaimLayer(SentenceClaimExtractor(), LexicalClaimChecker(), cache=cache)


_LEXICAL = _lexical_layer()
"""The offline layer shared by every entry with ``checker: lexical`` in this process."""


def _define(name: str, higher: bool, text: str, source: str = RAGCHECKER) -> MetricDefinition:
    return MetricDefinition(name, higher, 0.0, 1.0, text, source)


class ClaimMetric(JudgedMetric):
    """Base of the claim entries: asks the shared :class:`ClaimLayer` for the label tables its
    columns need and computes them with :func:`~rag_experiments.metrics.claim_formulas.
    claim_values`.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid judge output.
        max_tokens: Kept for the common signature (the layer sets its own limits).
        batch_chunks: Check a claim set against all retrieved chunks in one judge call (True)
            or one call per chunk (for judges that confuse long numbered lists).
        claim_cache: Share extractions and checks with the other claim entries on this judge
            (False: this entry asks for everything itself; for measuring what sharing saves).
        checker: ``auto`` (default: ``verifier`` when the job has one, else ``judge``),
            ``judge`` (the judge extracts and checks claims), ``verifier`` (the judge extracts
            claims, the job's verifier checks each (text, claim) pair:
            :class:`~rag_experiments.metrics.claim_layer.VerifierClaimChecker`) or ``lexical``
            (offline, no model call: sentences are claims, a claim is entailed by a text
            holding 80 % of its content words; for dry runs and demonstrations, never for
            decisions).
        verifier: The job's verifier (:class:`~rag_experiments.protocols.Verifier`), given by
            the run when ``verifier=`` is set (the class ``uses`` it), else None.
        verifier_threshold: Probability at or above which the verifier's pair counts as
            entailed, in [0, 1].
        refusal_patterns: Extra refusal patterns (:mod:`~rag_experiments.metrics.refusal`).
        prefix: Column-name prefix.
        layer: A ready layer (tests, a verifier-backed checker); default the judge's shared one.

    Raises:
        ConfigError: Unknown ``checker``; ``checker: verifier`` with no verifier.
    """

    name = "claims"
    shows_contexts = True
    uses: ClassVar[frozenset[str]] = frozenset({"verifier"})

    def __init__(
        self,
        judge: ChatModel | None = None,
        max_retries: int = 1,
        max_tokens: int = 320,
        batch_chunks: bool = True,
        claim_cache: bool = True,
        checker: str = "auto",
        refusal_patterns: Sequence[str] | None = None,
        prefix: str = "",
        layer: ClaimLayer | None = None,
        verifier: Any = None,
        verifier_threshold: float = 0.5,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix)
        self.batch_chunks = bool(batch_chunks)
        self.claim_cache = bool(claim_cache)
        if checker not in CHECKERS:
            raise ConfigError(
                f"{self.name}.checker must be one of {sorted(CHECKERS)}, got {checker!r}"
            )
        if checker == "verifier" and verifier is None:
            raise ConfigError(
                f"{self.name}.checker=verifier needs a verifier: set verifier=local "
                "verifier.path=<model folder> or verifier=tei verifier.url=<TEI server> "
                "(docs: how-to/verifiers.md), or checker=judge"
            )
        if checker == "auto":
            checker = "verifier" if verifier is not None else "judge"
        self.checker = checker
        self.verifier = verifier if checker == "verifier" else None
        self.verifier_threshold = float(verifier_threshold)
        self.refusal_patterns = compile_patterns(refusal_patterns)
        self._layer = layer

    def layer(self) -> ClaimLayer:
        """The claim layer this entry reads (built on first use)."""
        if self._layer is None:
            if self.checker == "lexical":
                self._layer = _LEXICAL if self.claim_cache else _lexical_layer(cache=False)
                return self._layer
            if self.judge is None:
                raise ConfigError(
                    f"metric {self.name} needs a judge model: run it through `rag-exp run` "
                    "(which builds the `judge` config) or pass judge=<ChatModel>"
                )
            if self.claim_cache:
                self._layer = ClaimLayer.shared(
                    self.judge,
                    self.batch_chunks,
                    self.max_retries,
                    verifier=self.verifier,
                    threshold=self.verifier_threshold,
                )
            else:
                checker: ClaimChecker = (
                    VerifierClaimChecker(self.verifier, self.verifier_threshold)
                    if self.verifier is not None
                    else JudgeClaimChecker(self.judge, self.batch_chunks, self.max_retries)
                )
                self._layer = ClaimLayer(
                    JudgeClaimExtractor(self.judge, self.max_retries), checker, cache=False
                )
        return self._layer

    def score_row(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """See :meth:`JudgedMetric.score_row`; the rationale is one line per claim."""
        values, record = super().score_row(sample, resp)
        if record.get("claim_lines"):
            record[RATIONALE_KEY] = record.pop("claim_lines")
        return values, record

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        needed = {t for c in self.columns for t in REQUIRES[c]}
        tables, usage, lines = self._tables(sample, resp, needed)
        values = claim_values(tables, self.columns)
        record: dict[str, Any] = {
            "judge_calls": usage.calls,
            "judge_prompt_tokens": usage.prompt_tokens,
            "judge_completion_tokens": usage.completion_tokens,
            "judgements": usage.judgements,
            "cached": usage.calls == 0,
            "tables": {
                k: getattr(tables, k) for k in sorted(needed) if getattr(tables, k) is not None
            },
            "claim_lines": lines,
        }
        return values, record

    def _tables(
        self, sample: Sample, resp: RagResponse, needed: set[str]
    ) -> tuple[ClaimTables, Usage, list[str]]:
        """The label tables in ``needed`` (others ``"not_needed"``), their usage and the
        rationale lines."""
        layer, usage, q = self.layer(), Usage(), sample.user_input
        response, reference = resp.response.strip(), sample.reference.strip()
        contexts = list(resp.retrieved_contexts) if has_context(resp.retrieved_contexts) else []

        def claims_of(text: str, missing: str | None) -> tuple[str, ...] | str:
            if missing is not None:
                return missing
            extracted, used = layer.claims(text, q)
            usage.add(used)
            return extracted.error or extracted.claims

        def check(claims: tuple[str, ...] | str, texts: list[str]) -> Any:
            if isinstance(claims, str):
                return claims
            checked, used = layer.check(claims, texts, q)
            usage.add(used)
            return checked.error or checked.entailed

        response_missing = (
            "refusal"
            if response and is_refusal(response, self.refusal_patterns)
            else (None if response else "no_claims")
        )
        reference_missing = (
            "unanswerable" if not sample.answerable else (None if reference else "no_reference")
        )
        need_r = needed & {"answer2response", "retrieved2response"}
        need_g = needed & {"response2answer", "retrieved2answer"}
        r_claims = claims_of(response, response_missing) if need_r else "not_needed"
        g_claims = claims_of(reference, reference_missing) if need_g else "not_needed"
        a2r: Any = "not_needed"
        r2a: Any = "not_needed"
        ret2r: Any = "not_needed"
        ret2a: Any = "not_needed"
        if "answer2response" in needed:
            a2r = reference_missing or check(r_claims, [reference])
        if "response2answer" in needed:
            r2a = (
                check(g_claims, [response])
                if response and not isinstance(g_claims, str)
                else (g_claims if isinstance(g_claims, str) else response_missing or "no_claims")
            )
        if "retrieved2response" in needed:
            ret2r = check(r_claims, contexts) if contexts or isinstance(r_claims, str) else None
            ret2r = ret2r if ret2r is not None else tuple(() for _ in r_claims)
        if "retrieved2answer" in needed:
            ret2a = check(g_claims, contexts) if contexts or isinstance(g_claims, str) else None
            ret2a = ret2a if ret2a is not None else tuple(() for _ in g_claims)
        tables = ClaimTables(_row(a2r), _row(r2a), ret2r, ret2a, n_chunks=len(contexts))
        lines = _lines("response claim", r_claims, a2r, ret2r, "in reference")
        lines += _lines("reference claim", g_claims, r2a, ret2a, "in response")
        return tables, usage, lines


def _row(table: Any) -> Any:
    """A single-text check's table as one boolean per claim (its only column)."""
    return table if isinstance(table, str) else tuple(row[0] for row in table)


def _lines(kind: str, claims: Any, single: Any, chunks: Any, where: str) -> list[str]:
    """One rationale line per claim: its text, the single-text verdict and the chunks
    entailing it."""
    if isinstance(claims, str):
        return []
    lines = []
    for i, claim in enumerate(claims):
        parts = [f"{kind}: {claim}"]
        if not isinstance(single, str):
            parts.append(f"{where} {'✓' if single[i][0] else '✗'}")
        if not isinstance(chunks, str):
            hits = [str(j + 1) for j, ok in enumerate(chunks[i]) if ok]
            parts.append("chunks " + (", ".join(hits) if hits else "none"))
        lines.append(" | ".join(parts))
    return lines


class ClaimCorrectness(ClaimMetric):
    """Claim precision, recall and F1 of the response against the reference (formulas:
    :mod:`~rag_experiments.metrics.claim_formulas`; RAGChecker's ``precision``, ``recall``,
    ``f1``; RAGAS FactualCorrectness's precision equals ours, its recall differs — see there).
    """

    name = "claim_correctness"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "claim_precision",
                True,
                "response claims entailed by the reference / response claims",
                f"{RAGCHECKER}; RAGAS FactualCorrectness (mode=precision)",
            ),
            _define(
                "claim_recall",
                True,
                "reference claims entailed by the response / reference claims",
            ),
            _define("claim_f1", True, "harmonic mean of claim precision and claim recall"),
        )
    )


class RetrieverClaims(ClaimMetric):
    """RAGChecker's retriever metrics: claim recall and context precision, from the reference
    claims checked against each retrieved chunk."""

    name = "retriever_claims"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "context_claim_recall",
                True,
                "reference claims entailed by some retrieved chunk / reference claims",
            ),
            _define(
                "context_claim_precision",
                True,
                "retrieved chunks entailing some reference claim / retrieved chunks",
            ),
        )
    )


class ContextClaimUtilization(ClaimMetric):
    """RAGChecker's context utilization: of the reference claims the chunks hold, the share the
    response states."""

    name = "context_claim_utilization"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "context_claim_utilization",
                True,
                "reference claims in the chunks and in the response / reference claims in "
                "the chunks",
            ),
        )
    )


class NoiseSensitivity(ClaimMetric):
    """RAGChecker's noise sensitivity: incorrect response claims entailed by a relevant chunk /
    only by irrelevant chunks (lower is better)."""

    name = "noise_sensitivity"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "noise_sensitivity_relevant",
                False,
                "incorrect response claims entailed by a relevant chunk / response claims",
            ),
            _define(
                "noise_sensitivity_irrelevant",
                False,
                "incorrect response claims entailed only by irrelevant chunks / response claims",
            ),
        )
    )


class Unfaithfulness(ClaimMetric):
    """RAGChecker's hallucination and self-knowledge: response claims no chunk entails,
    incorrect / correct (lower is better for both)."""

    name = "unfaithfulness"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "hallucination",
                False,
                "incorrect response claims no chunk entails / response claims",
            ),
            _define(
                "self_knowledge",
                False,
                "correct response claims no chunk entails / response claims",
            ),
        )
    )


class ClaimFaithfulness(ClaimMetric):
    """RAGChecker's generator faithfulness: response claims entailed by some retrieved chunk /
    response claims (the same meaning as ``faithfulness``, judged by the shared claim layer
    with separate extraction and per-chunk verdicts)."""

    name = "claim_faithfulness"
    declaration = MetricDeclaration(
        outputs=(
            _define(
                "claim_faithfulness",
                True,
                "response claims entailed by some retrieved chunk / response claims",
            ),
        )
    )
