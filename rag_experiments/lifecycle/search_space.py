"""Hydra's sweep syntax to Optuna distributions, for the Optuna sweeper
(:mod:`rag_experiments.lifecycle.sweeper`).

Each ``hydra.sweeper.params`` entry and each command-line override is one Hydra override
(`grammar <https://hydra.cc/docs/advanced/override_grammar/extended/>`_); a sweep becomes an
Optuna distribution (`optuna.distributions
<https://optuna.readthedocs.io/en/stable/reference/distributions.html>`_), anything else is a
fixed value passed to every trial:

==============================================  =============================================
override                                        distribution
==============================================  =============================================
``choice(0, 32, 64)``, ``0,32,64``              ``CategoricalDistribution([0, 32, 64])``
``range(256, 1024, step=128)``                  ``IntDistribution(256, 896, step=128)``: the
                                                values of Hydra's (Python's) range, ``stop``
                                                excluded, as the basic sweeper runs them
``range(0.1, 0.5, step=0.1)``                   ``FloatDistribution(0.1, 0.4, step=0.1)``
``shuffle(range(1, 4))``                        ``CategoricalDistribution([1, 2, 3])``
``interval(0.1, 1)``                            ``FloatDistribution(0.1, 1.0)`` (Hydra parses
                                                an interval's bounds as floats)
``tag(log, interval(1e-4, 1e-1))``              ``FloatDistribution(1e-4, 0.1, log=True)``
==============================================  =============================================

hydra-optuna-sweeper 1.3 turned ``range(a, b)`` into ``IntUniformDistribution(a, b)``, whose
``high`` is included: ``range(1, 10)`` there also tried 10. Here it is 1..9, as everywhere else
in Hydra.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    Glob,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from optuna.distributions import (
    BaseDistribution,
    CategoricalChoiceType,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from rag_experiments.errors import ConfigError


def _choices(override: Override) -> list[CategoricalChoiceType]:
    """The values of a discrete sweep (choice, shuffled range): str/int/float/bool as parsed,
    any other value (a list, a dict) as its override string (Hydra's encoder), which is what
    the trial's override then writes back."""
    return list(override.sweep_iterator(transformer=Transformer.encode))


def _range_distribution(override: Override, value: RangeSweep) -> BaseDistribution:
    """``range(start, stop, step)`` as the distribution over exactly the values Hydra's range
    yields (``stop`` excluded)."""
    values = list(override.sweep_iterator())
    if not values:
        raise ConfigError(f"{override.input_line}: the range is empty; widen it")
    low, high = min(values), max(values)
    step = abs(value.step)
    if all(isinstance(v, int) for v in (value.start, value.stop, value.step)):
        return IntDistribution(int(low), int(high), step=int(step))
    return FloatDistribution(float(low), float(high), step=float(step))


def distribution_from_override(override: Override) -> BaseDistribution | str:
    """One parsed Hydra override as an Optuna distribution, or its value when it is no sweep.

    Args:
        override: E.g. ``OverridesParser.create().parse_override("retriever.top_k=range(1,10)")``.

    Returns:
        A :class:`CategoricalDistribution` for ``choice(...)``, ``a,b,c`` and ``shuffle(range
        (...))``; an :class:`IntDistribution` (all of start, stop, step int) or
        :class:`FloatDistribution` for ``range(...)`` (``stop`` excluded, as in Hydra); a
        :class:`FloatDistribution` (``log=True`` with tag ``log``) for ``interval(...)``; the
        value as the override writes it (``str``) for a plain ``key=value``.

    Raises:
        ConfigError: An empty range, or a sweep Optuna cannot sample (``glob(...)``).
    """
    if not override.is_sweep_override():
        return override.get_value_element_as_str()
    value = override.value()
    if isinstance(value, Glob):
        raise ConfigError(
            f"{override.input_line}: the Optuna sweeper cannot expand glob(...); list the "
            "options with choice(...)"
        )
    if override.is_choice_sweep():
        return CategoricalDistribution(_choices(override))
    if isinstance(value, RangeSweep):
        if value.shuffle:
            return CategoricalDistribution(_choices(override))
        return _range_distribution(override, value)
    if isinstance(value, IntervalSweep):
        return FloatDistribution(float(value.start), float(value.end), log="log" in value.tags)
    raise ConfigError(
        f"{override.input_line}: the Optuna sweeper takes choice(...), range(...), "
        "interval(...) and tag(log, interval(...)); write the sweep as one of those"
    )


def search_space(arguments: Sequence[str]) -> tuple[dict[str, BaseDistribution], dict[str, str]]:
    """Split overrides into the search space and the fixed values.

    Args:
        arguments: Overrides as written (``"chunker.size=range(256,1024,step=128)"``,
            ``"objective=nDCG@10"``): ``hydra.sweeper.params`` entries first, then the command
            line's (a later override of a key replaces an earlier one).

    Returns:
        ``(distributions, fixed)``: key → distribution for the swept keys, key → value (as
        written) for the others; a key is in only one of them.

    Raises:
        ConfigError: A sweep Optuna cannot sample (see :func:`distribution_from_override`).
    """
    distributions: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        key = override.get_key_element()
        value = distribution_from_override(override)
        distributions.pop(key, None)
        fixed.pop(key, None)
        if isinstance(value, BaseDistribution):
            distributions[key] = value
        else:
            fixed[key] = value
    return distributions, fixed


def grid_values(name: str, distribution: BaseDistribution) -> list[Any]:
    """Every value of a discrete distribution, for ``optuna.samplers.GridSampler``.

    Args:
        name: The parameter (for the error message).
        distribution: A categorical distribution, or an int/float one with a ``step`` and no
            ``log``.

    Returns:
        The values from ``low`` to ``high`` inclusive (``low + i*step``, in decimal for a
        float step), or the choices.

    Raises:
        ConfigError: A continuous distribution (``interval(...)``): a grid needs a step.
    """
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, IntDistribution) and not distribution.log:
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    if isinstance(distribution, FloatDistribution) and distribution.step is not None:
        low, step = Decimal(str(distribution.low)), Decimal(str(distribution.step))
        n = int((Decimal(str(distribution.high)) - low) / step) + 1
        return [float(low + i * step) for i in range(n)]  # 0.3, not 0.30000000000000004
    raise ConfigError(
        f"hydra.sweeper.params.{name}: the grid sampler takes choice(...) or range(...), "
        f"not a continuous {distribution!r}; give it a step with range(...)"
    )
