"""The offloading policy's arithmetic (Sponge, section 4.3), as pure functions.

Why separate from the loop: every number the policy acts on comes from these few formulas, so they
are checked against worked examples on their own (tests/policy/test_equations.py), and a logged
decision can be replayed offline by calling them with the logged inputs.

* Eq. 1: the events queued while the input outpaced processing, ∫(r - m) dt over the overload, must
  be drained by the deadline: ∫(m_o - r) dt over [t_o, t_o + D] >= that backlog. Integrals of the
  per-second samples use the composite Simpson's rule.
* Eq. 2: stable per-core throughput of the VMs, r_pc = mean input rate / (CPU% / 100), learnt from
  stable periods.
* Eq. 3: Lambda cores c = ceil(m_o / (0.7 * rho * r_pc)), rho being a Lambda core's capacity in VM
  cores (profiled: bench/offload.py), 0.7 the CPU target; instances = ceil(c / cores per instance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.errors import ConfigError

CPU_LOW = 60.0
CPU_TARGET = 70.0
CPU_HIGH = 80.0


def simpson(samples: Sequence[float], dt: float) -> float:
    """∫ of equally spaced samples (`dt` apart) by the composite Simpson's rule.

    With an odd number of intervals the last one is a trapezoid, so any sample count works; the rule
    is exact for cubics over an even number of intervals. (scipy.integrate.simpson would do; scipy is
    not a dependency, and this is its only use.)
    """
    if dt <= 0:
        raise ConfigError(f"the sampling interval must be positive, got {dt}")
    n = len(samples) - 1  # intervals
    if n < 1:
        return 0.0
    even = n - n % 2
    total = 0.0
    if even:
        inner = sum((4.0 if i % 2 else 2.0) * samples[i] for i in range(1, even))
        total = dt / 3.0 * (samples[0] + inner + samples[even])
    if n % 2:
        total += dt / 2.0 * (samples[-2] + samples[-1])
    return total


def excess_events(input_rate: Sequence[float], throughput: Sequence[float], dt: float) -> float:
    """Left side of Eq. 1: events queued while the input outpaced processing (samples `dt` apart)."""
    if len(input_rate) != len(throughput):
        raise ConfigError(f"{len(input_rate)} input-rate samples for {len(throughput)} throughput samples")
    return simpson([max(r - m, 0.0) for r, m in zip(input_rate, throughput, strict=True)], dt)


def recovery_throughput(excess: float, expected_input: Sequence[float], dt: float) -> float:
    """The least m_o meeting Eq. 1: drain `excess` while serving the expected input over the deadline.

    `expected_input` samples the input rate over [t_o, t_o + D] (D = (len - 1) * dt, the query's
    window slide or size); m_o is constant, so Eq. 1 gives m_o * D >= excess + ∫ r dt.
    """
    deadline = (len(expected_input) - 1) * dt
    if deadline <= 0:
        raise ConfigError("the recovery deadline needs at least two input-rate samples")
    return (excess + simpson(expected_input, dt)) / deadline


def per_core_rate(mean_input_rate: float, cpu_percent: float) -> float:
    """Eq. 2: events/s one VM core handles at 100 %, from a stable period's mean rate and CPU %."""
    if not 0 < cpu_percent <= 100:
        raise ConfigError(f"CPU utilisation must be in (0, 100] %, got {cpu_percent}")
    return mean_input_rate / (cpu_percent / 100.0)


def lambda_cores(
    throughput: float, vm_rate_per_core: float, rho: float, target_cpu: float = CPU_TARGET
) -> int:
    """Eq. 3: Lambda cores that carry `throughput` events/s at the target CPU utilisation."""
    if vm_rate_per_core <= 0 or rho <= 0:
        raise ConfigError("the per-core rate and rho must be positive (profile them first)")
    if not 0 < target_cpu <= 100:
        raise ConfigError(f"the CPU target must be in (0, 100] %, got {target_cpu}")
    if throughput <= 0:
        return 0
    return math.ceil(throughput / (target_cpu / 100.0 * rho * vm_rate_per_core) - 1e-9)


def lambda_instances(cores: int, cores_per_instance: int = 1) -> int:
    """Instances for `cores` (one vCPU per 1769 MB function in the paper, so k = 1)."""
    if cores_per_instance < 1:
        raise ConfigError(f"cores per instance must be >= 1, got {cores_per_instance}")
    return math.ceil(cores / cores_per_instance)


def outside_band(cpu_percent: float, low: float = CPU_LOW, high: float = CPU_HIGH) -> bool:
    """True when the CPU load has left the stable band (one observation; the loop asks for several)."""
    return not low <= cpu_percent <= high
