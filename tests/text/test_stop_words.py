"""The stop-word list copied from scikit-learn (rag_experiments.text.stop_words) is
scikit-learn's, word for word, and using it does not import scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rag_experiments.text.stop_words import ENGLISH_STOP_WORDS

pytestmark = pytest.mark.slow  # scikit-learn's import, a fresh interpreter


def test_the_copy_equals_scikit_learns_list() -> None:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as reference

    assert ENGLISH_STOP_WORDS == frozenset(reference)
    assert len(ENGLISH_STOP_WORDS) == 318


def test_keyword_faithfulness_does_not_import_scikit_learn() -> None:
    code = (
        "import sys\n"
        "from rag_experiments.metrics.keyword_faithfulness import KeywordFaithfulness\n"
        "KeywordFaithfulness()\n"
        "print('sklearn' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
