"""The agent's counters: one thread-safe bag of named integers, read whole by the Stats RPC.

Why named constants: the policy loop, the drills and the tests all read these by name, so a typo
must be an AttributeError here rather than a silent zero there.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

WORKERS_STARTED = "workers_started"
COLD_STARTS = "cold_starts"
"""Workers whose session began in a new execution environment (the handler's cold_start flag)."""
WARM_STARTS = "warm_starts"
"""Workers whose session began in an environment that had run before (a warm pool's, or a session's)."""
WORKERS_PREWARMED = "workers_prewarmed"
PROGRAM_WARM_UPS = "program_warm_ups"
"""Warm-ups sent when the VM named a keyed program its workers will run, that were answered: each
compiled it and ran it once over made-up rows (router/agent/warm_pool.py, ADR 0045)."""
KEEP_WARM_PINGS = "keep_warm_pings"
"""Warm-ups the keep-warm rounds sent that were answered (router/agent/warm_pool.py)."""
KEEP_WARM_COLD = "keep_warm_cold"
"""Keep-warm warm-ups that found no warm environment: one was reclaimed, or the pool was still smaller
than the fleet. Paid while idle, off the burst's path; a count that grows with every round says the
interval is longer than the platform keeps an idle environment."""
WORKERS_CONNECTED = "workers_connected_total"
CHUNKS_SUBMITTED = "chunks_submitted"
CHUNKS_DISPATCHED = "chunks_dispatched"
CHUNKS_REDISPATCHED = "chunks_redispatched"
CHUNKS_RUN_LOCALLY = "chunks_run_locally"
CHUNKS_DONE = "chunks_done"
CHUNKS_FAILED = "chunks_failed"
CACHE_HITS = "cache_hits"
THROTTLES = "throttles"
INVOKE_FAILURES = "invoke_failures"
REJECTED_WORKERS = "rejected_workers"
REJECTED_CALLERS = "rejected_callers"
WORKER_FAILURES = "worker_failures"
CHUNK_TIMEOUTS = "chunk_timeouts"
LATE_RESULTS = "late_results"
CORRUPT_RESULTS = "corrupt_results"
REJECTED_RESULTS = "rejected_results"
"""Results that arrived whole but are not what the chunk's program makes (wrong schema, a count of
records read that is not the chunk's, key groups the seal did not name): redone, never cached."""
RECORDS_OFFLOADED = "records_offloaded"
"""Rows in of the chunks whose result came from a worker (once per chunk)."""
RECORDS_RUN_LOCALLY = "records_run_locally"
"""Rows in of the chunks the agent ran itself (no worker, too many tries, or a worker's Failure)."""
WORKER_CPU_US = "worker_cpu_us"
"""Workers' CPU time (`Result.cpu_seconds`) on the chunks whose result came from a worker, in microseconds,
once per chunk like RECORDS_OFFLOADED: the worker side of the offloaded CPU share (bench.offloaded_share).
An integer so it travels through the Stats RPC and sums over agent restarts like every other counter."""
INJECTED_KILL_WORKER = "injected_kill_worker"
INJECTED_THROTTLE = "injected_throttle"
INJECTED_SLOW_WORKER = "injected_slow_worker"

ALL = (
    WORKERS_PREWARMED,
    PROGRAM_WARM_UPS,
    WORKERS_STARTED,
    COLD_STARTS,
    WARM_STARTS,
    KEEP_WARM_PINGS,
    KEEP_WARM_COLD,
    WORKERS_CONNECTED,
    CHUNKS_SUBMITTED,
    CHUNKS_DISPATCHED,
    CHUNKS_REDISPATCHED,
    CHUNKS_RUN_LOCALLY,
    CHUNKS_DONE,
    CHUNKS_FAILED,
    CACHE_HITS,
    THROTTLES,
    INVOKE_FAILURES,
    REJECTED_WORKERS,
    REJECTED_CALLERS,
    WORKER_FAILURES,
    CHUNK_TIMEOUTS,
    LATE_RESULTS,
    CORRUPT_RESULTS,
    REJECTED_RESULTS,
    RECORDS_OFFLOADED,
    RECORDS_RUN_LOCALLY,
    WORKER_CPU_US,
    INJECTED_KILL_WORKER,
    INJECTED_THROTTLE,
    INJECTED_SLOW_WORKER,
)


#: Per logical node, the records workers ran through it (once per chunk, as RECORDS_OFFLOADED).
OPERATOR_OFFLOADED = "operator_offloaded:"


def operator_offloaded(node_id: str) -> str:
    """The counter of the records workers ran through node `node_id`."""
    return OPERATOR_OFFLOADED + node_id


def operators_offloaded(counters: Mapping[str, int]) -> dict[str, int]:
    """{node id: records} out of a snapshot of the counters (or their sum over agent restarts)."""
    return _by_node(counters, OPERATOR_OFFLOADED)


#: Per keyed operator, what its state handoffs moved (ADR 0025): keys the workers' side took from the
#: VM's state, keys it handed back, and the state's bytes both ways (Arrow IPC, as sent).
HANDOFF_FIGURES = ("keys_fetched", "keys_returned", "state_bytes_moved")


def handoff_counter(figure: str, node_id: str) -> str:
    if figure not in HANDOFF_FIGURES:
        raise KeyError(f"unknown handoff figure {figure!r}")
    return f"{figure}:{node_id}"


def handoffs(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """{node id: {figure: n}} for every keyed operator with a handoff, out of a snapshot of the counters."""
    out: dict[str, dict[str, int]] = {}
    for figure in HANDOFF_FIGURES:
        for node, n in _by_node(counters, figure + ":").items():
            out.setdefault(node, dict.fromkeys(HANDOFF_FIGURES, 0))[figure] = n
    return out


def _by_node(counters: Mapping[str, int], prefix: str) -> dict[str, int]:
    return {k.removeprefix(prefix): v for k, v in counters.items() if k.startswith(prefix)}


_PER_NODE = (OPERATOR_OFFLOADED, *(f + ":" for f in HANDOFF_FIGURES))


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(ALL, 0)

    def add(self, name: str, n: int = 1) -> None:
        if name not in self._values and not name.startswith(_PER_NODE):
            raise KeyError(f"unknown counter {name!r}")
        with self._lock:
            self._values[name] = self._values.get(name, 0) + n

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)
