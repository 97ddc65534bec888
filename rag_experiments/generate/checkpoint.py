"""The generator's on-disk state: accepted samples, finished attempts and the run's manifest.

Files in the output folder:

- ``eval.jsonl``: the dataset itself, one :class:`~rag_experiments.records.Sample` per line,
  appended (and flushed to disk with ``fsync``) the moment a pair is accepted;
- ``attempts.jsonl``: one record per finished attempt, accepted or rejected with the filter
  that rejected it (the audit trail, and what a resumed run skips); an attempt that failed on
  a model error is recorded with status ``error`` and tried again on resume;
- ``manifest.json``: what the data was generated from (corpus folder and digest, chunker,
  models, prompt version), so a resume with other settings is refused.

Both JSONL files are :class:`~rag_experiments.common.appendlog.AppendLog` files: a crash can
cut the last line short; reading skips such a torn line (it was never acknowledged) and the
next append cuts it off first, so appends continue on a clean line. A sample is appended before
its attempt record, so a sample without a record still counts as accepted.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rag_experiments.common.appendlog import AppendLog, CorruptLineError
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.records import Sample

log = logging.getLogger(__name__)

EVAL_FILE = "eval.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"
MANIFEST_FILE = "manifest.json"

DONE_STATUSES = frozenset({"accepted", "rejected"})
"""Attempt statuses a resumed run does not repeat."""


@dataclass
class CheckpointState:
    """What an output folder already holds.

    Attributes:
        samples: Accepted samples in file order.
        attempts: The latest attempt record per attempt key.
    """

    samples: list[Sample] = field(default_factory=list)
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def done(self, key: str) -> bool:
        """True when attempt ``key`` was accepted or rejected before."""
        record = self.attempts.get(key)
        return record is not None and record.get("status") in DONE_STATUSES

    def samples_by_type(self, answerable: bool) -> dict[str, int]:
        """Accepted samples per question type: the answerable ones, or the unanswerable ones."""
        return dict(
            Counter(str(s.question_type) for s in self.samples if s.answerable == answerable)
        )

    def attempts_by(self, status: str, key: str = "reason") -> dict[str, int]:
        """Attempts whose latest status is ``status`` (``rejected``, ``error`` …), counted
        per value of their field ``key`` (``reason``: the filter or error; ``question_type``)."""
        return dict(
            Counter(str(a.get(key)) for a in self.attempts.values() if a.get("status") == status)
        )


class Checkpoint:
    """Append-only storage of one generation run in folder ``out``.

    Args:
        out: The output folder (created on first write).
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.eval_path = self.out / EVAL_FILE
        self.attempts_path = self.out / ATTEMPTS_FILE
        self.manifest_path = self.out / MANIFEST_FILE
        self._eval_log = AppendLog(self.eval_path)
        self._attempts_log = AppendLog(self.attempts_path)

    def exists(self) -> bool:
        """True when the folder holds generated data (samples or attempts)."""
        return self.eval_path.is_file() or self.attempts_path.is_file()

    def reset(self) -> None:
        """Delete the samples, attempts and manifest (``overwrite=true``)."""
        for path in (self.eval_path, self.attempts_path, self.manifest_path):
            path.unlink(missing_ok=True)

    def load(self) -> CheckpointState:
        """Read the samples and attempt records written so far.

        Returns:
            The state; empty when the folder is new.

        Raises:
            DatasetError: A line other than a torn last line is not valid JSON, or a sample
                line is not a valid sample.
        """
        state = CheckpointState(samples=self.samples())
        for _, row in _read_rows(self._attempts_log):
            if isinstance(row.get("key"), str):
                state.attempts[row["key"]] = row
        for sample in state.samples:  # a crash between the two appends
            key = sample.metadata.get("attempt")
            if isinstance(key, str) and not state.done(key):
                state.attempts[key] = {
                    "key": key,
                    "status": "accepted",
                    "reason": None,
                    "sample_id": sample.id,
                    "question_type": sample.question_type,
                    "answerable": sample.answerable,
                }
        return state

    def samples(self) -> list[Sample]:
        """The accepted samples written so far (``eval.jsonl`` only, in file order).

        Raises:
            DatasetError: A line other than a torn last line is not valid JSON, or is not a
                valid sample.
        """
        samples = []
        for number, row in _read_rows(self._eval_log):
            try:
                samples.append(Sample.model_validate(row))
            except ValidationError as exc:
                raise DatasetError(
                    f"{self.eval_path}:{number}: not a valid sample ({exc.errors()[0]['msg']}); "
                    "fix or delete the line, or pass overwrite=true to start again"
                ) from exc
        return samples

    def append_sample(self, sample: Sample) -> None:
        """Append one accepted sample to ``eval.jsonl`` and flush it to disk."""
        self._eval_log.append(sample.model_dump(mode="json"))

    def append_attempt(self, record: Mapping[str, Any]) -> None:
        """Append one finished attempt to ``attempts.jsonl`` and flush it to disk."""
        self._attempts_log.append(dict(record))

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none."""
        if not self.manifest_path.is_file():
            return None
        try:
            value = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DatasetError(
                f"{self.manifest_path} cannot be read ({exc}); delete it or pass overwrite=true"
            ) from exc
        return value if isinstance(value, dict) else None

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Write ``manifest.json`` (replacing it atomically)."""
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest_path.with_suffix(".json.tmp")
        tmp.write_text(
            json.dumps(dict(manifest), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        os.replace(tmp, self.manifest_path)

    def check_resumable(self, manifest: Mapping[str, Any], keys: tuple[str, ...]) -> None:
        """Refuse to resume when the stored manifest differs from ``manifest`` on ``keys``.

        Raises:
            ConfigError: Some of ``keys`` differ; the message names them and how to proceed.
        """
        stored = self.read_manifest()
        if stored is None or not self.exists():
            return
        differ = [k for k in keys if stored.get(k) != manifest.get(k)]
        if differ:
            details = "; ".join(f"{k}: {stored.get(k)!r} -> {manifest.get(k)!r}" for k in differ)
            raise ConfigError(
                f"{self.out} holds a generation run with other settings ({details}). Resuming "
                "would mix them: pass overwrite=true to start again, or a new out=<folder>."
            )


def _read_rows(appendlog: AppendLog) -> list[tuple[int, dict[str, Any]]]:
    """JSON objects of an append-only JSONL file with their line numbers (a torn last line
    is skipped).

    Raises:
        DatasetError: A complete line is not a JSON object.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        for record in appendlog.read(strict=True):
            if not isinstance(record.value, dict):
                raise DatasetError(f"{appendlog.path}:{record.number}: expected a JSON object")
            rows.append((record.number, record.value))
    except CorruptLineError as exc:
        raise DatasetError(
            f"{exc.path}:{exc.number}: {exc.detail}; fix or delete the line, or pass "
            "overwrite=true to start again"
        ) from exc
    return rows
