"""The generation schedule: which chunk is asked which question type, in which order.

``n_slots`` attempts over ``n_chunks`` chunks are made in *rounds*:

1. **Full rounds.** While at least ``n_chunks`` attempts are left, a round visits every
   chunk once, so every chunk is used when ``n_slots >= n_chunks``. Chunks are visited in
   *bit-reversed* order of their index (the van der Corput sequence in base 2: ``0, C/2, C/4,
   3C/4, …``), so any prefix of the schedule is spread over the whole corpus, not its first
   documents (generation stops once enough pairs are accepted, so this matters). The chunk at
   visiting position ``p`` of round ``r`` gets type ``(p + o_r) mod T``: consecutive types, so
   a round is balanced. The offsets ``o_r`` of each block of ``T`` rounds are distinct (so a
   chunk gets ``T`` different types in ``T`` rounds), each chosen to leave the type counts as
   even as possible.
2. **Partial round.** The ``n_slots mod n_chunks`` attempts left go one by one to the type used
   least so far (ties: the next type after the previous slot's, cyclically), asked of the first
   chunk, in bit-reversed order, that is not used yet in this round and has not had that type
   in its current cycle of ``T`` types. With no full round (``n_slots < n_chunks``) these are
   the first ``n_slots`` chunks in bit-reversed order: neighbouring picks are less than
   ``2 * n_chunks / n_slots`` chunks apart.

Properties (checked over all small cases by ``tests/test_generate_schedule.py``): a chunk
never gets the same type twice before it has had every type; the type counts of any prefix
of the schedule differ by at most 2, and those of the whole schedule by at most 1 when
``n_chunks >= T``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rag_experiments.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    """One scheduled generation attempt.

    Attributes:
        index: 0-based position in the schedule (the order attempts are made in).
        chunk_index: Index of the chunk in the list the schedule was made for.
        question_type: The type of question to ask.
    """

    index: int
    chunk_index: int
    question_type: str


def bit_reversed_order(m: int) -> list[int]:
    """A permutation of ``range(m)`` whose every prefix is spread over the range.

    Positions are sorted by the bit-reversal of their binary digits (``ceil(log2 m)`` bits),
    the van der Corput sequence in base 2: ``0, m/2, m/4, 3m/4, …``.
    """
    bits = max(1, (m - 1).bit_length())
    return sorted(range(m), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))


def schedule_slots(n_chunks: int, n_slots: int, types: Sequence[str]) -> list[Slot]:
    """Plan ``n_slots`` attempts over ``n_chunks`` chunks and the given question types.

    See the module docstring for the rules and the properties they give.

    Args:
        n_chunks: Number of chunks that can be asked about (>= 0).
        n_slots: Number of attempts (>= 0): the attempt buffer times the pairs wanted.
        types: Question types to use (non-empty, no duplicates).

    Returns:
        The slots in schedule order (``slot.index == position``); empty when there are no
        chunks or no slots.

    Raises:
        ConfigError: ``types`` is empty or has duplicates, or a count is negative.
    """
    if not types:
        raise ConfigError("no question types to schedule; set `types` to at least one type")
    if len(set(types)) != len(types):
        raise ConfigError(f"question types must be distinct, got {list(types)}")
    if n_chunks < 0 or n_slots < 0:
        raise ConfigError(f"counts must be >= 0, got n_chunks={n_chunks}, n_slots={n_slots}")
    if n_chunks == 0 or n_slots == 0:
        return []

    n_types = len(types)
    full_rounds, rest = divmod(n_slots, n_chunks)
    order = bit_reversed_order(n_chunks)
    counts = [0] * n_types
    had: list[set[int]] = [set() for _ in range(n_chunks)]
    planned: list[tuple[int, int]] = []  # (chunk index, type index) in schedule order

    unused: set[int] = set()
    previous = n_types - 1
    for _ in range(full_rounds):
        if not unused:
            unused = set(range(n_types))
            for seen in had:
                seen.clear()
        offset = min(
            unused, key=lambda o: (_spread_after(counts, o, n_chunks), (o - previous - 1) % n_types)
        )
        unused.discard(offset)
        previous = offset
        for position, chunk in enumerate(order):
            kind = (position + offset) % n_types
            counts[kind] += 1
            had[chunk].add(kind)
            planned.append((chunk, kind))

    last = planned[-1][1] if planned else n_types - 1
    free = list(order)  # chunks not used yet in the partial round, in spread order
    for _ in range(rest):
        for chunk in free:
            if len(had[chunk]) == n_types:
                had[chunk].clear()
        wanted = sorted(range(n_types), key=lambda t: (counts[t], (t - last - 1) % n_types))
        chunk, kind = next(
            ((c, t) for t in wanted for c in free if t not in had[c]), (free[0], wanted[0])
        )
        free.remove(chunk)
        counts[kind] += 1
        had[chunk].add(kind)
        last = kind
        planned.append((chunk, kind))
    return [
        Slot(index=i, chunk_index=chunk, question_type=types[kind])
        for i, (chunk, kind) in enumerate(planned)
    ]


def _spread_after(counts: list[int], offset: int, n_chunks: int) -> int:
    """Max minus min of ``counts`` after a full round whose types start at ``offset``."""
    n_types = len(counts)
    after = list(counts)
    for position in range(n_chunks):
        after[(position + offset) % n_types] += 1
    return max(after) - min(after)
