"""Random fault schedules on the real data plane, each judged record by record.

Method. One agent process (router/agent_process.py) with its embedded fleet of worker processes
serves TLS under a CA made for the run; the workers dial it through a fault proxy
(bench/chaos_proxy.py) standing at the address the agent advertises, and so does the caller, a
client like a Spark task's. No Spark. Schedule i of `--seed S` is drawn from seed S+i: a NEXMark
query's chunk program, 4 to 10 chunks of bids (some written by the agent into the sink as files, the
rest returned), 4 callers (2 workers), and one to four faults, each firing once a drawn number of chunks were
answered: worker-kill (SIGKILL a worker process), throttle (the agent's invokes refused as Lambda's
429), timeout (a result held past the chunk timeout), agent-kill (SIGKILL the agent, start it again
on its port), partition (every connection cut, new ones refused for a while), and delay, duplicate
and reorder (standing network faults of the proxy). The checker compares every record of the
answers and sink files with the program run here on each chunk: lost, duplicated and unexpected
records are counted, and a failing schedule's seed is printed with the command that replays it.
The schedules are shared out over `--parallel` such worlds side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from bench.chaos_proxy import FaultProxy
from bench.report_line import finish
from core.chaos_tally import ScheduleOutcome, Tally
from core.direct_sink import chunk_name
from core.fault_spec import FaultSpec
from core.nexmark.generator import GeneratorConfig, generate
from core.results import RecordCheck, check_records
from core.wire.protocol import read_credentials
from core.wire.run_pki import make_server_pki
from lambda_worker.program import ProgramCache, ProgramSpec
from router.agent_process import AgentProcess, AgentProcessConfig, free_port, write_secret
from router.client import AgentClient, OffloadError

METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()
KINDS = ("agent-kill", "delay", "duplicate", "partition", "reorder", "timeout", "worker-kill")
"""Drawn per schedule; throttle is not among them (see `Schedule.draw`)."""
THROTTLE_RUN = 10
PROGRAMS = (
    ProgramSpec("q1", ("map1",)),
    ProgramSpec("q2", ("filter1", "map2")),
    ProgramSpec("q5", ("map1", "key_by2", "window_aggregate3")),
)
CALLERS = 4
WORKERS = 2
CHUNK_TIMEOUT_S = 0.5  # short, so that a held result times out within the schedule
SINK_ENTITY = "chaos"
THROTTLE = FaultSpec.parse("throttle:share=0.5")
STANDING = {"delay": {"delay_s": 0.03}, "duplicate": {"duplicate": 0.3}, "reorder": {"reorder": 0.3}}
"""The proxy's standing faults, from the moment they fire to the schedule's end."""


@dataclass(frozen=True)
class Fault:
    kind: str
    after: int  # fires once this many chunks were answered

    def text(self) -> str:
        return f"{self.kind}@{self.after}"


@dataclass(frozen=True)
class Schedule:
    """Everything a schedule does, drawn from its seed alone."""

    seed: int
    program: ProgramSpec
    chunk_rows: int
    sink: tuple[bool, ...]  # per chunk: the agent writes its output as a sink file
    faults: tuple[Fault, ...]

    @classmethod
    def draw(cls, seed: int) -> Schedule:
        rng = random.Random(seed)
        chunks = rng.randint(4, 10)
        kinds = rng.sample(KINDS, rng.randint(1, 4))
        # The throttle is the agent's (it refuses its own invokes, as Lambda would): switching it means
        # a new agent. It is on for alternate runs of THROTTLE_RUN seeds, so that a series restarts the
        # agent for it once per run, and a seed replayed alone still gets it.
        if (seed // THROTTLE_RUN) % 2:
            kinds.append("throttle")
        return cls(
            seed,
            rng.choice(PROGRAMS),
            rng.choice((300, 800, 2000)),  # one size per schedule, as a Spark task's chunk_rows is
            tuple(rng.random() < 0.3 for _ in range(chunks)),
            tuple(
                sorted(
                    (Fault(k, 0 if k == "throttle" else rng.randint(0, chunks - 1)) for k in kinds),
                    key=lambda f: f.after,
                )
            ),
        )

    @property
    def kinds(self) -> set[str]:
        return {f.kind for f in self.faults}

    def sink_file(self, chunk: int) -> str:
        """Chunk `chunk`'s sink file: its range names the schedule, so no two schedules share a file."""
        start = self.seed * 1000 + chunk
        return chunk_name(SINK_ENTITY, start, start + 1, 0)

    def owns(self, name: str) -> bool:
        parts = name.split("-")
        return len(parts) == 4 and parts[0] == SINK_ENTITY and int(parts[1]) // 1000 == self.seed

    def input(self) -> list[pa.Table]:
        events = int(len(self.sink) * self.chunk_rows * 1.2)
        bids = pa.Table.from_batches(
            [generate(GeneratorConfig(seed=self.seed, events=events), "bid", 0, events)]
        )
        return [bids.slice(i * self.chunk_rows, self.chunk_rows) for i in range(len(self.sink))]


