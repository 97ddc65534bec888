"""Judge qualifications in MLflow: logged by ``rag-exp judge-check``, looked up by every run.

A qualification is a FINISHED run of experiment :data:`JUDGES_EXPERIMENT` (``judges``) with

- tags ``judge.provider``, ``judge.model``, ``judge.digest`` (the judge's identity, as
  :meth:`~rag_experiments.llm.factory.ModelSession.identity_by_role` tags every run) and params
  ``prompt.<probe>`` (the prompt id with its version each probe asked);
- metrics ``<probe>.<statistic>`` (``faithfulness.kappa``, ``faithfulness.ci_low`` …) and the
  full report as ``judge_check.json``.

A later ``rag-exp run`` whose judge has the same provider, model and digest, and whose
faithfulness prompt is the one the qualification used, finds the newest such run
(:func:`find_qualification`) and carries it as tags ``judge.qualification.*``
(:func:`apply_qualification`). The faithfulness probe's kappa is the qualifying number:
below ``judge.min_kappa`` (default 0.4, "fair" agreement at best on Landis & Koch's 1977 scale)
the console and the run description warn; ``judge.require_qualified=true`` refuses a run whose
judge has no qualification or one below ``min_kappa``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.qualify.check import PROMPT_IDS, AgreementResult, PositionBiasResult

JUDGES_EXPERIMENT = "judges"
"""The MLflow experiment of judge qualifications."""

QUALIFYING_PROBE = "faithfulness"
"""The probe whose kappa qualifies a judge."""

IDENTITY_TAGS = ("judge.provider", "judge.model", "judge.digest")
"""The identity tags a qualification must share with a run's judge."""

DEFAULT_MIN_KAPPA = 0.4


@dataclass(frozen=True)
class QualifySettings:
    """What a run asks of its judge's qualification (``build.qualify_settings`` reads them
    from the ``judge`` node).

    Attributes:
        min_kappa: ``judge.min_kappa``: below it the run warns (or refuses).
        require_qualified: ``judge.require_qualified``: refuse a judge without a qualification
            or one below ``min_kappa``.
    """

    min_kappa: float = DEFAULT_MIN_KAPPA
    require_qualified: bool = False


@dataclass(frozen=True)
class Qualification:
    """A judge's qualification as logged by ``rag-exp judge-check``.

    Attributes:
        run_id: The ``judges`` run.
        kappa: Faithfulness kappa against the labels, in [-1, 1] (NaN when undefined).
        ci_low: Lower end of its 95 % bootstrap interval.
        ci_high: Upper end.
        balanced_accuracy: Faithfulness balanced accuracy in [0, 1].
        n: Pairs with a verdict.
        data: The labeled set (``bundled`` or a file path).
    """

    run_id: str
    kappa: float
    ci_low: float
    ci_high: float
    balanced_accuracy: float
    n: int
    data: str

    def tags(self) -> dict[str, str]:
        """Run tags ``judge.qualification.*``."""
        return {
            "judge.qualification.run_id": self.run_id,
            "judge.qualification.kappa": f"{self.kappa:.4f}",
            "judge.qualification.kappa_ci": f"[{self.ci_low:.4f}, {self.ci_high:.4f}]",
            "judge.qualification.balanced_accuracy": f"{self.balanced_accuracy:.4f}",
            "judge.qualification.n": str(self.n),
            "judge.qualification.data": self.data,
        }

    def describe(self) -> str:
        """One line for the console."""
        return (
            f"judge qualification: faithfulness kappa {self.kappa:.3f} "
            f"[{self.ci_low:.3f}, {self.ci_high:.3f}], balanced accuracy "
            f"{self.balanced_accuracy:.3f}, n={self.n} on {self.data} "
            f"(judge-check run {self.run_id})"
        )


def check_metrics(results: Mapping[str, AgreementResult | PositionBiasResult]) -> dict[str, float]:
    """The numeric values of every probe's summary as metrics ``<probe>.<key>``."""
    out: dict[str, float] = {}
    for probe, result in results.items():
        for key, value in result.to_dict().items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{probe}.{key}"] = float(value)
    return out


def qualification_params(identity: Mapping[str, str]) -> dict[str, Any]:
    """Params of a judge-check run: ``qualified_judge.{provider,model,digest}`` and
    ``prompt.<probe>`` (the prompt ids)."""
    return {
        "qualified_judge": {k.split(".", 1)[1]: identity.get(k, "") for k in IDENTITY_TAGS},
        "prompt": dict(PROMPT_IDS),
    }


