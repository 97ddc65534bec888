"""The baseline asked to cite (``target.cite=true``): the citation instruction joins the
system prompt the generator receives."""

from __future__ import annotations

from typing import Any

from rag_experiments.llm.fake import FakeChat
from rag_experiments.targets.baseline import BaselineTarget
from rag_experiments.targets.prompts import CITE_INSTRUCTION, answer_messages


def test_cite_appends_the_instruction_to_the_system_prompt():
    unused: Any = None
    plain = BaselineTarget(unused, unused, unused, unused, FakeChat(), system_prompt="Be brief.")
    cited = BaselineTarget(
        unused, unused, unused, unused, FakeChat(), system_prompt="Be brief.", cite=True
    )
    assert plain.system_prompt == "Be brief."
    assert cited.system_prompt == f"Be brief. {CITE_INSTRUCTION}"
    messages = answer_messages(cited.system_prompt, "Q?", ["a", "b"])
    assert messages[0]["content"].endswith(
        "e.g. [1] or [1][3]; cite only passages that state what the sentence says."
    )
    assert "[2] b" in messages[1]["content"]