class World:
    """The agent (with its fleet) behind the fault proxy, and the caller's client; one per bench."""

    def __init__(self, work: Path, seed: int) -> None:
        credentials = work / "credentials"
        pki = make_server_pki({"127.0.0.1", "localhost"})
        pki.write(credentials)
        secret_file = write_secret(credentials / "secret")
        self.sink = work / "sink"
        self.sink.mkdir()
        agent_port = free_port()
        self.proxy = FaultProxy(
            f"127.0.0.1:{agent_port}",
            host="127.0.0.1",
            cert_pem=pki.cert_pem,
            key_pem=pki.key_pem,
            ca_pem=pki.ca_pem,
            seed=seed,
        )
        proxy_port = self.proxy.start()
        self.config = AgentProcessConfig(
            secret_file=secret_file,
            max_workers=WORKERS,
            port=agent_port,
            advertise_port=proxy_port,
            tls_dir=credentials,
            sink_dir=self.sink,
            chunk_timeout_s=CHUNK_TIMEOUT_S,
            local_fallback_s=0.5,
            idle_timeout_s=5.0,
            prewarm=WORKERS,  # a new agent starts its workers at once, as a run's does
            log_path=work / "workers.log",
        )
        self.agent = AgentProcess(self.config)
        self.agent.start()
        secret, tls = read_credentials(secret_file)  # as a Spark task reads its run's credentials
        self.client = AgentClient(
            f"127.0.0.1:{proxy_port}", secret, tls=tls, timeout_s=2.0, retry_budget_s=60.0
        )
        self.programs = ProgramCache()
        self.injected: Counter[str] = Counter()  # the faults the bench itself made happen

    def throttling(self, on: bool) -> None:
        """Make the agent refuse a share of its invokes (or not): a new agent, on the same port."""
        faults = (THROTTLE,) if on else ()
        if self.agent.config.faults != faults:
            self.agent.config = dataclasses.replace(self.agent.config, faults=faults)
            self.agent.restart()

    def kill_a_worker(self, rng: random.Random) -> None:
        """SIGKILL one of the agent's worker processes (none may be running: then nothing happens)."""
        pid = self.agent.pid
        workers = psutil.Process(pid).children() if pid is not None else []
        if workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(workers).pid, signal.SIGKILL)
                self.injected["worker_kill"] += 1

    def close(self) -> dict[str, int]:
        self.client.close()
        totals = self.agent.stop()
        self.proxy.stop()
        return totals


def run_schedule(world: World, schedule: Schedule) -> ScheduleOutcome:
    """Offload the schedule's chunks through the proxy while its faults fire; check every record."""
    started = time.monotonic()
    rng = random.Random(schedule.seed)
    world.throttling("throttle" in schedule.kinds)
    world.proxy.reset()
    chunks = schedule.input()
    answered = 0
    done = threading.Condition()

    def offload(i: int) -> pa.Table | None:
        nonlocal answered
        sink_file = schedule.sink_file(i) if schedule.sink[i] else ""
        try:
            result = world.client.offload(
                schedule.seed, i, 0, schedule.program, chunks[i], sink_file=sink_file
            )
            return None if sink_file else result.table
        finally:
            with done:
                answered += 1
                done.notify_all()

    def fire(fault: Fault) -> None:
        with done:
            done.wait_for(lambda: answered >= fault.after)
        if fault.kind == "worker-kill":
            world.kill_a_worker(rng)
        elif fault.kind == "agent-kill":
            world.agent.restart()
            world.injected["agent_kill"] += 1
        elif fault.kind == "timeout":
            world.proxy.hold_next_result(CHUNK_TIMEOUT_S + 0.3)
        elif fault.kind == "partition":
            world.proxy.partition(rng.uniform(0.05, 0.3))
        elif fault.kind in STANDING:
            world.proxy.set_faults(dataclasses.replace(world.proxy.faults, **STANDING[fault.kind]))

    firing = threading.Thread(target=lambda: [fire(f) for f in schedule.faults], daemon=True)
    firing.start()
    error = ""
    with ThreadPoolExecutor(CALLERS, thread_name_prefix="caller") as callers:
        futures = [callers.submit(offload, i) for i in range(len(chunks))]
        answers: list[pa.Table] = []
        for f in futures:
            try:
                table = f.result()
            except OffloadError as e:
                error = error or e.one_line()
                continue
            if table is not None:
                answers.append(table)
    firing.join(timeout=30)
    world.proxy.reset()
    check = _check(world, schedule, chunks, answers)
    faults = tuple(f.text() for f in schedule.faults)
    return ScheduleOutcome.checked(schedule.seed, faults, check, time.monotonic() - started, error)


