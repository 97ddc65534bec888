"""Append-only JSONL files survive a torn last line: the record appended after it is kept.

One test per writer (the AppendLog itself, the run checkpoint, the generator's eval.jsonl and
attempts.jsonl), each with a file whose last line is cut mid-JSON without a newline, then an
append, then a load.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from rag_experiments.common.appendlog import AppendLog, CorruptLineError
from rag_experiments.errors import DatasetError
from rag_experiments.generate.checkpoint import Checkpoint
from rag_experiments.lifecycle.checkpoint import CheckpointOwnerError, ResponseCheckpoint
from rag_experiments.records import RagResponse, Sample

TORN = '{"id": "torn", "respo'


def _tear(path: Path, fragment: str = TORN) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(fragment)  # a write cut short by kill -9: no newline


def test_appendlog_cuts_a_torn_tail_before_appending(tmp_path: Path, caplog) -> None:
    log = AppendLog(tmp_path / "a.jsonl")
    log.append({"n": 1})
    _tear(log.path)
    with caplog.at_level(logging.WARNING):
        assert [r.value for r in log.read()] == [{"n": 1}]
    assert "torn last line" in caplog.text
    log.append({"n": 2})
    assert log.path.read_text(encoding="utf-8") == '{"n": 1}\n{"n": 2}\n'
    assert [(r.number, r.value) for r in log.read()] == [(1, {"n": 1}), (2, {"n": 2})]
    assert log.repaired == 1


def test_appendlog_torn_first_line_and_long_torn_tail(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / "a.jsonl")
    log.path.write_text('{"x": "' + "y" * 200_000)  # no newline anywhere, longer than a chunk
    log.append({"n": 1})
    assert log.path.read_text() == '{"n": 1}\n'
    log.append({"z": "w" * 100_000})
    _tear(log.path, '{"q": "' + "r" * 150_000)
    log.append({"n": 3})
    assert [r.value for r in log.read()] == [{"n": 1}, {"z": "w" * 100_000}, {"n": 3}]


def test_appendlog_bad_middle_line_is_skipped_with_a_warning_or_refused(
    tmp_path: Path, caplog
) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"n": 1}\n{"n": 2, oops\n\n{"n": 3}\n')
    with caplog.at_level(logging.WARNING):
        assert [(r.number, r.value) for r in AppendLog(path).read()] == [
            (1, {"n": 1}),
            (4, {"n": 3}),
        ]
    assert f"{path}:2: unreadable line skipped" in caplog.text
    with pytest.raises(CorruptLineError) as info:
        list(AppendLog(path).read(strict=True))
    assert info.value.number == 2


def test_appendlog_threads_never_interleave(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / "a.jsonl")

    def write(k: int) -> None:
        for i in range(50):
            log.append({"k": k, "i": i, "pad": "x" * 500})

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    values = [r.value for r in log.read(strict=True)]
    assert sorted((v["k"], v["i"]) for v in values) == [(k, i) for k in range(4) for i in range(50)]


def test_run_checkpoint_keeps_the_answer_appended_after_a_torn_line(tmp_path: Path) -> None:
    ckpt = ResponseCheckpoint(tmp_path)
    ckpt.write_meta("run1")
    ckpt.append("a", RagResponse(response="answer a"))
    _tear(ckpt.path)

    resumed = ResponseCheckpoint(tmp_path)  # the resumed process
    resumed.write_meta("run1")
    assert set(resumed.load()) == {"a"}
    resumed.append("b", RagResponse(response="answer b"))  # first answer after the crash
    loaded = ResponseCheckpoint(tmp_path).load()
    assert {k: v.response for k, v in loaded.items()} == {"a": "answer a", "b": "answer b"}
    rows = [json.loads(line) for line in ckpt.path.read_text().splitlines()]
    assert [(r["id"], r["run_id"]) for r in rows] == [("a", "run1"), ("b", "run1")]


def test_run_checkpoint_skips_a_bad_middle_line_with_a_warning(tmp_path: Path, caplog) -> None:
    ckpt = ResponseCheckpoint(tmp_path)
    ckpt.append("a", RagResponse(response="answer a"))
    _tear(ckpt.path, '{"id": "x", "response": \n')  # complete line, not JSON
    ckpt.append("b", RagResponse(response="answer b"))
    _tear(ckpt.path, '{"id": "y"}\n')  # JSON without a response
    with caplog.at_level(logging.WARNING):
        assert set(ResponseCheckpoint(tmp_path).load()) == {"a", "b"}
    assert f"{ckpt.path}:2" in caplog.text and f"{ckpt.path}:4" in caplog.text


def test_run_checkpoint_belongs_to_one_run(tmp_path: Path) -> None:
    first = ResponseCheckpoint(tmp_path)
    first.write_meta("run1")
    first.append("a", RagResponse(response="from run1"))
    second = ResponseCheckpoint(tmp_path)
    second.write_meta("run2")  # another run takes over the folder
    with pytest.raises(CheckpointOwnerError, match="belongs to run run2"):
        first.append("b", RagResponse(response="from run1 too"))
    second.append("c", RagResponse(response="from run2"))
    assert set(ResponseCheckpoint(tmp_path).load()) == {"c"}  # run1's answer is not run2's
    ResponseCheckpoint(tmp_path).write_meta("run1")
    assert set(ResponseCheckpoint(tmp_path).load()) == {"a"}


def _sample(i: int) -> Sample:
    return Sample(
        id=f"gen-{i}",
        user_input=f"question {i}?",
        reference=f"answer {i}",
        metadata={"attempt": f"k{i}"},
    )


def test_generation_checkpoint_keeps_records_appended_after_torn_lines(tmp_path: Path) -> None:
    ckpt = Checkpoint(tmp_path)
    ckpt.append_sample(_sample(1))
    ckpt.append_attempt({"key": "k1", "status": "accepted", "sample_id": "gen-1"})
    _tear(ckpt.eval_path, '{"id": "gen-9999", "user_in')
    _tear(ckpt.attempts_path, '{"key": "k9", "sta')

    resumed = Checkpoint(tmp_path)
    assert [s.id for s in resumed.load().samples] == ["gen-1"]
    resumed.append_sample(_sample(2))
    resumed.append_attempt({"key": "k2", "status": "rejected", "reason": "too_short"})
    state = Checkpoint(tmp_path).load()
    assert [s.id for s in state.samples] == ["gen-1", "gen-2"]
    assert {k: a["status"] for k, a in state.attempts.items()} == {
        "k1": "accepted",
        "k2": "rejected",
    }
    assert ckpt.eval_path.read_text().endswith("}\n")


def test_generation_checkpoint_refuses_a_bad_middle_line(tmp_path: Path) -> None:
    ckpt = Checkpoint(tmp_path)
    ckpt.append_sample(_sample(1))
    _tear(ckpt.eval_path, "not json\n")
    ckpt.append_sample(_sample(2))
    with pytest.raises(DatasetError, match=r"eval\.jsonl:2: not JSON .*overwrite=true"):
        Checkpoint(tmp_path).load()


def _cut_mid_last_line(path: Path, keep: int) -> None:
    """What kill -9 during the last write leaves: the file cut ``keep`` bytes into its last
    line (which loses its newline)."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    assert 0 < keep < len(data) - start - 1
    with path.open("r+b") as handle:
        handle.truncate(start + keep)


