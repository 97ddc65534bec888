"""Tests of dataset generation (rag_experiments.generate) with a tiny scripted fake LLM.

Extraction details the issue also asks for are tested where the extractor is:
DOCX nested-table order in ``tests/text/test_extract.py::
test_docx_paragraphs_headings_and_nested_tables_in_document_order``, ligatures and hyphenation
in ``tests/text/test_extract.py::test_normalize_text_rules`` (``"\\ufb01le"`` → ``"file"``,
``"manage-\\nment"`` → ``"management"``) and
``tests/text/test_extract.py::test_pdf_ligatures_become_plain_letters``.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

from rag_experiments.chunking.semantic import SemanticChunker
from rag_experiments.data.corpus import load_corpus_folder
from rag_experiments.data.jsonl import JsonlDataset
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.errors import ConfigError, DatasetError, LLMError
from rag_experiments.generate import filters as F
from rag_experiments.generate.checkpoint import Checkpoint
from rag_experiments.generate.dedup import Deduplicator, question_key
from rag_experiments.generate.docs import load_docs
from rag_experiments.generate.generator import DatasetGenerator, GenerationSettings
from rag_experiments.generate.schedule import bit_reversed_order, schedule_slots
from rag_experiments.generate.stats import compute_stats, dataset_stats
from rag_experiments.generate.template import TemplateSettings, generate_from_template
from rag_experiments.llm.base import Completion
from rag_experiments.llm.parsing import parse_structured
from rag_experiments.records import QUESTION_TYPES, Sample

# --- a tiny scripted chat model --------------------------------------------------------------

_PASSAGE = re.compile(r"\[1\] (.+?)\n\n(?:\[2\] |Write )", re.DOTALL)
_TOPIC = re.compile(r"Passage:\n(.+?)\n\nWrite", re.DOTALL)
_OPENING = re.compile(r'Begin the question with "([^"]+)"')


class ScriptedChat:
    """Deterministic fake: writes a question from the prompt's opening words, the question
    type and three words of the passage, and answers with the passage's first 20 words;
    unanswerable questions ask about "travel budgets"; the judge says "answered" only for
    questions containing ``answered_marker``.

    ``crash_after`` raises KeyboardInterrupt on that call (a simulated Ctrl-C / crash);
    ``fail_types`` makes questions of those types blank (rejected by ``missing_keys``).
    """

    def __init__(
        self,
        *,
        crash_after: int | None = None,
        answered_marker: str = "\x00",
        fail_types: tuple[str, ...] = (),
    ) -> None:
        self.calls = 0
        self.crash_after = crash_after
        self.answered_marker = answered_marker
        self.fail_types = fail_types

    def complete(
        self, messages: list[dict[str, str]], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        self.calls += 1
        if self.crash_after is not None and self.calls > self.crash_after:
            raise KeyboardInterrupt
        prompt = messages[-1]["content"]
        assert schema is not None
        if schema.__name__ == "QAPair":
            found = _PASSAGE.search(prompt)
            passage = found.group(1) if found else ""
            words = re.findall(r"[A-Za-z]{5,}", passage)
            opening = _OPENING.search(prompt)
            kind = self._type_of(prompt).replace("_", " ")
            question = (
                f"{opening.group(1) if opening else 'What'} the {kind} rule on "
                f"{words[0]} and {words[1]} for {words[2]}?"
            )
            if self._type_of(prompt) in self.fail_types:
                question = ""
            data: dict[str, Any] = {"question": question, "answer": " ".join(passage.split()[:20])}
        elif schema.__name__ == "UnanswerableQuestion":
            topic = _TOPIC.search(prompt)
            words = re.findall(r"[A-Za-z]{5,}", topic.group(1) if topic else "")
            data = {"question": f"Which travel budget pays for {words[0]} {words[1]} trips?"}
        else:
            question = prompt.rsplit("Question: ", 1)[-1]
            data = {"answered": self.answered_marker in question}
        text = json.dumps(data)
        return Completion(text=text, parsed=parse_structured(text, schema), model="scripted")

    @staticmethod
    def _type_of(prompt: str) -> str:
        from rag_experiments.generate.prompts import TYPE_GUIDES

        return next(t for t, (what, _) in TYPE_GUIDES.items() if what in prompt)

    def describe(self) -> dict[str, str]:
        return {"provider": "scripted", "model": "scripted-chat"}


PARAGRAPH = (
    "Requests for {topic} are reviewed by the {role} within {days} working days. The {role} "
    "records each decision about {topic} in the {register} register, and an escalation goes "
    "to the {boss} when the deadline for {topic} is missed or the request is incomplete."
)
TOPICS = [
    ("laptops", "asset officer", 3, "hardware", "facilities director"),
    ("badges", "security desk", 2, "access", "security manager"),
    ("backups", "storage team", 5, "recovery", "infrastructure lead"),
    ("licences", "procurement clerk", 4, "purchasing", "finance director"),
    ("vendors", "supplier manager", 10, "supplier", "chief operating officer"),
    ("printers", "office assistant", 1, "equipment", "office manager"),
]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """Three Markdown policies (two sections each), one unsupported file, one empty file."""
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        sections = []
        for topic, role, days, register, boss in TOPICS[2 * i : 2 * i + 2]:
            sections.append(
                f"## {topic.title()}\n\n"
                + PARAGRAPH.format(topic=topic, role=role, days=days, register=register, boss=boss)
            )
        target = folder / ("sub" if i == 2 else "") / f"policy-{i}.md"
        target.write_text(f"# Policy {i}\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    (folder / "notes.xyz").write_text("not a document", encoding="utf-8")
    (folder / "empty.txt").write_text("  \n", encoding="utf-8")
    return folder


def _generator(
    chat: ScriptedChat, judge: ScriptedChat | None = None, **settings: Any
) -> DatasetGenerator:
    base: dict[str, Any] = {
        "n": 8,
        "n_unanswerable": 0,
        "min_chunk_words": 10,
        "max_concurrency": 2,
    }
    base.update(settings)
    return DatasetGenerator(
        chat,
        embedder=HashEmbedder(dim=512),
        chunker=SemanticChunker(size=400, min_size=100),
        judge=judge,
        settings=GenerationSettings(**base),
        progress=False,
    )


# --- schedule --------------------------------------------------------------------------------


def test_bit_reversed_order_is_a_spread_permutation() -> None:
    assert bit_reversed_order(8) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert sorted(bit_reversed_order(11)) == list(range(11))


@pytest.mark.parametrize("n_types", [1, 3, 8])
def test_schedule_balance_variety_and_coverage(n_types: int) -> None:
    types = list(QUESTION_TYPES[:n_types])
    for n_chunks in range(n_types, 21):
        for n_slots in range(1, 3 * n_chunks + 2):
            slots = schedule_slots(n_chunks, n_slots, types)
            assert [s.index for s in slots] == list(range(n_slots))
            counts: Counter[str] = Counter()
            for slot in slots:  # every prefix is balanced within 2
                counts[slot.question_type] += 1
                values = [counts[t] for t in types]
                assert max(values) - min(values) <= 2
            assert max(values) - min(values) <= 1  # the whole schedule within 1
            per_chunk: dict[int, list[str]] = {}
            for slot in slots:
                per_chunk.setdefault(slot.chunk_index, []).append(slot.question_type)
            for kinds in per_chunk.values():  # no type twice before every type was used
                for start in range(0, len(kinds), n_types):
                    block = kinds[start : start + n_types]
                    assert len(set(block)) == len(block)
            if n_slots >= n_chunks:
                assert set(per_chunk) == set(range(n_chunks))  # every chunk used
            else:
                picked = sorted(per_chunk)
                gaps = np.diff([-1, *picked, n_chunks])
                assert gaps.max() < 2 * n_chunks / n_slots + 1


def test_schedule_small_example_by_hand() -> None:
    slots = schedule_slots(4, 6, ["a", "b"])
    # full round: chunks in bit-reversed order 0,2,1,3 with consecutive types a,b,a,b.
    # partial round: counts tie at 2-2, the previous type was b, so a comes next, on the first
    # chunk in that order that has not had a (chunk 2); then b, on chunk 0.
    assert [(s.chunk_index, s.question_type) for s in slots] == [
        (0, "a"),
        (2, "b"),
        (1, "a"),
        (3, "b"),
        (2, "a"),
        (0, "b"),
    ]


def test_schedule_rejects_bad_types() -> None:
    with pytest.raises(ConfigError):
        schedule_slots(3, 3, [])
    with pytest.raises(ConfigError):
        schedule_slots(3, 3, ["a", "a"])
    assert schedule_slots(0, 5, ["a"]) == []


# --- filters ---------------------------------------------------------------------------------

CONTEXT = (
    "The security manager approves every request for remote access to the finance "
    "system within two working days and records the decision in the access register."
)
GOOD_Q = "Who approves requests for remote access to the finance system?"
GOOD_A = (
    "The security manager approves every request for remote access to the finance "
    "system within two working days."
)


def _pair(**changes: Any) -> dict[str, Any]:
    pair: dict[str, Any] = {
        "question": GOOD_Q,
        "answer": GOOD_A,
        "question_type": "role_responsibility",
        "answerable": True,
        "contexts": [CONTEXT],
    }
    pair.update(changes)
    return pair


@pytest.mark.parametrize(
    ("check", "rejected", "kept"),
    [
        (
            F.missing_keys,
            {k: v for k, v in _pair().items() if k != "answer"},
            _pair(answer="", answerable=False),
        ),
        (F.unknown_type, _pair(question_type="trivia"), _pair(question_type="multi_hop")),
        (
            F.question_too_short,
            _pair(question="Who approves?"),
            _pair(question="Who approves it?"),
        ),  # 13 vs 16 characters
        (
            F.answer_too_short,
            _pair(answer="The security manager approves remote access requests."),
            _pair(
                answer="The security manager approves every remote access request within two "
                "working days."
            ),
        ),
        (
            F.not_a_question,
            _pair(question="Remote access to the finance system"),
            _pair(question="Describe how remote access to the finance system is approved"),
        ),
        (
            F.too_few_content_words,
            _pair(question="What happens if"),
            _pair(question="What happens if access expires?"),
        ),
        (F.too_few_content_words, _pair(question="What is a term or concept?"), _pair()),
        (
            F.document_reference,
            _pair(question="According to the text, who approves remote access requests?"),
            _pair(question="Which contextual factors delay remote access approvals?"),
        ),
        (
            F.document_reference,
            _pair(question="Who approves the requests in this context?"),
            _pair(question="What documentation does the security manager keep on approvals?"),
        ),
        (
            F.meta_question,
            _pair(question="What is the main topic of this document?"),
            _pair(question="What is the main duty of the security manager for remote access?"),
        ),
        (
            F.yes_no_question,
            _pair(question="Does the security manager approve remote access?"),
            _pair(question="Who, besides the security manager, approves remote access?"),
        ),
        (
            F.answer_copies_question,
            _pair(answer="Who approves requests for remote access to the finance system"),
            _pair(),
        ),
        (F.question_not_in_context, _pair(question="How is it done in practice?"), _pair()),
        (
            F.answer_not_in_context,
            _pair(
                answer="Line managers fill in form AR-1 and the service desk creates the "
                "account after approval."
            ),
            _pair(),
        ),
    ],
)
def test_each_filter_rejects_one_case_and_keeps_another(
    check: F.Filter, rejected: dict[str, Any], kept: dict[str, Any]
) -> None:
    assert check(rejected) is not None
    assert check(kept) is None


def test_every_filter_keeps_a_good_pair_and_first_rejection_names_the_filter() -> None:
    assert F.first_rejection(_pair()) is None
    name, detail = F.first_rejection(_pair(question="Is it?"))  # type: ignore[misc]
    assert name == "question_too_short" and "6 characters" in detail
    assert set(F.FILTER_NAMES) >= {
        "missing_keys",
        "unknown_type",
        "question_too_short",
        "answer_too_short",
        "document_reference",
        "meta_question",
        "yes_no_question",
        "answer_copies_question",
    }


# --- dedup -----------------------------------------------------------------------------------


def test_dedup_exact_after_normalisation_then_near_by_cosine() -> None:
    dedup = Deduplicator(HashEmbedder(dim=1024), threshold=0.95)
    dedup.add("Who approves remote access to the finance system?", "q1")
    assert question_key("WHO approves remote-access to the finance system") == question_key(
        "Who approves remote access to the finance system?"
    )
    exact = dedup.check("who approves REMOTE access, to the finance system")
    assert exact is not None and exact[0] == "duplicate_exact" and "q1" in exact[1]
    # same bag of words in another order: hashed bag-of-words cosine = 1.0
    near = dedup.check("To the finance system, who approves remote access?")
    assert near is not None and near[0] == "duplicate_near"
    assert dedup.check("How long does the storage team keep nightly backups?") is None


def test_a_checked_question_that_is_kept_is_embedded_once() -> None:
    class Counting(HashEmbedder):
        texts: list[str] = []

        def embed_documents(self, texts: list[str]) -> np.ndarray:
            Counting.texts += texts
            return super().embed_documents(texts)

    dedup = Deduplicator(Counting(dim=64), threshold=0.95)
    dedup.add("Who approves remote access?", "q1")
    question = "How long are nightly backups kept?"
    assert dedup.check(question) is None
    dedup.add(question, "q2")
    assert Counting.texts == ["Who approves remote access?", question]  # not embedded again
    near = dedup.check("Nightly backups are kept how long?")  # the reused vector is right
    assert near is not None and near[0] == "duplicate_near" and "q2" in near[1]


def test_dedup_threshold_is_configurable_and_checked() -> None:
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.9, np.sqrt(1 - 0.81)])}

    class TwoVectors:
        id = "two"
        dim = 2

        def embed_documents(self, texts: list[str]) -> np.ndarray:
            return np.stack([vectors[t] for t in texts]).astype(np.float32)

        def embed_query(self, text: str) -> np.ndarray:
            return vectors[text].astype(np.float32)

    strict = Deduplicator(TwoVectors(), threshold=0.95)  # cosine(a, b) = 0.9
    strict.add("a", "q1")
    assert strict.check("b") is None
    loose = Deduplicator(TwoVectors(), threshold=0.85)
    loose.add("a", "q1")
    assert loose.check("b") == ("duplicate_near", "cosine 0.900 >= 0.85 with q1")
    with pytest.raises(ConfigError):
        Deduplicator(None, threshold=0.0)


# --- generation ------------------------------------------------------------------------------


def test_generate_writes_a_dataset_that_loads_with_the_corpus_folder(
    docs: Path, tmp_path: Path
) -> None:
    source = load_docs(docs)
    assert source.skipped.keys() == {"notes.xyz", "empty.txt"}
    assert source.skipped["empty.txt"].startswith("empty_document")
    assert source.skipped["notes.xyz"].startswith("unsupported_extension")
    out = tmp_path / "out"
    summary = _generator(ScriptedChat(), judge=ScriptedChat(), n_unanswerable=2).run(source, out)

    assert summary.n_accepted == 8 and summary.n_unanswerable == 2
    assert summary.accepted_by_type == {t: 1 for t in QUESTION_TYPES}  # 8 types, cap 1 each
    assert summary.skipped_files == source.skipped
    dataset = JsonlDataset(str(out / "eval.jsonl"), corpus=str(docs)).load()
    corpus_ids = {d.id for d in load_corpus_folder(docs)[0]}
    assert corpus_ids == {"policy-0", "policy-1", "sub/policy-2"}
    chunks = {
        c.id: c for d in source.documents for c in SemanticChunker(size=400, min_size=100).split(d)
    }
    for sample in dataset.samples:
        if not sample.answerable:
            assert sample.reference == "" and sample.reference_doc_ids == []
            assert len(sample.metadata["checked_chunk_ids"]) == 3
            continue
        meta = sample.metadata
        assert set(sample.reference_doc_ids) <= corpus_ids
        ids = meta.get("chunk_ids", [meta["chunk_id"]])
        assert sample.reference_contexts == [chunks[i].text for i in ids]
        assert meta["source"].endswith(".md") and "page" in meta
        assert len(ids) == (2 if sample.question_type == "multi_hop" else 1)
    lines = (out / "attempts.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["status"] == "accepted" for line in lines) == 10


def test_unanswerable_question_answered_by_the_corpus_is_rejected(
    docs: Path, tmp_path: Path
) -> None:
    judge = ScriptedChat(answered_marker="travel")  # the judge finds every question answered
    summary = _generator(ScriptedChat(), judge=judge, n=1, n_unanswerable=2).run(
        load_docs(docs), tmp_path / "out"
    )
    assert summary.n_unanswerable == 0
    assert summary.rejects_by_filter["answered_by_corpus"] == 4  # the 2x attempt buffer


def test_rejected_types_are_filled_from_other_types_in_a_second_pass(
    docs: Path, tmp_path: Path
) -> None:
    chat = ScriptedChat(fail_types=("multi_hop",))
    summary = _generator(chat, n=8).run(load_docs(docs), tmp_path / "out")
    assert summary.n_accepted == 8
    assert "multi_hop" not in summary.accepted_by_type
    assert summary.rejects_by_filter["missing_keys"] == 2  # both multi_hop attempts
    assert max(summary.accepted_by_type.values()) == 2


def test_resume_after_a_simulated_crash_loses_nothing_and_duplicates_nothing(
    docs: Path, tmp_path: Path
) -> None:
    source = load_docs(docs)
    reference_chat = ScriptedChat()
    _generator(reference_chat).run(source, tmp_path / "reference")
    expected = [(s.id, s.user_input) for s in Checkpoint(tmp_path / "reference").load().samples]

    out = tmp_path / "out"
    crashed = _generator(ScriptedChat(crash_after=5)).run(source, out)
    assert crashed.interrupted
    saved = Checkpoint(out).load().samples
    assert 0 < len(saved) < 8
    assert [(s.id, s.user_input) for s in saved] == expected[: len(saved)]
    with (out / "eval.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"id": "gen-9999", "user_in')  # a write torn by the crash

    resumed_chat = ScriptedChat()
    resumed = _generator(resumed_chat).run(source, out)
    reference_calls = reference_chat.calls
    final = Checkpoint(out).load().samples
    assert not resumed.interrupted and resumed.n_resumed == len(saved)
    assert [(s.id, s.user_input) for s in final] == expected  # nothing lost, nothing twice
    # finished attempts are not made again: the two runs together call the model as often as
    # the uninterrupted one
    assert resumed_chat.calls + crashed.n_attempts == reference_calls
    assert (out / "eval.jsonl").read_text().endswith("}\n")

    again = ScriptedChat()
    _generator(again).run(source, out)  # complete: nothing left to do
    assert again.calls == 0 and len(Checkpoint(out).load().samples) == 8


def test_resume_with_other_settings_is_refused_unless_overwrite(docs: Path, tmp_path: Path) -> None:
    source = load_docs(docs)
    out = tmp_path / "out"
    _generator(ScriptedChat(), n=2).run(source, out)
    other = DatasetGenerator(
        ScriptedChat(),
        embedder=HashEmbedder(dim=512),
        chunker=SemanticChunker(size=300, min_size=100),
        settings=GenerationSettings(n=2, n_unanswerable=0, min_chunk_words=10),
        progress=False,
    )
    with pytest.raises(ConfigError, match="chunker"):
        other.run(source, out)
    summary = other.run(source, out, overwrite=True)
    assert summary.n_resumed == 0 and summary.n_accepted == 2


def test_json_with_raw_line_breaks_in_strings_is_read(docs: Path, tmp_path: Path) -> None:
    class Newlines(ScriptedChat):
        def complete(self, messages: Any, schema: Any = None, **options: Any) -> Completion:
            good = super().complete(messages, schema, **options)
            if schema is not None and schema.__name__ == "QAPair":
                raw = good.text.replace(" and ", " and\n", 1)  # a raw line break in a string
                return Completion(text=raw, parsed=parse_structured(raw, schema))
            return good

    chat = Newlines()
    summary = _generator(chat, n=2).run(load_docs(docs), tmp_path / "out")
    assert summary.n_accepted == 2 and "unparseable_output" not in summary.rejects_by_filter
    question = Checkpoint(tmp_path / "out").load().samples[0].user_input
    assert "\n" not in question and " and " in question  # whitespace runs become one space


def test_model_errors_are_retried_on_the_next_run(docs: Path, tmp_path: Path) -> None:
    class Flaky(ScriptedChat):
        def complete(self, messages: Any, schema: Any = None, **options: Any) -> Completion:
            if self.calls == 0:
                self.calls += 1
                raise LLMError("server down", reason="connection_refused")
            return super().complete(messages, schema, **options)

    out = tmp_path / "out"
    first = _generator(Flaky(), n=2).run(load_docs(docs), out)
    assert first.errors_by_reason == {"connection_refused": 1}
    key = next(
        json.loads(line)["key"]
        for line in (out / "attempts.jsonl").read_text().splitlines()
        if json.loads(line)["status"] == "error"
    )
    assert not Checkpoint(out).load().done(key)


def test_load_docs_from_a_file_list_uses_folder_ids(docs: Path) -> None:
    source = load_docs([str(docs / "sub" / "policy-2.md"), str(docs / "policy-0.md")])
    assert source.root == docs.resolve()
    assert [d.id for d in source.documents] == ["policy-0", "sub/policy-2"]
    with pytest.raises(DatasetError, match="not found"):
        load_docs([str(docs / "missing.pdf")])
    with pytest.raises(DatasetError, match="no usable document"):
        load_docs([str(docs / "empty.txt")])


@pytest.mark.real_data
def test_real_scanned_and_locked_pdfs_are_skipped_and_the_empty_password_one_is_read(
    shared_real: Path,
) -> None:
    folder = shared_real / "docs"
    files = sorted(str(p) for p in (folder / "encrypted").glob("*.pdf")) + [
        str(p) for p in (folder / "scanned").glob("*.pdf")
    ]
    source = load_docs(files)
    assert source.root == folder.resolve()
    assert [d.id for d in source.documents] == ["encrypted/pypdf_r6-empty-password"]
    reasons = {path: why.split(":")[0] for path, why in source.skipped.items()}
    assert reasons == {
        "encrypted/libreoffice-writer-password.pdf": "encrypted",
        "encrypted/pypdf_r6-both-passwords.pdf": "encrypted",
        "encrypted/skew-encrypted_scan.pdf": "encrypted",
        "scanned/c02-22_huckfinn_scan.pdf": "no_text_layer",
    }
    unlocked = load_docs(
        [str(folder / "encrypted" / "libreoffice-writer-password.pdf")], password="openpassword"
    )
    assert unlocked.documents[0].id == "libreoffice-writer-password"


# --- template mode ---------------------------------------------------------------------------


def test_template_mode_is_reproducible_and_loads(tmp_path: Path) -> None:
    table = tmp_path / "assets.csv"
    table.write_text(
        "name,owner,location\nPrinter A,Facilities,Floor 2\n"
        "Laptop B,IT,\nServer C,Infrastructure,Basement\n",
        encoding="utf-8",
    )
    settings = TemplateSettings(
        key_column="name",
        questions={"owner": "Who owns {key}?", "location": "Where is the {column} of {key}?"},
        types={"owner": "role_responsibility"},
        n=4,
        seed=7,
    )
    summary = generate_from_template(str(table), tmp_path / "a", settings)
    generate_from_template(str(table), tmp_path / "b", settings)
    text = (tmp_path / "a" / "eval.jsonl").read_text()
    assert text == (tmp_path / "b" / "eval.jsonl").read_text()
    assert summary.rejects_by_filter == {"empty_value": 1}  # Laptop B has no location

    candidates = [
        "Who owns Printer A?",
        "Where is the location of Printer A?",
        "Who owns Laptop B?",
        "Who owns Server C?",
        "Where is the location of Server C?",
    ]
    order = list(range(5))
    random.Random(7).shuffle(order)  # the documented selection rule, as a reference
    expected = [candidates[i] for i in sorted(order[:4])]
    dataset = JsonlDataset(
        str(tmp_path / "a" / "eval.jsonl"), corpus=str(tmp_path / "a" / "corpus.jsonl")
    ).load()
    assert [s.user_input for s in dataset.samples] == expected
    assert [s.id for s in dataset.samples] == ["tpl-0001", "tpl-0002", "tpl-0003", "tpl-0004"]
    types = Counter("role_responsibility" if q.startswith("Who") else "lookup" for q in expected)
    assert summary.accepted_by_type == dict(types)
    by_question = {s.user_input: s for s in dataset.samples}
    by_question.setdefault(
        "Who owns Server C?",
        next(s for s in dataset.samples if s.user_input.startswith("Who owns")),
    )
    owner = by_question["Who owns Server C?"]
    assert owner.reference == "Infrastructure" and owner.keywords == ["Infrastructure"]
    assert owner.reference_doc_ids == ["assets/row-3"]
    assert owner.reference_contexts == ["name: Server C\nowner: Infrastructure\nlocation: Basement"]
    with pytest.raises(ConfigError, match="unknown fields"):
        generate_from_template(
            str(table),
            tmp_path / "c",
            TemplateSettings(key_column="name", questions={"owner": "{x}?"}),
        )


# --- stats -----------------------------------------------------------------------------------


def test_stats_by_hand(tmp_path: Path) -> None:
    samples = [
        Sample(
            id="1",
            user_input="Who approves access?",
            reference="The data owner does.",
            reference_doc_ids=["a"],
            question_type="role_responsibility",
        ),
        Sample(
            id="2",
            user_input="How long?",
            reference="Two days at most here.",
            reference_doc_ids=["a", "b"],
            question_type="timeline_sla",
        ),
        Sample(
            id="3",
            user_input="Who pays travel?",
            question_type="role_responsibility",
            answerable=False,
        ),
    ]
    stats = compute_stats(samples)
    assert stats.by_type == {"role_responsibility": 2, "timeline_sla": 1}
    assert stats.unanswerable_by_type == {"role_responsibility": 1}
    assert stats.avg_question_chars == pytest.approx((20 + 9 + 16) / 3)
    assert stats.avg_question_words == pytest.approx((3 + 2 + 3) / 3)
    assert stats.avg_answer_words == pytest.approx((4 + 5) / 2)
    assert (stats.n_answerable, stats.n_unanswerable, stats.n_reference_docs) == (2, 1, 2)

    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in samples))
    assert dataset_stats(tmp_path).to_dict() == {**stats.to_dict(), "path": str(path)}


def test_dataset_stats_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rag_experiments.cli import main

    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "1",
                "user_input": "What is a privileged account?",
                "reference": "An account with administrator rights.",
                "question_type": "definition_concept",
            }
        )
        + "\n"
    )
    assert main(["dataset", "stats", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by_type"] == {"definition_concept": 1} and data["avg_answer_words"] == 5.0
    assert main(["dataset", "stats", str(path)]) == 0
    assert "definition_concept" in capsys.readouterr().out
    assert main(["dataset", "stats", str(tmp_path / "nope.jsonl")]) == 1


def test_a_reader_that_leaves_the_pipe_early_is_not_an_error(tmp_path: Path) -> None:
    """``rag-exp dataset stats … | head -1``: no BrokenPipeError traceback, exit 0."""
    import subprocess
    import sys

    from rag_experiments.locations import PROJECT_ROOT

    sample = PROJECT_ROOT / "datasets" / "sample" / "eval.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_experiments", "dataset", "stats", str(sample)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err
