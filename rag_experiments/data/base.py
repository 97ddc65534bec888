"""The evaluation dataset container and its digest."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from rag_experiments.errors import ConfigError
from rag_experiments.records import Document, Sample


def corpus_digest(corpus: list[Document]) -> str:
    """SHA-256 (hex, first 16 chars) over the corpus' ``(id, title, text)`` in id order.

    Two corpora with the same documents give the same digest whatever order they were read in.
    """
    h = hashlib.sha256()
    for doc in sorted(corpus, key=lambda d: d.id):
        for part in (doc.id, doc.title, doc.text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()[:16]


def samples_digest(samples: list[Sample]) -> str:
    """SHA-256 (hex, first 16 chars) over the samples' canonical JSON, in the given order
    (a sample without a recorded answer is hashed without the ``recorded`` key)."""
    h = hashlib.sha256()
    for s in samples:
        # `recorded` is left out when None, so datasets without answers keep their digests.
        data = s.model_dump(mode="json", exclude={"recorded"} if s.recorded is None else None)
        h.update(json.dumps(data, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


Stratum = tuple[str, bool]
"""``(question_type, answerable)``."""


def largest_remainder(n: int, sizes: Mapping[Stratum, int], rng: random.Random) -> dict:
    """Hamilton's largest-remainder apportionment of ``n`` seats in proportion to ``sizes``.

    Each key k gets ⌊n · size_k / total⌋ seats; the seats left go one each to the keys with
    the largest remainders n · size_k mod total (exact integer arithmetic), equal remainders
    in the order of a draw from ``rng`` (keys visited in sorted order).

    Args:
        n: Seats, 0 ≤ n ≤ sum of sizes.
        sizes: ``{key: size ≥ 1}``.
        rng: Tie-break generator.

    Returns:
        ``{key: seats}``, seats ≤ size, summing to ``n``.
    """
    total = sum(sizes.values())
    keys = sorted(sizes)
    seats = {k: n * sizes[k] // total for k in keys}
    ties = {k: rng.random() for k in keys}
    order = sorted(keys, key=lambda k: (-(n * sizes[k] % total), ties[k]))
    for k in order[: n - sum(seats.values())]:
        seats[k] += 1
    return seats


def stratified_allocation(
    n: int, sizes: Mapping[Stratum, int], rng: random.Random
) -> dict[Stratum, int]:
    """Seats per ``(question_type, answerable)`` stratum for a subset of ``n`` (the rule is in
    :meth:`EvalDataset.subset`: answerability first, then types within each class, then at
    least one seat per type when ``n`` ≥ the number of types).

    Args:
        n: Subset size, 1 ≤ n ≤ sum of sizes.
        sizes: ``{stratum: samples in it}``.
        rng: Tie-break generator.

    Returns:
        ``{stratum: seats}`` summing to ``n``, seats ≤ size.
    """
    total = sum(sizes.values())
    by_class: Counter[bool] = Counter()
    for (_, answerable), size in sizes.items():
        by_class[answerable] += size
    seats: dict[Stratum, int] = {}
    for cls, k in sorted(largest_remainder(n, dict(by_class), rng).items()):
        seats.update(largest_remainder(k, {s: v for s, v in sizes.items() if s[1] == cls}, rng))
    types = sorted({t for t, _ in sizes})
    if n < len(types):
        return seats
    ties = {s: rng.random() for s in sorted(sizes)}
    for t in types:
        per_type = Counter()
        for (u, _), k in seats.items():
            per_type[u] += k
        if per_type[t]:
            continue
        receiver = max((s for s in sizes if s[0] == t), key=lambda s: (sizes[s], ties[s]))
        donor = max(
            (s for s in sizes if seats[s] and per_type[s[0]] >= 2),
            key=lambda s: (s[1] == receiver[1], seats[s] * total - n * sizes[s], ties[s]),
        )
        seats[donor] -= 1
        seats[receiver] += 1
    return seats


DROPPED_IDS_SHOWN = 5
"""Ids per reason that :meth:`EvalDataset.dropped_summary` names (all are in the artifact)."""


@dataclass(frozen=True)
class DroppedRow:
    """A row of the source that a loader left out, and why (nothing is dropped silently).

    Attributes:
        id: The row's id (a query id).
        reason: Short machine-readable code (``no_relevant_doc``, ``no_qrels`` …).
        detail: What was found, in words.
    """

    id: str
    reason: str
    detail: str = ""


@dataclass
class EvalDataset:
    """Samples to evaluate and the corpus they are asked about.

    Attributes:
        name: Short name (``sample``, ``scifact``) used in run names and MLflow inputs.
        samples: Questions in file order.
        corpus: Documents the baseline indexes; may be empty for an HTTP target.
        source: Where it was read from (path), for MLflow's dataset source.
        skipped: Corpus files that could not be used, ``{path: reason}``.
        dropped: Rows of the source left out of ``samples``, each with its reason, in source
            order (a run logs them: metric ``n_dropped``, ``n_dropped.<reason>``, tag
            ``dataset.dropped``, artifact ``dropped_rows.json``).
    """

    name: str
    samples: list[Sample]
    corpus: list[Document] = field(default_factory=list)
    source: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    dropped: list[DroppedRow] = field(default_factory=list)

    def dropped_counts(self) -> dict[str, int]:
        """``{reason: rows}`` of :attr:`dropped`, most frequent first."""
        return dict(Counter(d.reason for d in self.dropped).most_common())

    def dropped_rows(self) -> list[dict[str, str]]:
        """:attr:`dropped` as plain dicts (``id``, ``reason``, ``detail``) for an artifact."""
        return [asdict(d) for d in self.dropped]

    def dropped_summary(self) -> str:
        """One line: how many rows were left out, per reason with the first
        :data:`DROPPED_IDS_SHOWN` ids (``""`` when none), e.g. ``2 rows of sample left out:
        no_relevant_doc 1 (q3); no_qrels 1 (q4)``."""
        if not self.dropped:
            return ""
        parts = []
        for reason, n in self.dropped_counts().items():
            ids = [d.id for d in self.dropped if d.reason == reason]
            shown = ", ".join(ids[:DROPPED_IDS_SHOWN]) + (", …" if n > DROPPED_IDS_SHOWN else "")
            parts.append(f"{reason} {n} ({shown})")
        return f"{len(self.dropped)} rows of {self.name} left out: " + "; ".join(parts)

    @property
    def corpus_digest(self) -> str:
        """See :func:`corpus_digest`."""
        return corpus_digest(self.corpus)

    @property
    def digest(self) -> str:
        """Digest of samples and corpus together: a rerun must see the same value."""
        h = hashlib.sha256(f"{samples_digest(self.samples)}:{self.corpus_digest}".encode())
        return h.hexdigest()[:16]

    @property
    def questions_digest(self) -> str:
        """Digest of the samples without their recorded answers, and the corpus: the same for
        two ``target=recorded`` runs of one question set whose answers differ (``rag-exp
        gate`` compares it)."""
        questions = [s.model_copy(update={"recorded": None}) for s in self.samples]
        h = hashlib.sha256(f"{samples_digest(questions)}:{self.corpus_digest}".encode())
        return h.hexdigest()[:16]

    def subset(self, n: int, seed: int = 0) -> EvalDataset:
        """A seeded subset of ``n`` samples in proportion to ``(question_type, answerable)``.

        The seats of each stratum (a type × answerability cell with N_s of the N samples) are
        allocated by the largest-remainder (Hamilton) rule, first over answerability, then
        over types within each answerability class, so both margins are proportional:

        1. answerable / unanswerable get n · N_c / N seats each, rounded down; the seats left
           go to the largest remainders;
        2. within class c, stratum s gets n_c · N_s / N_c seats by the same rule;
        3. when n ≥ the number of types, a type left without a seat gets one for its largest
           stratum, taken from the stratum with the most seats above its quota n · N_s / N
           among types that keep at least one (same answerability class first).

        Equal remainders are ordered by a draw from ``random.Random(seed)``; each stratum's
        samples are shuffled by the same generator and the first ones taken. The kept samples
        stay in dataset order and the corpus is unchanged; the digest reflects the subset, so a
        rerun with the same ``n`` and ``seed`` sees the same digest. Example (the bundled
        sample: 8 types, 9 of 69 questions unanswerable): ``n = 8`` gives one question per
        type, 7 answerable and 1 unanswerable (quota 8 · 9 / 69 = 1.04).

        Args:
            n: Number of samples to keep (all when ``n`` ≥ the dataset size).
            seed: Seed of the tie-breaks and of the per-stratum shuffles.

        Returns:
            A new dataset (``self`` when nothing is dropped).

        Raises:
            ConfigError: ``n`` < 1.
        """
        if n < 1:
            raise ConfigError(f"max_samples must be >= 1 or null, got {n}")
        if n >= len(self.samples):
            return self
        strata: dict[tuple[str, bool], list[int]] = defaultdict(list)
        for i, s in enumerate(self.samples):
            strata[(s.question_type or "", s.answerable)].append(i)
        rng = random.Random(seed)
        seats = stratified_allocation(n, {k: len(v) for k, v in strata.items()}, rng)
        keep: list[int] = []
        for key in sorted(strata):
            idx = strata[key][:]
            rng.shuffle(idx)
            keep.extend(idx[: seats[key]])
        chosen = sorted(keep)
        return replace(self, samples=[self.samples[i] for i in chosen])
