"""The rigs of bench.offload: the VM path, the worker path and the dispatch measurement, each one run.

Why apart from the command line (bench/offload.py, whose docstring gives the method): these are the
measuring instruments, each returning the figures of one run (`VmRun`, `WorkerRun`, a dispatch
dict); the command line decides how many runs, in which order, and what is reported. Both paths see
the same NEXMark events (PARAMS, EVENT_RATE) and compare bid rows (BID_SHARE of the events).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import secrets
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa

from core.nexmark.generator import PROPORTION_DENOMINATOR, GeneratorConfig, event_ids, generate
from core.nexmark.params import QueryParams
from core.nexmark.schedule import RateSchedule
from core.results import diff_results
from core.run_output import Existing
from core.wire.arrow_ipc import decode, encode
from lambda_worker.program import ProgramSpec
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.client import AgentClient
from router.dispatcher import DispatchConfig
from router.fleet import FleetConfig
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig

PARAMS = QueryParams(window_size_s=10, window_slide_s=2)
PROGRAMS: dict[str, ProgramSpec] = {
    "q1": ProgramSpec("q1", ("map1",), PARAMS.window_size_s, PARAMS.window_slide_s),
    "q5": ProgramSpec(
        "q5", ("map1", "key_by2", "window_aggregate3"), PARAMS.window_size_s, PARAMS.window_slide_s
    ),
}
# Bids among the event indices [0, 50): every full block of 50 events holds the same share.
BID_SHARE = len(event_ids("bid", 0, PROPORTION_DENOMINATOR)) / PROPORTION_DENOMINATOR
EVENT_RATE = 10_000.0  # events/s of event time (docs/queries.md default), on both paths
MIN_VM_BATCHES = 5  # the first batch is not measured: keep at least 4 measured ones


# ---- cores --------------------------------------------------------------------------------------


def pin_process(cpus: set[int]) -> None:
    """Pin every thread of this process to `cpus`.

    Why every thread: Linux affinity is per thread and inherited at thread or process creation, so
    pinning only the calling thread would leave threads some import already started on every core;
    after this, the Spark JVM, its Python workers and the agent's gRPC threads all start on `cpus`.
    """
    for thread in psutil.Process().threads():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(thread.id, cpus)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), in seconds; raises psutil.NoSuchProcess."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def live_cpu_seconds(pids: Sequence[int]) -> float:
    """`cpu_seconds` summed over those of `pids` still running (one may exit between listing and reading)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            total += cpu_seconds(pid)
    return total


# ---- VM path ------------------------------------------------------------------------------------


@dataclass
class VmRun:
    events: int
    ms: int
    batches: int
    wall_s: float
    events_per_s: float

    @property
    def bids_per_s(self) -> float:
        return self.events_per_s * BID_SHARE


def vm_batch_events(events: int, batch_events: int) -> int:
    """Events per micro-batch: --batch-events, lowered for small runs so that >= 4 batches are measured."""
    return max(1, min(batch_events, events // MIN_VM_BATCHES))


def run_vm(spark: Any, query: str, events: int, batch_events: int, seed: int, work: Path) -> VmRun:
    """One steady-state run of the compiled plan, through bench.throughput's own variant (a)."""
    from bench.throughput_variants import run_variant
    from core.spark.runner import RunConfig

    config = RunConfig(
        query=query,
        generator=GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.constant(EVENT_RATE)),
        output=work / f"vm_{query}",
        existing=Existing.REPLACE,  # a run of its own from an earlier call
        params=PARAMS,
        max_events_per_batch=vm_batch_events(events, batch_events),
        spark=spark_config(),
        plain=False,
    )
    m = run_variant(spark, "a", config)
    return VmRun(m.events, m.ms, m.batches, m.wall_s, m.events_per_s)


def spark_config() -> Any:
    from core.spark.session import SparkConfig

    return SparkConfig(master="local[1]", shuffle_partitions=1, app_name="sponge-bench-offload")


# ---- worker path --------------------------------------------------------------------------------


def bid_chunks(seed: int, events: int, chunk_rows: int) -> list[pa.Table]:
    """The bids among events [0, events) at EVENT_RATE, cut into tables of `chunk_rows` rows."""
    gen = GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.constant(EVENT_RATE))
    bids = pa.Table.from_batches([generate(gen, "bid", 0, events)])
    return [bids.slice(i, chunk_rows) for i in range(0, bids.num_rows, chunk_rows)]


@dataclass
class WorkerRun:
    rows: int
    chunks: int
    wall_s: float
    worker_cpu_s: float
    agent_cpu_s: float
    bids_per_s: float
    redispatches: int

    @property
    def worker_busy(self) -> float:
        return self.worker_cpu_s / self.wall_s

    @property
    def agent_busy(self) -> float:
        return self.agent_cpu_s / self.wall_s

    @property
    def bids_per_worker_cpu_s(self) -> float:
        return self.rows / self.worker_cpu_s if self.worker_cpu_s > 0 else float("nan")


