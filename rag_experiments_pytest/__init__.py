"""The ``pytest11`` entry point of rag-experiments: declares the ``rag_eval`` fixture.

A separate top-level package on purpose: pytest imports every installed ``pytest11`` plugin in
every session, and importing :mod:`rag_experiments` sets its offline environment variables
(``HF_HUB_OFFLINE`` …), which a team's unrelated tests in the same environment must not
inherit. This module imports only pytest; the fixture's work lives in
:mod:`rag_experiments.pytest_plugin` (also home of ``assert_rag``) and loads on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def rag_eval(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``rag_eval(*overrides) -> RagRun``: one ``rag-exp run <overrides>`` in-process, logged
    to ``<tmp_path>/mlruns.db`` unless ``tracking.uri=`` is given
    (:func:`rag_experiments.pytest_plugin.make_rag_eval`)."""
    from rag_experiments.pytest_plugin import make_rag_eval

    yield make_rag_eval(tmp_path)