def _check(world: World, schedule: Schedule, chunks: list[pa.Table], answers: list[pa.Table]) -> RecordCheck:
    """The records answered and written into the sink against the program run here on every chunk."""
    program = world.programs.get(schedule.program)
    expected = pa.concat_tables([program.run_table(c) for c in chunks])
    written = [pq.read_table(p) for p in sorted(world.sink.iterdir()) if schedule.owns(p.name)]
    tables = [t.replace_schema_metadata(None).cast(expected.schema) for t in answers + written]
    actual = pa.concat_tables(tables) if tables else expected.schema.empty_table()
    return check_records(actual, expected)


def run(args: argparse.Namespace) -> tuple[dict[str, Any], Tally]:
    """The schedules, shared out over `--parallel` worlds (each its own agent, fleet and proxy): a
    schedule mostly waits for a timeout, a backoff or a restart, so worlds side by side barely slow
    each other down."""
    tally = Tally(replay="python -m bench.chaos --schedules 1 --seed {seed}")
    work = Path(tempfile.mkdtemp(prefix="sponge-chaos-"))
    seeds = iter(range(args.seed, args.seed + args.schedules))
    lock = threading.Lock()
    bench_started = time.monotonic()
    worlds: list[World] = []

    def serve(k: int) -> None:
        (work / f"world-{k}").mkdir()
        world = World(work / f"world-{k}", args.seed + k)
        with lock:
            worlds.append(world)
        while True:
            with lock:
                seed = next(seeds, None)
            if seed is None:
                return
            outcome = run_schedule(world, Schedule.draw(seed))
            with lock:
                tally.add(outcome)
                _progress(tally, outcome, args.schedules, time.monotonic() - bench_started)

    try:
        with ThreadPoolExecutor(args.parallel, thread_name_prefix="world") as pool:
            for f in [pool.submit(serve, k) for k in range(args.parallel)]:
                f.result()
    finally:
        totals: Counter[str] = Counter()
        injected: Counter[str] = Counter()
        for world in worlds:
            totals.update(world.close())
            injected.update(world.proxy.injected + world.injected)
        shutil.rmtree(work, ignore_errors=True)
    tally.outcomes.sort(key=lambda o: o.seed)
    report = tally.report()
    report.update(
        method=METHOD,
        seed=args.seed,
        parallel=args.parallel,
        elapsed_s=round(time.monotonic() - bench_started, 1),
        injected=dict(sorted(injected.items())),
        agent=_recoveries(totals),
    )
    return report, tally


def _progress(tally: Tally, outcome: ScheduleOutcome, schedules: int, elapsed_s: float) -> None:
    if not outcome.ok:
        print(
            f"schedule {outcome.seed} FAILED ({' '.join(outcome.faults)}): lost {outcome.lost}, "
            f"duplicated {outcome.duplicated}, unexpected {outcome.unexpected} {outcome.error}; "
            f"replay: {tally.replay_command(outcome.seed)}",
            file=sys.stderr,
            flush=True,
        )
    done = len(tally.outcomes)
    if done % 25 == 0 or done == schedules:
        print(f"{done}/{schedules} schedules, {len(tally.failed)} failed, {elapsed_s:.0f} s", file=sys.stderr)


def _recoveries(totals: Counter[str]) -> dict[str, int]:
    """The agent's counters that show the recoveries the faults called for."""
    keys = (
        "chunks_submitted", "chunks_redispatched", "chunks_run_locally", "chunk_timeouts", "late_results",
        "cache_hits", "corrupt_results", "rejected_results", "injected_throttle", "throttles",
    )  # fmt: skip
    return {k: int(totals.get(k, 0)) for k in keys}


def _table(report: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"chaos: {report['schedules']} protocol schedules from seed {report['seed']}")
    for column in ("schedules", "failed", "lost", "duplicated", "unexpected", "median s", "max s"):
        table.add_column(column, justify="right")
    table.add_row(
        *(str(report[k]) for k in ("schedules", "failed", "lost", "duplicated", "unexpected")),
        f"{report['schedule_s_median']:.2f}",
        f"{report['schedule_s_max']:.2f}",
    )
    mix = Counter(report["fault_mix"])
    table.caption = (
        f"fault mix (schedules): {dict(mix)}; injected: {report['injected']}; agent: {report['agent']}"
    )
    return table


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description="Random fault schedules on the real agent, workers and gRPC (no Spark), each checked "
        "record by record; a failing schedule is printed with the command that replays it.",
    )
    ap.add_argument("--schedules", type=int, default=100, help="how many schedules (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="schedule i is drawn from seed+i (default 1)")
    ap.add_argument(
        "--parallel", type=int, default=4, help="worlds (agent, fleet, proxy) side by side (default 4)"
    )
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    if args.parallel < 1:
        ap.error("--parallel must be at least 1")
    args.parallel = min(args.parallel, args.schedules)
    if args.schedules < 1:
        ap.error("--schedules must be at least 1")
    if args.seed < 0:
        ap.error("--seed must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report, tally = run(args)
    status = finish(report, _table(report), METHOD, args.json)
    return 1 if tally.failed else status


if __name__ == "__main__":
    sys.exit(main())
