"""pytest plugin: write the regression gate as a test (the ``pytest11`` entry point is the
small module :mod:`rag_experiments_pytest`, which declares the fixture and imports this module
only when a test uses it).

* fixture ``rag_eval``: ``rag_eval(*overrides) -> RagRun`` runs ``rag-exp run <overrides>``
  in-process (the config composed from the bundled ``conf/`` by Hydra's compose API, the job run
  by the engine :func:`rag_experiments.job.run_job`) and returns the logged run. Without a
  ``tracking.uri=`` override the run goes to a sqlite store in the test's ``tmp_path``; progress
  bars are off.
* ``assert_rag(run, rules, baseline=None)``: apply gate rules
  (:mod:`rag_experiments.analysis.gate`) to the run, against ``baseline`` (a :class:`RagRun`, a
  run id or an alias of the run's experiment); raises ``AssertionError`` with one line per rule
  when a rule failed or the gate could not decide.

Example (``target=recorded`` scores answers your pipeline wrote; the fake models need nothing)::

    from rag_experiments.pytest_plugin import assert_rag

    def test_no_regression(rag_eval):
        base = rag_eval("dataset=ragas", "dataset.path=main.jsonl", "target=recorded",
                        "llm=fake", "judge=fake", "embedder=hash")
        cand = rag_eval("dataset=ragas", "dataset.path=pr.jsonl", "target=recorded",
                        "llm=fake", "judge=fake", "embedder=hash")
        assert_rag(cand, {"false_refusal_rate": {"max_drop": 0.05}}, baseline=base)

pytest loads the entry point in every session of an environment where the package is
installed; importing :mod:`rag_experiments` sets the offline environment variables
(:mod:`rag_experiments.offline`), which a team's unrelated tests must not inherit, so the entry
point does not import it until ``rag_eval`` is used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_TAG = "rag_eval.marker"
"""Run tag by which the fixture finds the run it just logged."""


@dataclass(frozen=True)
class RagRun:
    """A run logged by ``rag_eval``.

    Attributes:
        run_id: MLflow run id.
        tracking_uri: The store holding it.
    """

    run_id: str
    tracking_uri: str


def assert_rag(
    run: RagRun,
    rules: Mapping[str, Any],
    baseline: RagRun | str | None = None,
) -> None:
    """Gate ``run``: every rule must pass.

    Args:
        run: The candidate (from ``rag_eval``).
        rules: ``{metric: {min, max, max_drop, by_type}}``, or a whole gate config
            ``{"rules": {...}, "alpha": 0.05, "min_pairs": 5}``.
        baseline: The baseline run, its id or an alias of the run's experiment; needed by
            ``max_drop`` rules. Must be in the same store.

    Raises:
        AssertionError: A rule failed or the gate could not decide (different datasets, too
            few rows, a missing metric); the message holds one line per rule.
        ConfigError: Malformed rules.
    """
    from rag_experiments.analysis.gate import gate_runs, parse_settings

    raw = dict(rules) if "rules" in rules else {"rules": dict(rules)}
    settings = parse_settings(raw, "assert_rag rules")
    ref = baseline.run_id if isinstance(baseline, RagRun) else baseline
    result = gate_runs(run.tracking_uri, run.run_id, ref, settings)
    if result.exit_code:
        raise AssertionError("\n".join(result.lines()))


def make_rag_eval(tmp_path: Path) -> Callable[..., RagRun]:
    """The body of the ``rag_eval`` fixture (declared in :mod:`rag_experiments_pytest`, the
    entry point, so that pytest sessions that never use it do not import this package).

    Args:
        tmp_path: Folder of the default sqlite store (``<tmp_path>/mlruns.db``).

    Returns:
        ``rag_eval(*overrides) -> RagRun`` (module docstring).
    """

    def _run(*overrides: str) -> RagRun:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from rag_experiments.config import register
        from rag_experiments.job import run_job
        from rag_experiments.locations import CONF_DIR
        from rag_experiments.tracking.store import find_runs, open_store

        register()
        base = ["progress=false"]
        if not any(o.startswith("tracking.uri=") for o in overrides):
            base.append(f"tracking.uri=sqlite:///{tmp_path}/mlruns.db")
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                cfg = compose(config_name="config", overrides=[*base, *overrides])
        finally:
            GlobalHydra.instance().clear()
        marker = uuid.uuid4().hex
        run_job(cfg, extra_tags={RUN_TAG: marker})
        uri = str(cfg.tracking.uri)
        client = open_store(uri)
        experiment = client.get_experiment_by_name(str(cfg.tracking.experiment))
        (run,) = find_runs(client, [experiment.experiment_id], f"tags.`{RUN_TAG}` = '{marker}'")
        return RagRun(run.info.run_id, uri)

    return _run