def _judge_identity(tags: Mapping[str, str], params: Mapping[str, str]) -> dict[str, str]:
    """The judge a judge-check run qualified: its params ``qualified_judge.<provider|model|
    digest>`` (:func:`qualification_params`; its ``judge.*`` tags are kept in ``tags.json``
    since issue 41), else, for a run logged before those params, its ``judge.*`` tags."""
    return {
        k: params.get(f"qualified_judge.{k.split('.', 1)[1]}", tags.get(k)) or ""
        for k in IDENTITY_TAGS
    }


def find_qualification(uri: str, identity: Mapping[str, str]) -> Qualification | None:
    """The newest FINISHED ``judges`` run for this judge identity and the current
    faithfulness prompt, or None (also when the experiment does not exist).

    Args:
        uri: Tracking URI (the run's ``tracking.uri``).
        identity: The run's ``judge.*`` identity tags.
    """
    from rag_experiments.tracking.store import open_store

    client = open_store(uri)
    exp = client.get_experiment_by_name(JUDGES_EXPERIMENT)
    if exp is None:
        return None
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string="attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=500,
    )
    want_prompt = PROMPT_IDS[QUALIFYING_PROBE]
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        if _judge_identity(tags, params) != {k: identity.get(k) or "" for k in IDENTITY_TAGS}:
            continue
        if params.get(f"prompt.{QUALIFYING_PROBE}") != want_prompt:
            continue
        kappa = metrics.get(f"{QUALIFYING_PROBE}.kappa", math.nan)
        if f"{QUALIFYING_PROBE}.n" not in metrics:
            continue
        return Qualification(
            run_id=run.info.run_id,
            kappa=kappa,
            ci_low=metrics.get(f"{QUALIFYING_PROBE}.ci_low", math.nan),
            ci_high=metrics.get(f"{QUALIFYING_PROBE}.ci_high", math.nan),
            balanced_accuracy=metrics.get(f"{QUALIFYING_PROBE}.balanced_accuracy", math.nan),
            n=int(metrics[f"{QUALIFYING_PROBE}.n"]),
            data=tags.get("judge_check.data", "?"),
        )
    return None


def apply_qualification(
    settings: QualifySettings,
    tracker: Any,
    identity: Mapping[str, str],
    note: str | None = None,
    scripted: bool = False,
) -> Qualification | None:
    """Look up the run's judge qualification, tag the run with it, print it, and warn or
    refuse (rules in the module docstring). Does nothing when the run built no judge.

    Args:
        settings: ``judge.min_kappa`` and ``judge.require_qualified``.
        tracker: The run's tracker (its ``uri``; tags are set on its active run).
        identity: The job's :meth:`~rag_experiments.llm.factory.ModelSession.identity_by_role`
            after the build.
        note: The run's description so far (a warning is appended to it).
        scripted: The judge is a scripted test double
            (:attr:`~rag_experiments.llm.base.ChatModelBase.scripted`, ``judge=fake``): no
            qualification is not worth a line (still tagged ``none``).

    Returns:
        The qualification found, or None.

    Raises:
        ConfigError: ``judge.require_qualified=true`` and no qualification, or one whose
            kappa is below ``judge.min_kappa``.
    """
    if "judge.provider" not in identity:
        return None
    min_kappa = float(settings.min_kappa)
    required = bool(settings.require_qualified)
    who = f"{identity.get('judge.provider')}/{identity.get('judge.model')}"
    fix = (
        f"run `rag-exp judge-check judge=<this judge's config>` (experiment "
        f"{JUDGES_EXPERIMENT!r} at {tracker.uri})"
    )
    found = find_qualification(tracker.uri, identity)
    if found is None:
        if required:
            raise ConfigError(
                f"judge {who} (digest {identity.get('judge.digest')}) has no "
                f"qualification and judge.require_qualified=true: {fix}, or set "
                "judge.require_qualified=false"
            )
        tracker.set_tags({"judge.qualification": "none"})
        if not scripted:
            print(f"judge qualification: none for {who}; {fix} to measure it")
        return None
    tracker.set_tags({"judge.qualification": "found", **found.tags()})
    print(found.describe())
    if math.isnan(found.kappa) or found.kappa < min_kappa:
        warning = (
            f"WARNING: judge {who} agrees little with labeled faithfulness pairs: kappa "
            f"{found.kappa:.3f} [{found.ci_low:.3f}, {found.ci_high:.3f}] is below "
            f"judge.min_kappa={min_kappa}. Treat its LLM-judged scores with care."
        )
        if required:
            raise ConfigError(
                f"{warning} judge.require_qualified=true refuses to run: choose a "
                "better judge (judge=…), lower judge.min_kappa or set "
                "judge.require_qualified=false"
            )
        print(warning)
        tracker.set_tags(
            {
                "judge.qualification.warning": "below_min_kappa",
                "mlflow.note.content": f"{note}\n\n{warning}" if note else warning,
            }
        )
    return found
