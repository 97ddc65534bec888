"""Loader for a BEIR-format IR collection.

Format of Thakur et al., 2021 (BEIR, https://github.com/beir-cellar/beir).

A BEIR folder holds::

    corpus.jsonl            {"_id", "title", "text", "metadata"?} per line (or corpus*.jsonl shards)
    queries.jsonl           {"_id", "text", "metadata"?} per line
    qrels/<split>.tsv       query-id <TAB> corpus-id <TAB> score, with a header line

Each query that has at least one relevant document (score > 0) in the split becomes one
retrieval-only :class:`~rag_experiments.records.Sample` (no reference answer). The others are
listed in ``EvalDataset.dropped``: ``no_relevant_doc`` (every qrels row of the query has score
0) and ``no_qrels`` (no row in the split; queries.jsonl often holds every split's queries).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rag_experiments.data.base import DroppedRow, EvalDataset
from rag_experiments.data.corpus import load_corpus_jsonl
from rag_experiments.data.jsonl import RowLog, read_jsonl_rows, read_text_lines
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.records import Sample

QRELS_HEADER = ("query-id", "corpus-id", "score")
"""Column names of a BEIR qrels file."""


@dataclass
class BeirDataset:
    """A BEIR folder read as an evaluation dataset (retrieval metrics only).

    Samples are the queries with at least one qrel of score > 0 in ``split``, in the order
    each query first appears in the qrels file::

        Sample(id=query id, user_input=query text, reference="",
               reference_doc_ids=[doc ids with score > 0, in qrels order],
               relevance={doc id: score for every qrel of the query, 0 grades included},
               question_type=None, answerable=True)

    Args:
        path: The BEIR folder.
        split: Qrels split: reads ``qrels/<split>.tsv``.
        name: Dataset name; defaults to the folder's name.
        max_queries: Keep only this many samples (None: all). The subset is deterministic:
            queries are ranked by ``sha256(f"{seed}:{query id}")`` and the first
            ``max_queries`` are kept, in qrels order. A query's rank does not depend on the
            other queries, so the same seed keeps the same queries across runs and machines.
        seed: Seed of that subset.
    """

    path: str
    split: str = "test"
    name: str | None = None
    max_queries: int | None = None
    seed: int = 0

    def load(self) -> EvalDataset:
        """Read corpus, queries and qrels.

        Returns:
            The samples (see the class docstring), the whole corpus (every document, also
            those no query needs: they are the distractors), the folder as source and the
            queries left out with their reason (``dropped``).

        Raises:
            ConfigError: ``max_queries`` is below 1.
            DatasetError: A file is missing; or rows are invalid — bad queries, bad qrels
                rows, qrels naming an unknown query or doc — all listed together as
                ``file:line:field``; or the split has no relevant pair.
        """
        if self.max_queries is not None and self.max_queries < 1:
            raise ConfigError(
                f"max_queries must be at least 1, or null for all queries; got {self.max_queries}"
            )
        folder = Path(self.path).expanduser()
        if not folder.is_dir():
            raise DatasetError(
                f"BEIR folder {folder} does not exist; set path to a folder with "
                "corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
            )
        queries_path = folder / "queries.jsonl"
        qrels_path = folder / "qrels" / f"{self.split}.tsv"
        if not queries_path.is_file():
            raise DatasetError(f"{queries_path} is missing; a BEIR folder needs queries.jsonl")
        if not qrels_path.is_file():
            splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
            raise DatasetError(
                f"{qrels_path} is missing; split {self.split!r} does not exist. "
                f"Splits found: {', '.join(splits) or 'none'}"
            )

        corpus = load_corpus_jsonl(folder)
        log = RowLog(folder)
        queries = self._read_queries(queries_path, log)
        qrels = self._read_qrels(qrels_path, log, queries, {doc.id for doc in corpus})
        log.raise_if_any(
            'queries.jsonl rows are JSON objects with string "_id" and "text"; qrels rows are '
            "'query-id<TAB>corpus-id<TAB>score' with an integer score and ids present in "
            "queries.jsonl and the corpus"
        )

        samples = [
            Sample(
                id=qid,
                user_input=queries[qid],
                reference="",
                reference_doc_ids=[doc for doc, score in grades.items() if score > 0],
                relevance=dict(grades),
                question_type=None,
                answerable=True,
            )
            for qid, grades in qrels.items()
            if any(score > 0 for score in grades.values())
        ]
        if not samples:
            raise DatasetError(
                f"{qrels_path} has no pair with score > 0, so no query can be "
                "evaluated; check the split"
            )
        split_file = f"qrels/{self.split}.tsv"
        dropped = [
            DroppedRow(
                qid,
                "no_relevant_doc",
                f"its {len(qrels[qid])} row(s) in {split_file} all have score 0",
            )
            if qid in qrels
            else DroppedRow(qid, "no_qrels", f"no row in {split_file}")
            for qid in queries
            if not any(score > 0 for score in qrels.get(qid, {}).values())
        ]
        if self.max_queries is not None and self.max_queries < len(samples):
            keep = set(sorted((s.id for s in samples), key=self._rank)[: self.max_queries])
            samples = [s for s in samples if s.id in keep]
        return EvalDataset(
            name=self.name or folder.name,
            samples=samples,
            corpus=corpus,
            source=str(folder),
            dropped=dropped,
        )

    def _rank(self, query_id: str) -> str:
        """Sort key of the seeded subset: ``sha256(f"{seed}:{query_id}")`` in hex."""
        return hashlib.sha256(f"{self.seed}:{query_id}".encode()).hexdigest()

    @staticmethod
    def _read_queries(path: Path, log: RowLog) -> dict[str, str]:
        """``{query id: text}`` from queries.jsonl; bad rows and duplicate ids are logged.

        An integer ``_id`` is accepted and read as its decimal string.
        """
        queries: dict[str, str] = {}
        first_line: dict[str, int] = {}
        for line, row in read_jsonl_rows(path, log):
            qid = row.get("_id")
            if isinstance(qid, int) and not isinstance(qid, bool):
                qid = str(qid)
            text = row.get("text")
            ok = True
            if not isinstance(qid, str) or not qid:
                log.problem(line, "_id", "missing or not a non-empty string", path=path)
                ok = False
            if not isinstance(text, str) or not text.strip():
                log.problem(line, "text", "missing, blank or not a string", path=path)
                ok = False
            if not ok:
                continue
            if qid in first_line:
                log.problem(
                    line,
                    "_id",
                    f"duplicate query id {qid!r} (first on line {first_line[qid]})",
                    path=path,
                )
                continue
            first_line[qid] = line
            queries[qid] = text
        return queries

    @staticmethod
    def _read_qrels(
        path: Path, log: RowLog, queries: dict[str, str], doc_ids: set[str]
    ) -> dict[str, dict[str, int]]:
        """``{query id: {doc id: score}}`` in order of first appearance.

        The header line is optional (a first line whose score column is not an integer is
        taken as the header); CRLF line ends and blank lines are fine. Rows with the wrong
        number of columns, a non-integer score, an unknown query or doc id, or a pair graded
        twice with different scores are logged.
        """
        qrels: dict[str, dict[str, int]] = {}
        first_line: dict[tuple[str, str], int] = {}
        seen_data = False
        for line, text in read_text_lines(path, log):
            if not text.strip():
                continue
            cols = [c.strip() for c in text.split("\t")]
            if not seen_data:
                seen_data = True
                if len(cols) == 3 and _parse_int(cols[2]) is None:
                    continue  # header
            log.rows += 1
            if len(cols) != 3:
                log.problem(
                    line,
                    "",
                    f"expected 3 tab-separated columns {QRELS_HEADER}, got {len(cols)}",
                    path=path,
                )
                continue
            qid, doc, raw_score = cols
            score = _parse_int(raw_score)
            bad = False
            if score is None:
                log.problem(line, "score", f"{raw_score!r} is not an integer", path=path)
                bad = True
            if qid not in queries:
                log.problem(line, "query-id", f"query {qid!r} is not in queries.jsonl", path=path)
                bad = True
            if doc not in doc_ids:
                log.problem(line, "corpus-id", f"doc {doc!r} is not in the corpus", path=path)
                bad = True
            if bad or score is None:
                continue
            grades = qrels.setdefault(qid, {})
            if doc in grades and grades[doc] != score:
                log.problem(
                    line,
                    "score",
                    f"pair ({qid!r}, {doc!r}) already has score "
                    f"{grades[doc]} on line {first_line[(qid, doc)]}",
                    path=path,
                )
                continue
            first_line.setdefault((qid, doc), line)
            grades[doc] = score
        return qrels


def _parse_int(text: str) -> int | None:
    """``int(text)`` or None when ``text`` is not a decimal integer."""
    try:
        return int(text)
    except ValueError:
        return None
