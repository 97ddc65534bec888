"""Few-shot examples in a judge's prompt: graded examples people labeled, shown to the judge
before its task (in-context learning, Brown et al., "Language Models are Few-Shot Learners",
NeurIPS 2020), as MLflow's judge alignment keeps concrete examples beside its instructions
(the *episodic memory* of MemAlign; mlflow.org/docs/latest/genai/eval-monitor/scorers/
llm-judge/alignment and …/llm-judge/memalign).

Every judged metric takes ``examples`` (``metrics.suite.<m>.examples=<file.yaml>``, or a list
in the suite YAML): an :class:`ExampleSet`. A metric with examples asks its prompt with the
block :meth:`ExampleSet.block` inserted before the prompt's ``Task:`` paragraph (after the
contexts, so a server that reuses the common prompt prefix still does), and its prompt id gets
the set's version (``faithfulness-v1+ex-1a2b3c4d``): a changed example set is another prompt,
in the judge audit, in the judge-check identity and in the response cache's key (which hashes
the messages).

The file, as ``rag-exp align`` writes it::

    metric: faithfulness          # the column the labels are of
    version: ex-1a2b3c4d          # sha256 of the examples, first 8 hex (recomputed on load)
    method: …                     # how they were chosen (free text)
    examples:
      - id: q07                   # the sample id (free)
        question: …
        answer: …
        contexts: [ … ]           # optional; shown cut to CONTEXT_CHARS each
        reference: …              # optional
        verdict: unfaithful       # the people's label, as shown to the judge
        value: 0.0                # the same in [0, 1]
        note: …                   # optional: why (shown)

Only ``question``, ``answer`` and ``verdict`` are required; an unknown key is refused with the
closest known one.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rag_experiments.errors import ConfigError

BLOCK_TITLE = "Examples graded by people (grade the Answer below the same way):"
"""First line of the examples block (the example-reading fake judge finds the block by it)."""

GRADE_MARK = "Human grade: "
"""Start of an example's grade line (``Human grade: faithful (1.00 on a 0-1 scale)``)."""

CONTEXT_CHARS = 300
"""Characters of each context shown in an example."""

TASK_MARK = "\n\nTask:"
"""Where the block goes: before the last paragraph starting ``Task:`` (else at the end)."""


