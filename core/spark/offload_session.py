"""What a run needs to offload: the pinned plan, the VM agent process, the routed streams, faults.

Why one object: the pieces live in different places (the plan and the routing log on disk beside
the checkpoint, the agent in its own process, the readers inside Spark's Python workers), and the
runner must start them in order, hand the same addresses and secrets to every reader, make the
injected runner-side faults happen, and collect every component's counters into the summary.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.direct_sink import OFFLOADED_DIR
from core.errors import ConfigError
from core.fault_spec import (
    AGENT_KILL,
    AGENT_KINDS,
    AGENT_RESTART,
    DRIVER_KILL,
    QUERY_RESTART,
    TASK_FAILURE,
    FaultSpec,
    Triggers,
    of_kind,
)
from core.file_schema import FileSchema
from core.net import is_loopback, routable_address
from core.nexmark.params import QueryParams
from core.offload_chains import KEYED, PARTIAL, OffloadChain
from core.offload_plan import DEFAULT_OFFLOAD_COST, OffloadPlan
from core.plan import LogicalPlan
from merge.keyed_batch import ROUND_KEYS, Fetch
from router.agent.warm_pool import DEFAULT_KEEP_WARM_S, WarmPoolConfig
from router.dispatcher import DEFAULT_CHUNK_TIMEOUT_S, DEFAULT_LOCAL_FALLBACK_S

TARGETS = ("embedded", "localstack", "aws")  # localstack and aws: a stack deployed by `sponge deploy`
TLS, MTLS = "tls", "mtls"
TRANSPORTS = ("plaintext", TLS, MTLS)
OFFLOAD_DIR = "_offload"
FAULT_DIR = "faults"
WARM_POOL_WAIT_S = 30.0  # a warm pool that takes longer (a throttled deployment) warms during the run


@dataclass(frozen=True)
class OffloadConfig:
    """The pinned offload plan of a run (`--offload-share`, `--workers`), where workers run, and faults."""

    share: float
    workers: int = 2
    target: str = "embedded"
    faults: tuple[FaultSpec, ...] = ()
    chunk_rows: int = 16_384
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S
    local_fallback_s: float = DEFAULT_LOCAL_FALLBACK_S  # then a chunk no worker took runs in the agent
    function_timeout_s: float = 60.0  # the embedded fleet's; a deployed function's own timeout wins
    deployment: Any = (
        None  # core.deployment.Deployment of a localstack/aws target, read once from its stack file
    )
    stack_dir: Path | None = None  # where `sponge deploy` wrote the stack files (default .sponge/)
    worker_cpus: frozenset[int] | None = None  # pin the agent and workers (drills: the "Lambda" cores)
    prewarm: int = 0  # warm pool (section 4.4): environments warmed at start-up
    # Keep-warm (section 4.4): while the agent is idle, warm `workers` environments every this many
    # seconds of idleness, before the platform reclaims them (ADR 0039); None or 0: never.
    keep_warm_s: float | None = DEFAULT_KEEP_WARM_S
    idle_timeout_s: float = 10.0  # keep an idle worker's session this long (a warm pool keeps it longer)
    offload_cost: float = DEFAULT_OFFLOAD_COST  # a live policy's view of an offloaded record's VM cost
    # How the agent invokes a deployed function: "Event" (Lambda queues what it cannot run yet) or
    # "RequestResponse" (held for the session; a reached concurrency limit is an immediate 429).
    invocation_type: str = "Event"
    fetch: Fetch | str = Fetch.LAZY  # how a keyed stage's state goes to the workers (ADR 0025)
    subscales: int = 1  # seals a keyed stage's task runs at once in a batch (ADR 0033)
    round_keys: int = ROUND_KEYS  # with --handoff progressive, keys a batch moves beyond those it reads
    # Where the agent listens, and the host its callers and workers dial. None: the embedded target
    # listens on and advertises loopback; a deployed one listens everywhere and advertises this
    # machine's routable address, which a worker in the Lambda's network can reach.
    bind: str | None = None
    advertise: str | None = None
    # The data plane's transport: "tls" (a per-run CA and server certificate, plaintext refused),
    # "mtls" (callers and workers also present certificates of the run's CA) or "plaintext"; None
    # picks TLS unless the advertised address is loopback.
    transport: str | None = None
    # A directory of the user's own certificates (core/wire/run_pki.py `own_server_pki`) instead of a
    # CA made per run; checked when the configuration is made, read again when the agent starts.
    tls_dir: Path | str | None = None
    # The embedded fleet's workers in a network namespace of their own (`ip netns add NAME`): another
    # machine as far as the network goes; they reach the agent at `advertise` only.
    worker_netns: str | None = None

    def __post_init__(self) -> None:
        if self.fetch not in {f.value for f in Fetch}:
            raise ConfigError(
                f"unknown --handoff {self.fetch!r}", hint=f"use {' or '.join(f.value for f in Fetch)}"
            )
        object.__setattr__(self, "fetch", Fetch(self.fetch))
        if self.bind is None:
            object.__setattr__(self, "bind", "127.0.0.1" if self.target == "embedded" else "0.0.0.0")
        if self.advertise is None:
            wildcard = self.bind in ("0.0.0.0", "::")
            object.__setattr__(self, "advertise", routable_address() if wildcard else self.bind)
        if self.transport is None:
            object.__setattr__(self, "transport", "plaintext" if is_loopback(self.advertise) else TLS)
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"unknown transport {self.transport!r}", hint=f"use --transport {' or '.join(TRANSPORTS)}"
            )
        if self.tls_dir is not None:
            object.__setattr__(self, "tls_dir", Path(self.tls_dir))
            if self.transport not in (TLS, MTLS):
                raise ConfigError(
                    f"tls_dir {self.tls_dir} needs TLS, but the transport is {self.transport}",
                    hint="drop tls_dir, or use --transport tls or mtls",
                )
            self.own_tls()  # checked at once: a bad certificate stops the run before Spark starts
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers!r}")
        for flag, value in (("--subscales", self.subscales), ("--round-keys", self.round_keys)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value!r}")
        if self.target not in TARGETS:
            raise ConfigError(f"unknown target {self.target!r}", hint=f"use --target {' or '.join(TARGETS)}")
        if self.target != "embedded" and self.deployment is None:
            from core.deployment import load_deployment

            object.__setattr__(self, "deployment", load_deployment(self.target, self.stack_dir))
        self.plan()  # validates the share
        from router.agent_process import check_invocation_type

        check_invocation_type(self.invocation_type)
        if self.target == "embedded" and self.invocation_type != "Event":
            raise ConfigError(
                f"invocation type {self.invocation_type} applies to a deployed function only",
                hint="use --target localstack or aws, after sponge deploy",
            )
        if self.worker_netns is not None and self.target != "embedded":
            raise ConfigError(
                "--worker-netns places the embedded fleet's workers", hint="drop it with a deployed --target"
            )
        if self.chunk_rows <= 0:
            raise ConfigError(f"chunk rows must be positive, got {self.chunk_rows}")
        WarmPoolConfig(self.prewarm, self.workers, self.keep_warm_s)  # a bad --keep-warm, before Spark starts

    def plan(self) -> OffloadPlan:
        return OffloadPlan.of_share(1, self.share, self.workers)

    def own_tls(self) -> Any:
        """The user's own certificates (a core.wire.run_pki.ServerPki), or None without tls_dir."""
        if self.tls_dir is None:
            return None
        from core.wire.run_pki import own_server_pki

        assert isinstance(self.tls_dir, Path) and self.advertise is not None
        return own_server_pki(self.tls_dir, self.advertise, mutual=self.transport == MTLS)


