"""The fake judge (``judge=fake``) returns one context verdict per context it is given: its
scripted verdicts (``conf/judge/fake.yaml``) are cycled or cut to the count the output model
asks for, so context precision works at any ``retriever.top_k``."""

from __future__ import annotations

import pytest
import yaml

from rag_experiments.llm.fake import FakeChat, fit_list_lengths
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.prompts.context_precision import output_model
from rag_experiments.metrics.prompts.faithfulness import FaithfulnessOutput
from rag_experiments.records import RagResponse, Sample

SCRIPT = yaml.safe_load((PROJECT_ROOT / "conf" / "judge" / "fake.yaml").read_text())["responses"]


def test_the_shipped_script_has_the_five_verdicts_this_test_expects() -> None:
    assert SCRIPT["ContextVerdicts"] == {"verdicts": ["yes", "no", "yes", "no", "no"]}


def test_judge_fake_fits_lengths_and_a_bare_fake_keeps_its_script(compose_cfg) -> None:
    from hydra.utils import instantiate

    from rag_experiments.llm.roles import judge_model_node

    judge = instantiate(judge_model_node(compose_cfg("judge=fake").judge))
    assert isinstance(judge, FakeChat) and judge.fit_lengths
    schema = output_model(3)
    reply = judge.complete([{"role": "user", "content": "x"}], schema=schema)
    assert reply.parsed.verdicts == ["yes", "no", "yes"]
    verbatim = FakeChat(SCRIPT).complete([{"role": "user", "content": "x"}], schema=output_model(5))
    assert verbatim.parsed.verdicts == ["yes", "no", "yes", "no", "no"]


@pytest.mark.parametrize(
    ("n", "verdicts"),
    [
        (1, ["yes"]),
        (3, ["yes", "no", "yes"]),
        (7, ["yes", "no", "yes", "no", "no", "yes", "no"]),
    ],
)
def test_verdicts_are_cut_or_cycled_to_the_number_of_contexts(n: int, verdicts: list) -> None:
    fitted = fit_list_lengths(SCRIPT["ContextVerdicts"], output_model(n))
    assert fitted == {"verdicts": verdicts}
    assert SCRIPT["ContextVerdicts"]["verdicts"] == ["yes", "no", "yes", "no", "no"]  # unchanged


def test_a_list_without_an_exact_length_is_left_as_scripted() -> None:
    claims = SCRIPT["FaithfulnessOutput"]
    assert fit_list_lengths(claims, FaithfulnessOutput) == claims


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (2, 1.0),  # yes, no: the one useful context is first -> P@1 = 1
        (7, (1 + 2 / 3 + 3 / 6) / 3),  # yes at ranks 1, 3, 6: mean of P@1, P@3, P@6 = 13/18
    ],
)
def test_context_precision_with_the_fake_judge_at_any_number_of_contexts(
    n: int, expected: float
) -> None:
    judge = FakeChat(SCRIPT, fit_lengths=True)
    sample = Sample(id="q1", user_input="How is an account created?", reference="Form AR-1.")
    response = RagResponse(
        response="Form AR-1.", retrieved_contexts=[f"passage {i}" for i in range(n)]
    )
    (row,) = ContextPrecision(judge=judge).evaluate([sample], [response])
    assert row["context_precision"].value == pytest.approx(expected)
    assert judge.calls == 1  # no parse error, no retry