@dataclass(frozen=True)
class Example:
    """One graded example.

    Attributes:
        question: The question.
        answer: The answer graded.
        verdict: The people's label (``faithful``, ``pass``, ``4`` …), shown to the judge.
        value: The label in [0, 1] (None when the set gives none).
        contexts: Retrieved contexts shown with it.
        reference: Reference answer shown with it ("" = none).
        note: Why, shown to the judge ("" = none).
        id: Sample id (not shown).
    """

    question: str
    answer: str
    verdict: str
    value: float | None = None
    contexts: tuple[str, ...] = ()
    reference: str = ""
    note: str = ""
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, no empty optional fields) for YAML."""
        out = asdict(self)
        out["contexts"] = list(self.contexts)
        return {k: v for k, v in out.items() if v not in ("", None, [])}


_FIELDS = [f for f in Example.__dataclass_fields__]


def _example(raw: Any, where: str) -> Example:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: an example is a mapping with question, answer and verdict")
    unknown = [k for k in raw if k not in _FIELDS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), _FIELDS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"its keys: {', '.join(_FIELDS)}"
        raise ConfigError(f"{where}: {unknown[0]!r} is not a key of an example: {hint}")
    missing = [k for k in ("question", "answer", "verdict") if raw.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"{where}: an example needs {', '.join(missing)}")
    value = raw.get("value")
    if value is not None and (isinstance(value, bool) or not 0 <= float(value) <= 1):
        raise ConfigError(f"{where}: value {value!r} is not a number in [0, 1]")
    contexts = raw.get("contexts") or ()
    if isinstance(contexts, str):
        contexts = (contexts,)
    return Example(
        question=str(raw["question"]),
        answer=str(raw["answer"]),
        verdict=str(raw["verdict"]),
        value=None if value is None else float(value),
        contexts=tuple(str(c) for c in contexts),
        reference=str(raw.get("reference") or ""),
        note=str(raw.get("note") or ""),
        id=str(raw.get("id") or ""),
    )


@dataclass(frozen=True)
class ExampleSet:
    """Graded examples for one metric's prompt, versioned by content.

    Attributes:
        examples: The examples, in prompt order.
        metric: The metric column they grade ("" = not said).
        method: How they were chosen (free text).
        source: Where the file came from ("" = inline).
    """

    examples: tuple[Example, ...]
    metric: str = ""
    method: str = ""
    source: str = field(default="", compare=False)

    @property
    def version(self) -> str:
        """``ex-<first 8 hex of sha256 of the examples as JSON>``: the prompt's version
        suffix."""
        blob = json.dumps([e.to_dict() for e in self.examples], sort_keys=True)
        return "ex-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:8]

    def block(self, reads: Sequence[str] = ("question", "contexts", "answer")) -> str:
        """The examples as prompt text: :data:`BLOCK_TITLE`, then per example its fields
        (those of ``reads`` it has), ``Human grade: <verdict> (<value> on a 0-1 scale)`` and
        the note."""
        parts = [BLOCK_TITLE]
        for i, e in enumerate(self.examples, start=1):
            lines = [f"Example {i}:"]
            if "contexts" in reads and e.contexts:
                shown = "\n".join(
                    f"[{k}] {c.strip()[:CONTEXT_CHARS]}" for k, c in enumerate(e.contexts, 1)
                )
                lines.append(f"Context passages:\n{shown}")
            lines.append(f"Question: {e.question}")
            if "reference" in reads and e.reference:
                lines.append(f"Reference answer: {e.reference}")
            lines.append(f"Answer: {e.answer}")
            value = "" if e.value is None else f" ({e.value:.2f} on a 0-1 scale)"
            lines.append(f"{GRADE_MARK}{e.verdict}{value}")
            if e.note:
                lines.append(f"Why: {e.note}")
            parts.append("\n".join(lines))
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The file's content (see the module docstring)."""
        return {
            "metric": self.metric,
            "version": self.version,
            "method": self.method,
            "examples": [e.to_dict() for e in self.examples],
        }

    def write(self, path: str | Path) -> Path:
        """Write the set as YAML to ``path`` (folders made); returns the path."""
        import yaml

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(
            yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True, width=100),
            encoding="utf-8",
        )
        return p


def insert_block(user_message: str, block: str) -> str:
    """``user_message`` with ``block`` before its last ``Task:`` paragraph (at the end when it
    has none)."""
    head, mark, tail = user_message.rpartition(TASK_MARK)
    if not mark:
        return f"{user_message}\n\n{block}"
    return f"{head}\n\n{block}{mark}{tail}"


def load_examples(value: Any, where: str = "examples") -> ExampleSet | None:
    """The example set a metric's ``examples`` parameter names.

    Args:
        value: None (no examples), a path to a YAML file (see the module docstring), a list
            of example mappings, a mapping with ``examples``, or an :class:`ExampleSet`.
        where: The config key, for messages.

    Returns:
        The set, or None for None or an empty list.

    Raises:
        ConfigError: No such file, not YAML, or a malformed example (the message names the
            file, the example's index and the fix).
    """
    if value is None or isinstance(value, ExampleSet):
        return value
    source = ""
    if isinstance(value, str | Path):
        import yaml

        source = str(value)
        p = Path(value)
        if not p.is_file():
            raise ConfigError(
                f"{where}={value}: no such file; give an example set written by `rag-exp align` "
                "(YAML with an `examples` list)"
            )
        try:
            value = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{where}={source}: cannot read it as YAML ({exc})") from exc
    meta: Mapping[str, Any] = {}
    if isinstance(value, Mapping):
        meta = value
        value = value.get("examples")
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigError(f"{where}: expected a list of examples (or a file holding one)")
    label = f"{where}={source}" if source else where
    examples = tuple(_example(raw, f"{label}[{i}]") for i, raw in enumerate(value))
    if not examples:
        return None
    return ExampleSet(
        examples, str(meta.get("metric") or ""), str(meta.get("method") or ""), source
    )
