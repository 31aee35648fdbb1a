"""Which operator's work moves first when the load is uneven: Es-Stream's resource-skewness rule.

Why: Sponge sizes *how much* to offload from one number, the VMs' load. When the operators of a query
are loaded unevenly, that number hides where the time goes, and the work worth moving first is the
hottest operator's. Es-Stream (section V-B (2), Eqs. 19-20) reads the shape of a load distribution
through its sample skewness: SK > eta says a few members carry far more than the rest (right-skewed),
SK <= eta that the load is spread (most members near or above the mean). Es-Stream applies it to its
compute nodes; here the members are the query's operators, as the monitor reports them (their share
of the VMs' busy time, or their queue: any non-negative figure on one scale, since SK is scale-free).

The rule:
* concentrated (SK > eta, or with two operators whose loads differ, where SK is undefined): the
  hottest operator first, then the next; equal loads keep the topological order;
* spread (SK <= eta, or every load equal): the topological order, upstream first, as Es-Stream
  scales dependent operators (section V-B (1): "priority given to ... upstream operators"), since
  moving an upstream operator's records moves its downstream work with them.

The order is advice the offload plan cannot follow yet (it carries one share for every source), so
the policy logs it with each decision; a plan with a share per chain would apply it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ConfigError


def skewness(loads: Sequence[float]) -> float | None:
    """Es-Stream Eq. 19: SK = cs x sum((R_i - mean)^3) / ((cs - 1)(cs - 2) sigma^3), sigma the population
    standard deviation of Eq. 20. None where it is undefined: fewer than three loads, or all equal."""
    cs = len(loads)
    if cs < 3:
        return None
    mean = sum(loads) / cs
    sigma = math.sqrt(sum((r - mean) ** 2 for r in loads) / cs)
    if sigma <= 1e-12 * max(abs(mean), 1.0):
        return None
    return cs * sum((r - mean) ** 3 for r in loads) / ((cs - 1) * (cs - 2) * sigma**3)


@dataclass(frozen=True)
class OffloadOrder:
    """The operators in the order their work should move, and the skewness that chose it."""

    operators: tuple[str, ...]
    skew: float | None
    concentrated: bool


def offload_order(loads: Sequence[tuple[str, float]], eta: float = 0.0) -> OffloadOrder:
    """The order for `loads`, (operator, load) pairs in topological order (upstream first)."""
    if not math.isfinite(eta):
        raise ConfigError(f"the skewness threshold eta must be a finite number, got {eta!r}")
    names = [name for name, _ in loads]
    values = [float(v) for _, v in loads]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"operator loads name an operator twice: {names}",
            hint="the monitor reports one load per operator of the plan",
        )
    if any(not (math.isfinite(v) and v >= 0) for v in values):
        raise ConfigError(f"operator loads must be finite numbers >= 0, got {values}")
    sk = skewness(values)
    uneven = len(set(values)) > 1
    concentrated = sk > eta if sk is not None else (len(values) == 2 and uneven)
    if not concentrated:
        return OffloadOrder(tuple(names), sk, False)
    ranked = sorted(range(len(names)), key=lambda i: -values[i])  # stable: ties stay upstream first
    return OffloadOrder(tuple(names[i] for i in ranked), sk, True)