def test_both_checkpoints_keep_every_record_after_a_line_cut_mid_write(tmp_path: Path) -> None:
    run = ResponseCheckpoint(tmp_path / "run")
    run.write_meta("run1")
    for sid in ("a", "b", "c"):
        run.append(sid, RagResponse(response=f"answer {sid}"))
    _cut_mid_last_line(run.path, keep=15)  # "c" was never acknowledged
    resumed = ResponseCheckpoint(tmp_path / "run")
    assert set(resumed.load()) == {"a", "b"}
    resumed.append("d", RagResponse(response="answer d"))
    loaded = ResponseCheckpoint(tmp_path / "run").load()
    assert {k: v.response for k, v in loaded.items()} == {
        "a": "answer a",
        "b": "answer b",
        "d": "answer d",
    }
    assert [json.loads(x)["id"] for x in run.path.read_text().splitlines()] == ["a", "b", "d"]

    gen = Checkpoint(tmp_path / "gen")
    for i in (1, 2, 3):
        gen.append_sample(_sample(i))
        gen.append_attempt({"key": f"k{i}", "status": "accepted", "sample_id": f"gen-{i}"})
    _cut_mid_last_line(gen.eval_path, keep=20)
    _cut_mid_last_line(gen.attempts_path, keep=9)
    resumed_gen = Checkpoint(tmp_path / "gen")
    assert [s.id for s in resumed_gen.load().samples] == ["gen-1", "gen-2"]
    resumed_gen.append_sample(_sample(4))
    resumed_gen.append_attempt({"key": "k4", "status": "accepted", "sample_id": "gen-4"})
    state = Checkpoint(tmp_path / "gen").load()
    assert [s.id for s in state.samples] == ["gen-1", "gen-2", "gen-4"]
    assert sorted(state.attempts) == ["k1", "k2", "k4"]