class WorkerRig:
    """An agent with a one-worker embedded fleet pinned to `worker_cpu`, and a client on it.

    Why one long-lived rig: the worker process stays warm across rounds (as Lambda keeps a warm
    environment), so the passes measure steady throughput, not starts; starts are measured apart.
    The local fallback is set far beyond any queueing delay here: a chunk run in the agent would be
    VM-core work counted as worker work.
    """

    def __init__(self, worker_cpu: int, log_path: Path) -> None:
        self.secret = secrets.token_hex(16).encode()
        self.fleet = EmbeddedFleet(
            EmbeddedFleetConfig(
                concurrency_limit=1,
                cpus=(worker_cpu,),
                timeout_s=900.0,  # Lambda's maximum: no session ends on its deadline mid-pass
                log_path=str(log_path),
            )
        )
        self.agent = AgentServer(
            AgentConfig(
                secret=self.secret,
                dispatch=DispatchConfig(chunk_timeout_s=120.0, local_fallback_s=600.0),
                fleet=FleetConfig(max_workers=1, idle_timeout_s=60.0),
            ),
            self.fleet,
        )
        self.client: AgentClient | None = None
        self._epoch = 0

    def __enter__(self) -> WorkerRig:
        self.agent.start()
        self.client = AgentClient(self.agent.address, self.secret)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self.agent.stop()

    def prewarm(self, specs: Sequence[ProgramSpec]) -> None:
        """Start the worker process and compile every program in it before anything is timed."""
        for spec in specs:
            if self.fleet.prewarm(1, [spec.to_json()]) != 1:
                raise RuntimeError("the embedded worker did not warm up (see the worker log)")

    def next_epoch(self) -> int:
        """A fresh epoch per pass: the agent caches results by (epoch, partition, chunk_seq, program)."""
        self._epoch += 1
        return self._epoch

    def worker_pids(self) -> list[int]:
        return [e.pid for e in self.fleet.environments() if e.alive]

    def offload_all(self, spec: ProgramSpec, chunks: Sequence[pa.Table], in_flight: int) -> list[Any]:
        assert self.client is not None
        client, epoch = self.client, self.next_epoch()
        with ThreadPoolExecutor(in_flight, thread_name_prefix="bench-offload") as pool:
            return list(pool.map(lambda ic: client.offload(epoch, 0, ic[0], spec, ic[1]), enumerate(chunks)))

    def run(self, spec: ProgramSpec, chunks: Sequence[pa.Table], in_flight: int) -> WorkerRun:
        """One timed pass of all `chunks`, after a few untimed chunks that get the worker connected."""
        self.offload_all(spec, chunks[:in_flight], in_flight)
        pids = self.worker_pids()
        w0 = sum(cpu_seconds(p) for p in pids)
        c0 = time.process_time()
        t0 = time.perf_counter()
        results = self.offload_all(spec, chunks, in_flight)
        wall = time.perf_counter() - t0
        agent_cpu = time.process_time() - c0
        worker_cpu = live_cpu_seconds(pids) - w0
        local = sum(r.ran_locally for r in results)
        if local or set(self.worker_pids()) != set(pids):
            raise RuntimeError(
                f"{spec.query}: {local} chunk(s) ran in the agent or the worker process changed mid-pass; "
                "the pass did not measure one worker"
            )
        rows = sum(r.rows_in for r in results)
        return WorkerRun(
            rows,
            len(results),
            wall,
            worker_cpu,
            agent_cpu,
            rows / wall,
            sum(r.redispatches for r in results),
        )

    def check(self, spec: ProgramSpec, chunks: Sequence[pa.Table]) -> str:
        """'checked' when the worker's output for two sample chunks equals the program run here."""
        samples = [chunks[0], chunks[len(chunks) // 2]]
        got = self.offload_all(spec, samples, 1)
        program = spec.compile()
        for i, (chunk, result) in enumerate(zip(samples, got, strict=True)):
            if result.ran_locally:
                return f"UNCHECKED: sample {i} ran in the agent, not on the worker"
            expected = pa.Table.from_batches([program.run(chunk)])
            problem = diff_results(result.table, expected)
            if problem is not None:
                return f"MISMATCH (sample {i}, worker vs local): {problem}"
            if result.table.num_rows == 0:
                return f"UNCHECKED: sample {i} produced no rows"
        return "checked"


def program_only(spec: ProgramSpec, chunks: Sequence[pa.Table]) -> float:
    """Bid rows/s of decode + program + encode on this core, no gRPC: the worker path's ceiling."""
    program = spec.compile()
    payloads = [encode(c, "zstd") for c in chunks]
    t0 = time.perf_counter()
    for p in payloads:
        encode(program.run_table(decode(p)), "zstd")
    return sum(c.num_rows for c in chunks) / (time.perf_counter() - t0)


# ---- dispatch round trip and worker starts -------------------------------------------------------


def _measure_in_child(cpus: list[int], rounds: int, log_path: str) -> dict[str, Any]:
    """router.measure.measure in a fresh process on every allowed core, worker logs to `log_path`."""
    os.sched_setaffinity(0, set(cpus))
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)  # the workers inherit stderr: keep their logs and metrics off the bench's console
    from router.measure import measure

    return measure(chunk_mb=1.0, rounds=rounds, workers=1, program="q5", local=False)


def measure_dispatch(cpus: set[int], rounds: int, log_path: Path) -> dict[str, Any]:
    """1 MB Offload round trips and cold/warm worker starts, by router.measure, isolated in a process.

    Why a spawned process: router.measure starts its own agent and fleet; here they would inherit this
    process's pinning (every worker on the VM core) and its gRPC threads.
    """
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_measure_in_child, sorted(cpus), rounds, str(log_path)).result()
