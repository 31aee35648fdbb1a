"""How many Lambda workers carry an offloaded rate: Sponge's Eq. 3, checked or replaced by Es-Stream's M/M/k.

Why a choice and not one formula: Eq. 3 (Sponge 4.3.1) sizes the workers at a 70 % utilisation, a
rule of thumb for CPU headroom that says nothing about how long a chunk waits for a worker. Es-Stream
(V-B (1)) models an operator's instances as an M/M/k queue and sizes them on the queue it leaves.
Workers are fed chunks, not records: a chunk is the customer (`chunk_events` records), and its
service takes chunk_events / (rho x per-core rate) seconds on one worker. The M/M/k count depends on
the offered load a = lambda / mu alone for Algorithm 1, and on the service time too for a waiting-time
target, so the chunk matters: with a 16,384-record chunk and a slow worker, one worker at 70 % keeps a
chunk waiting 2.3 service times on average, well past a 2 s recovery deadline.

* `EQ3`: Eq. 3 alone (the paper's rule; what decision logs before this choice existed replay with).
* `EQ3_MMK`: Eq. 3, raised to the fewest workers whose mean chunk wait (Erlang C) meets `chunk_wait_s`;
  Eq. 3 already leaves 30 % headroom, so the check only adds workers where a few are busy.
* `ES_STREAM`: Es-Stream's Algorithm 1 alone, with `beta` a worker's resource share (a worker is added
  while it takes more than beta / (1 - beta) chunks out of the system).
"""

from __future__ import annotations

from core.errors import ConfigError
from policy.equations import lambda_cores
from policy.queueing import es_stream_servers, min_servers

EQ3 = "eq3"
EQ3_MMK = "eq3+mmk"
ES_STREAM = "es-stream"
SIZINGS = (EQ3, EQ3_MMK, ES_STREAM)


def check_sizing(sizing: str, chunk_events: int, chunk_wait_s: float, beta: float) -> None:
    """Refuse a sizing the policy cannot apply, before it is used."""
    if sizing not in SIZINGS:
        raise ConfigError(f"unknown worker sizing {sizing!r}", hint=f"one of {', '.join(SIZINGS)}")
    if isinstance(chunk_events, bool) or not isinstance(chunk_events, int) or chunk_events < 1:
        raise ConfigError(
            f"chunk_events must be an integer >= 1, got {chunk_events!r}",
            hint="the router's chunk size in records (16,384 by default)",
        )
    if not chunk_wait_s > 0:
        raise ConfigError(
            f"chunk_wait_s must be > 0, got {chunk_wait_s!r}",
            hint="no finite worker count makes the mean wait exactly 0",
        )
    if not 0 < beta < 1:
        raise ConfigError(f"beta (a worker's resource share) must be in (0, 1), got {beta!r}")


def workers_for(
    offloaded_rate: float,
    per_core_rate: float,
    rho: float,
    cpu_target: float,
    *,
    sizing: str = EQ3,
    chunk_events: int = 16_384,
    chunk_wait_s: float = 0.1,
    beta: float = 0.5,
    cores_per_worker: int = 1,
    max_workers: int = 10_000,
) -> int:
    """Workers (of `cores_per_worker` cores) for `offloaded_rate` events/s, at most `max_workers`; 0 for
    no rate.

    `cpu_target` is a fraction (0.7); a worker serves rho x per_core_rate events/s at 100 %. The cap
    also bounds the M/M/k search (O(k^2) Erlang B steps), so a rate far beyond it costs no more than it.
    """
    if offloaded_rate <= 0:
        return 0
    eq3 = -(-lambda_cores(offloaded_rate, per_core_rate, rho, cpu_target * 100) // cores_per_worker)
    if sizing == EQ3 or eq3 >= max_workers:
        return min(eq3, max_workers)
    arrivals = offloaded_rate / chunk_events  # chunks/s
    service = rho * per_core_rate * cores_per_worker / chunk_events  # chunks/s one worker finishes
    if arrivals / service >= max_workers:
        return max_workers  # not even the stability bound fits under the cap
    try:
        if sizing == ES_STREAM:
            return es_stream_servers(arrivals, service, beta, max_servers=max_workers)
        return max(eq3, min_servers(arrivals, service, max_wait_s=chunk_wait_s, max_servers=max_workers))
    except ConfigError:  # the model wants more than the cap: the cap it is
        return max_workers
