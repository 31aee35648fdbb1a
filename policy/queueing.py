"""How many executors a persistent burst needs: the M/M/k model of Es-Stream (section V-B, Algorithm 1).

Why a queueing model and not just ceil(lambda / mu): with exactly enough capacity the queue grows
without bound (utilisation 1), and close to it the waiting time explodes. Modelling the executors as k
servers fed by a Poisson stream (arrival rate lambda) with exponential service (rate mu per executor)
gives the mean wait as a function of k, so the policy can buy the fewest executors that meet a
latency target, or follow Es-Stream's marginal rule (buy one more while it shortens the queue by more
than its resource price beta / (1 - beta)).

Numerics: the Erlang C probability is computed from the Erlang B recursion
B(0) = 1, B(n) = a B(n-1) / (n + a B(n-1)), a = lambda / mu, which stays in [0, 1] and needs no
factorials or powers, so it is stable for k in the hundreds or thousands (the closed form
a^k / k! overflows floats near k = 170). Then C = k B / (k - a (1 - B)). Written out here: no pinned
library offers Erlang B or C, and the recursion is a loop of one line.
"""

from __future__ import annotations

import math

from core.errors import ConfigError

DEFAULT_MAX_SERVERS = 10_000


def _rates(arrival_rate: float, service_rate: float) -> float:
    if not (math.isfinite(arrival_rate) and arrival_rate >= 0):
        raise ConfigError(f"the arrival rate must be a finite number >= 0, got {arrival_rate!r}")
    if not (math.isfinite(service_rate) and service_rate > 0):
        raise ConfigError(
            f"the per-executor service rate must be positive, got {service_rate!r}",
            hint="measure it in a stable period (Eq. 2)",
        )
    return arrival_rate / service_rate


def _servers(k: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"the executor count must be an integer >= 1, got {k!r}")


def erlang_b(k: int, offered_load: float) -> float:
    """Blocking probability of an M/M/k/k loss system with offered load a = lambda / mu (recursion)."""
    if k < 0:
        raise ConfigError(f"the server count must be >= 0, got {k}")
    if not (math.isfinite(offered_load) and offered_load >= 0):
        raise ConfigError(f"the offered load must be a finite number >= 0, got {offered_load!r}")
    b = 1.0
    for n in range(1, k + 1):
        b = offered_load * b / (n + offered_load * b)
    return b


def stable(arrival_rate: float, service_rate: float, k: int) -> bool:
    """True when k executors keep up on average (k mu > lambda); otherwise the queue grows forever."""
    return k * service_rate > arrival_rate


def erlang_c(arrival_rate: float, service_rate: float, k: int) -> float:
    """Probability that an arriving record waits (all k executors busy): Es-Stream's Eq. 16, wp.

    1.0 for an unstable system (every record eventually waits).
    """
    a = _rates(arrival_rate, service_rate)
    _servers(k)
    if a >= k:
        return 1.0
    if a == 0:
        return 0.0
    b = erlang_b(k, a)
    return k * b / (k - a * (1.0 - b))


def mean_waiting_time(arrival_rate: float, service_rate: float, k: int) -> float:
    """Mean time a record queues before an executor takes it: W_q = C / (k mu - lambda); inf if unstable."""
    c = erlang_c(arrival_rate, service_rate, k)
    if not stable(arrival_rate, service_rate, k):
        return math.inf
    return c / (k * service_rate - arrival_rate)


def mean_sojourn_time(arrival_rate: float, service_rate: float, k: int) -> float:
    """Mean time a record spends in the operator, queueing plus service: W = W_q + 1 / mu."""
    return mean_waiting_time(arrival_rate, service_rate, k) + 1.0 / service_rate


def mean_queue_length(arrival_rate: float, service_rate: float, k: int) -> float:
    """Mean records waiting, L_q = lambda W_q (Little's law; Es-Stream's Eq. 17, Ql)."""
    w = mean_waiting_time(arrival_rate, service_rate, k)
    return math.inf if math.isinf(w) else arrival_rate * w


def mean_in_system(arrival_rate: float, service_rate: float, k: int) -> float:
    """Mean records in the operator, waiting or in service: Q(k) = L_q + lambda / mu (Es-Stream Eq. 18)."""
    lq = mean_queue_length(arrival_rate, service_rate, k)
    return math.inf if math.isinf(lq) else lq + arrival_rate / service_rate


def min_stable_servers(arrival_rate: float, service_rate: float) -> int:
    """The fewest executors with k mu > lambda (at least 1)."""
    a = _rates(arrival_rate, service_rate)
    return max(1, math.floor(a) + 1)


def min_servers(
    arrival_rate: float,
    service_rate: float,
    *,
    max_sojourn_s: float | None = None,
    max_wait_s: float | None = None,
    max_servers: int = DEFAULT_MAX_SERVERS,
) -> int:
    """The fewest executors k (stable: k mu > lambda) whose mean sojourn and/or waiting time meet the targets.

    Both the waiting and the sojourn time fall monotonically with k, so the first k that meets the
    targets is the answer; the search starts at the stability bound and costs O(k) Erlang B steps each.
    With no target it returns the stability bound.
    """
    k = min_stable_servers(arrival_rate, service_rate)
    if max_sojourn_s is not None and not max_sojourn_s > 1.0 / service_rate:
        raise ConfigError(
            f"a mean sojourn of {max_sojourn_s} s is unreachable: one record's service alone takes "
            f"1 / mu = {1.0 / service_rate:.6g} s",
            hint="raise the target or speed up the executors",
        )
    if max_wait_s is not None and not max_wait_s > 0:
        raise ConfigError(
            f"the waiting-time target must be positive, got {max_wait_s}",
            hint="no finite k makes the mean wait exactly 0",
        )

    def meets(n: int) -> bool:
        w = mean_waiting_time(arrival_rate, service_rate, n)
        if max_wait_s is not None and w > max_wait_s:
            return False
        return max_sojourn_s is None or w + 1.0 / service_rate <= max_sojourn_s

    while k <= max_servers:
        if meets(k):
            return k
        k += 1
    raise ConfigError(
        f"more than {max_servers} executors would be needed to meet the target",
        hint="relax the latency target or raise max_servers",
    )


def es_stream_servers(
    arrival_rate: float, service_rate: float, beta: float, *, max_servers: int = DEFAULT_MAX_SERVERS
) -> int:
    """Es-Stream Algorithm 1: the k* with Q(k*) - Q(k*+1) <= beta / (1 - beta) <= Q(k*-1) - Q(k*).

    beta in (0, 1) is the share of a node's resources one more instance takes: the dearer an instance,
    the fewer queued records it must save to be worth adding. Q(k), the mean records in the operator,
    is convex and decreasing in k, so the first stable k whose next instance saves no more than the
    price is the optimum (the paper's condition (11); its listing's step 7 has the second difference's
    sign flipped). Q(k - 1) is infinite at the stability bound, so the right inequality holds there.
    """
    if not 0 < beta < 1:
        raise ConfigError(f"beta (an instance's resource share) must be in (0, 1), got {beta}")
    price = beta / (1.0 - beta)
    k = min_stable_servers(arrival_rate, service_rate)
    q_k = mean_in_system(arrival_rate, service_rate, k)
    while True:
        q_next = mean_in_system(arrival_rate, service_rate, k + 1)
        if q_k - q_next <= price:
            return k
        k, q_k = k + 1, q_next
        if k > max_servers:
            raise ConfigError(
                f"Algorithm 1 did not settle below {max_servers} executors", hint="raise beta or max_servers"
            )
