"""The pytest plugin (``rag_experiments.pytest_plugin``: ``rag_eval`` fixture, ``assert_rag``)
used from a test file outside the package, run by ``pytester``: a candidate that refuses 8 of
the 60 answerable questions fails its ``max_drop`` rule with the rule named; the baseline
passes a bound on its own mean."""

from __future__ import annotations

import importlib.metadata

import pytest

from tests.gate_data import FAKE_RUN, answerable_ids, write_answers

pytest_plugins = ["pytester"]

PLUGIN = "rag_experiments_pytest"

TEST_FILE = """
from rag_experiments.pytest_plugin import assert_rag

FAKE = {fake!r}


def test_candidate_is_not_worse(rag_eval):
    base = rag_eval(*FAKE, "dataset.path={base}", "run_name=base")
    cand = rag_eval(*FAKE, "dataset.path={cand}", "run_name=cand")
    assert_rag(cand, {{"false_refusal_rate": {{"max_drop": 0.05}}}}, baseline=base)


def test_baseline_keeps_its_floor(rag_eval):
    base = rag_eval(*FAKE, "dataset.path={base}")
    rules = {{"false_refusal_rate": {{"max": 0.0}}, "keyword_faithfulness": {{"min": 0.9}}}}
    assert_rag(base, rules)
"""


def _plugin_args() -> list[str]:
    """``-p`` the plugin unless it is installed (an installed ``pytest11`` entry point loads it;
    registering it twice is an error)."""
    installed = {e.value for e in importlib.metadata.entry_points(group="pytest11")}
    return [] if PLUGIN in installed else ["-p", PLUGIN]


@pytest.mark.slow
def test_plugin_from_a_test_file_outside_the_package(pytester: pytest.Pytester) -> None:
    base = write_answers(pytester.path / "main.jsonl")
    cand = write_answers(pytester.path / "pr.jsonl", refuse=answerable_ids()[:8])
    pytester.makepyfile(test_rag=TEST_FILE.format(fake=FAKE_RUN, base=base, cand=cand))
    result = pytester.runpytest_subprocess(*_plugin_args(), "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    # the failed rule is named, with the worsening 8/60 of a lower-is-better rate
    result.stdout.fnmatch_lines([
        "*AssertionError: FAIL*false_refusal_rate max_drop 0.05 [[]all[]]*candidate 0.1333 "
        "vs baseline 0.0000*lower is better*",
        "*gate FAIL*1 failed*",
    ])  # fmt: skip