class OffloadSession:
    """`query` names a built-in query, whose programs the workers build from its name and `params`; a
    user's job passes its `plan` (and its sources' `schemas`), which travels to them as data."""

    def __init__(
        self,
        config: OffloadConfig,
        output: Path,
        query: str,
        params: QueryParams,
        plan: LogicalPlan | None = None,
        schemas: Mapping[str, FileSchema] | None = None,
    ) -> None:
        self.config = config
        self.out = output
        self.dir = output / OFFLOAD_DIR
        self.fault_dir = self.dir / FAULT_DIR
        self.query = query
        self.params = params
        self.own_plan = plan
        self.schemas = dict(schemas or {})
        self.agent: Any = None
        self._secret_dir: Path | None = None
        self._timers: list[threading.Timer] = []
        self.faults_done: dict[str, int] = {}
        self._version = config.plan().version

    # ---- life cycle ----

    def start(self) -> None:
        """Start the agent; with a warm pool, return once it is warm (or after WARM_POOL_WAIT_S)."""
        from core.wire.run_pki import make_server_pki
        from router.agent_process import AgentProcess, AgentProcessConfig, write_secret
        from router.routing_log import PLAN_FILE, read_current_plan, write_current_plan

        plan = self.config.plan()
        if (self.dir / PLAN_FILE).is_file():  # a resumed run: its plans' versions go on counting up
            self._version = read_current_plan(self.dir).version + 1
            plan = replace(plan, version=self._version)
        write_current_plan(self.dir, plan)
        # Beside the run, not in its output: readable by this user only, and gone when the run ends.
        self._secret_dir = Path(tempfile.mkdtemp(prefix="sponge-secret-"))
        self.secret_file = write_secret(self._secret_dir / "secret")
        tls_dir = None
        if self.config.transport in (TLS, MTLS):  # beside the secret: every caller reading it uses it
            names = {self.config.advertise, self.config.bind, "127.0.0.1", "localhost"} - {"0.0.0.0", "::"}
            pki = self.config.own_tls() or make_server_pki(names, mutual=self.config.transport == MTLS)
            tls_dir = pki.write(self._secret_dir)
        self.agent = AgentProcess(
            AgentProcessConfig(
                secret_file=self.secret_file,
                max_workers=self.config.workers,
                faults=tuple(f for f in self.config.faults if f.kind in AGENT_KINDS),
                chunk_timeout_s=self.config.chunk_timeout_s,
                local_fallback_s=self.config.local_fallback_s,
                function_timeout_s=self._function_timeout_s(),
                log_path=self.dir / "workers.log",
                function=self._function(),
                cpus=self.config.worker_cpus,
                prewarm=self.config.prewarm,
                keep_warm_s=self.config.keep_warm_s,
                idle_timeout_s=self.config.idle_timeout_s,
                handoff_dir=self.dir / "handoff",
                sink_dir=self.out / OFFLOADED_DIR,
                host=self.config.bind,
                advertise=self.config.advertise,
                tls_dir=tls_dir,
                worker_netns=self.config.worker_netns,
            )
        )
        self.agent.start()
        if self.config.prewarm:
            self.agent.wait_warm(self.config.prewarm, WARM_POOL_WAIT_S)

    def _agent_faults(self) -> dict[str, Callable[[], None]]:
        """The runner's faults on the agent, by kind: what each does."""
        return {AGENT_RESTART: self._restart_agent, AGENT_KILL: self._kill_agent}

    def schedule_faults(self, started: float) -> None:
        """Arm the agent faults of the fault specs that fire `at` seconds after `started`."""
        for kind, act in self._agent_faults().items():
            for t in Triggers.of(self.config.faults, kind).at:
                self._in(max(0.0, started + t - time.time()), act)

    def watching_epochs(self, progress: Callable[[dict], None] | None) -> Callable[[dict], None]:
        """`progress`, after each `after-epoch` agent fault whose epoch committed has fired once."""
        pending = [
            (epoch, act)
            for kind, act in self._agent_faults().items()
            for epoch in Triggers.of(self.config.faults, kind).after_epochs
        ]
        pending.sort(key=lambda p: p[0])

        def watch(epoch: dict) -> None:
            while pending and epoch["batchId"] >= pending[0][0]:
                self._in(0.0, pending.pop(0)[1])  # on a thread: the run's loop goes on meanwhile
            if progress is not None:
                progress(epoch)

        return watch

    def _in(self, delay_s: float, act: Callable[[], None]) -> None:
        timer = threading.Timer(delay_s, act)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def _function(self) -> Any:
        """The deployed function the agent invokes through boto3, or None for the embedded fleet."""
        from router.agent_process import LambdaFunction

        d = self.config.deployment
        if d is None:
            return None
        env = tuple(d.agent_env().items())
        return LambdaFunction(
            d.function_name, d.region, d.qualifier, d.endpoint_url, env, self.config.invocation_type
        )

    def _function_timeout_s(self) -> float:
        """The deployed function's own timeout where there is one: a RequestResponse invoke lasts the
        worker's whole session, so the invoker's read timeout must go above the function's, not 60 s."""
        d = self.config.deployment
        return float(d.function_timeout_s) if d is not None else self.config.function_timeout_s

    def publish(self, share: float, workers: int) -> OffloadPlan:
        """Make a new plan current (the policy loop): it routes the offsets no reader has planned yet."""
        from router.routing_log import write_current_plan

        self._version += 1
        plan = OffloadPlan.of_share(self._version, share, min(workers, self.config.workers))
        write_current_plan(self.dir, plan)
        return plan

    def release_workers(self, keep: int, reason: str) -> int:
        """Drain the agent's idle workers beyond `keep` connected: their load is on bought VMs now."""
        return self.agent.release(keep, reason) if self.agent is not None else 0

    def _restart_agent(self) -> None:
        self._count(AGENT_RESTART)  # the fault is the kill; the restart is the recovery
        self.agent.restart()

    def _kill_agent(self) -> None:
        """SIGKILL the agent and leave it dead: its launcher must notice and start it again."""
        pid = self.agent.pid
        if pid is not None:
            self._count(AGENT_KILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _count(self, kind: str) -> None:
        self.faults_done[kind] = self.faults_done.get(kind, 0) + 1

    def query_restarts(self) -> Triggers:
        """When the runner stops the query and resumes it from its checkpoint."""
        return Triggers.of(self.config.faults, QUERY_RESTART)

    def query_restarted(self) -> None:
        self._count(QUERY_RESTART)

    def driver_kills(self) -> Triggers:
        """When the runner SIGKILLs its own process (`sponge run --resume` continues the run)."""
        return Triggers.of(self.config.faults, DRIVER_KILL)

    def stop(self) -> dict[str, Any]:
        """Stop the agent; the summary's offload fields."""
        from router.stats import handoffs, operators_offloaded

        for timer in self._timers:
            timer.cancel()  # a restart not yet due never happens; one under way finishes first
            if timer.is_alive():
                timer.join()
        totals = self.agent.stop() if self.agent is not None else {}
        if self._secret_dir is not None:
            shutil.rmtree(self._secret_dir, ignore_errors=True)
        injected = dict(self.faults_done)
        for kind in AGENT_KINDS:
            n = totals.get("injected_" + kind.replace("-", "_"), 0)
            if n:
                injected[kind] = n
        failures = len(list(self.fault_dir.glob("task-failure-*"))) if self.fault_dir.exists() else 0
        if failures:
            injected[TASK_FAILURE] = failures
        return {
            "offload_share": self.config.share,
            "workers": self.config.workers,
            "target": self.config.target,
            "transport": self.config.transport,
            "agent_address": self.agent.address if self.agent is not None else None,
            "records_offloaded": totals.get("records_offloaded", 0),
            "operators_offloaded": operators_offloaded(totals),
            "handoffs": handoffs(totals),
            "handoff": str(self.config.fetch),
            "subscales": self.config.subscales,
            "round_keys": self.config.round_keys,
            "worker_cpu_s": round(totals.get("worker_cpu_us", 0) / 1e6, 6),
            "records_run_locally_by_agent": totals.get("records_run_locally", 0),
            "workers_started": totals.get("workers_started", 0),
            "workers_connected": totals.get("workers_connected_total", 0),
            "cold_starts": totals.get("cold_starts", 0),
            "warm_starts": totals.get("warm_starts", 0),
            "chunks_dispatched": totals.get("chunks_dispatched", 0),
            "chunks_redispatched": totals.get("chunks_redispatched", 0),
            "chunks_run_locally": totals.get("chunks_run_locally", 0),
            "chunk_timeouts": totals.get("chunk_timeouts", 0),
            "results_rejected": totals.get("rejected_results", 0),
            "worker_failures": totals.get("worker_failures", 0),
            "throttles": totals.get("throttles", 0),
            "cache_hits": totals.get("cache_hits", 0),
            "workers_prewarmed": totals.get("workers_prewarmed", 0),
            "keep_warm_s": self.config.keep_warm_s or 0,
            "program_warm_ups": totals.get("program_warm_ups", 0),
            "keep_warm_pings": totals.get("keep_warm_pings", 0),
            "keep_warm_cold": totals.get("keep_warm_cold", 0),
            "agent_restarts": self.agent.restarts if self.agent is not None else 0,
            "agent_crashes_recovered": self.agent.crashes if self.agent is not None else 0,
            "injected_faults": injected,
        }

    # ---- the routed streams ----

    def _common(self) -> dict[str, str]:
        fail = of_kind(self.config.faults, TASK_FAILURE)
        return {
            "offload_dir": str(self.dir),
            "fail_share": repr(max((f["share"] for f in fail), default=0.0)),
            "fault_dir": str(self.fault_dir),
        }

    def local_routes(self, chains: tuple[OffloadChain, ...]) -> dict[str, dict[str, str]]:
        """Options of the VM share's read, by entity (a keyed stage's input routes by its key)."""
        return {c.entity: {"route": "local", "keys": ",".join(c.keys), **self._common()} for c in chains}

    def spec(self, node_ids: tuple[str, ...]) -> Any:
        """The program of `node_ids` the workers run (a lambda_worker.program.ProgramSpec)."""
        from lambda_worker.program import ProgramSpec

        if self.own_plan is not None:
            return ProgramSpec.of_plan(self.own_plan, node_ids)
        return ProgramSpec(self.query, node_ids, self.params.window_size_s, self.params.window_slide_s)

    def plan(self) -> LogicalPlan:
        if self.own_plan is not None:
            return self.own_plan
        from core.nexmark.queries import get_query

        return get_query(self.query).plan(self.params)

    def seal_service(self, op_id: str) -> Any:
        """What a keyed stage's VM processor calls to run a group's batch on a worker (ADR 0024), its
        program warmed at the agent and its idle workers."""
        from router.seal_service import AgentSealService

        spec = self.spec((op_id,))
        service = AgentSealService(
            self.agent.address,
            str(self.secret_file),
            spec.dumps(),
            Fetch(self.config.fetch),
            plans=str(self.dir),
            subscales=self.config.subscales,
            round_keys=self.config.round_keys,
        )
        service.warm()  # before any switch: the first seals cost what later ones do (ADR 0045)
        return service

    def rank_service(self, op_id: str) -> Any:
        """What a fused top-k's VM processor calls to have workers rank a closed window (ADR 0029)."""
        from merge.sliding_top_k import fused_top_ks
        from router.rank_service import AgentRankService

        _, agg, _ = fused_top_ks(self.plan())[op_id]
        spec = self.spec((op_id,))
        return AgentRankService(
            self.agent.address, str(self.secret_file), spec.dumps(), agg.keys, str(self.dir)
        )

    def offloaded(self, spark: Any, run_config: Any, pace_origin: float) -> Callable[[OffloadChain], Any]:
        """The factory of the workers' result streams, one per chain (see core/spark/lower.py)."""
        from core.spark.streams import keep_alive, source_stream

        def make(chain: OffloadChain) -> Any:
            spec = self.spec(chain.node_ids)
            time_column = "window_start" if chain.partial_states else chain.event_time
            if chain.kind == KEYED:
                from router.keyed_route import TIME

                time_column = TIME
            options: Mapping[str, str] = {
                "route": "offload",
                "program": spec.dumps(),
                "agent": self.agent.address,
                "secret_file": str(self.secret_file),
                "event_time": time_column or "",
                "chunk_rows": str(self.config.chunk_rows),
                "parallelism": str(self.config.workers),
                "direct_sink": "1" if chain.to_sink else "",
                "keys": ",".join(chain.keys),
                **self._common(),
            }
            own = self.schemas.get(chain.entity)
            df = source_stream(spark, run_config, chain.entity, own, pace_origin, options)
            # A generated stream's epochs cover the VM's offsets exactly (RoutingLog.agreed_end): the
            # VM's watermark holds the workers' rows back too, and a stream without one of its own
            # may skip an epoch's task (docs/adr/0042). A file or Kinesis source's streams plan their
            # own ends.
            read = run_config.input is not None or run_config.kinesis is not None
            watermark = time_column if read else None
            df = keep_alive(df, watermark, heartbeats=True)
            return df.drop("window_end") if chain.kind == PARTIAL else df

        return make
