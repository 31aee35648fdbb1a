"""The VM agent: one long-lived process per VM host between Spark's tasks and the Lambda fleet.

Why a separate process: Spark tasks come and go (and are retried), while workers' connections,
the fleet, the in-flight chunks and the result cache must outlive any one task. The agent

* serves `Offload` to Spark tasks: a chunk of records plus the program to run, answered with the
  partial state; idempotent per (epoch, partition, chunk_seq, program_id) through the result cache;
* serves `Work` to workers, which dial out to it (paper challenge C2); a worker must present the
  token derived from the session secret for its own worker id (constant-time check), else it is
  refused and counted;
* owns the fleet through an `Invoker` (router/invokers/base.py) and the chunk life cycle through the
  `Dispatcher` (router/dispatcher.py): upstream backup, re-dispatch, local fallback.

    python -m router.agent --port 0 --secret-file /path/secret --invoker embedded --max-workers 4 \
        [--inject kill-worker:every=2s] [--inject throttle:share=0.2] \
        [--inject slow-worker:share=0.1,delay=30s]

prints one JSON line {"event": "listening", "port": ..., "address": ..., "session_id": ...} and
serves until SIGTERM or SIGINT, then prints {"event": "stopped", ...counters}. `--inject` makes the
agent cause the named faults itself (router/faults.py), for drills of the recovery paths.
`AgentServer` is the same thing in-process (tests, the drills).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.direct_sink import write_chunk
from core.errors import ConfigError, SpongeError
from core.fault_spec import FaultSpec, parse_all
from core.wire.arrow_ipc import checksum, decode, encode
from core.wire.protocol import (
    PROTOCOL_VERSION,
    SECRET_METADATA,
    SERVER_OPTIONS,
    grpc_module,
    pb,
    secret_matches,
    token_matches,
)
from lambda_worker.program import ProgramCache, ProgramSpec
from router import stats
from router.dispatcher import ChunkFailed, ChunkOutcome, ChunkTask, DispatchConfig, Dispatcher, WorkerLink
from router.faults import AgentFaults, check_agent_faults, check_can_kill
from router.fleet import FleetConfig, FleetManager
from router.invokers import make_invoker
from router.invokers.base import Invoker
from router.invokers.lambda_api import INVOCATION_TYPES
from router.result_cache import ChunkKey, ResultCache

MIN_SECRET_BYTES = 16


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs, validated once.

    `advertise_address` is what workers dial (the VM's address in the Lambda's VPC); it defaults to
    host:port. `hello_timeout_s`: a connection that does not introduce itself by then is closed.
    `faults`: what the agent injects (kill-worker, throttle, slow-worker only); `fault_seed` seeds the
    share-based ones, so a drill repeats its sequence of decisions.
    """

    secret: bytes
    host: str = "127.0.0.1"
    port: int = 0
    advertise_address: str | None = None
    session_id: str = field(default_factory=lambda: "s" + secrets.token_hex(8))
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    result_cache_bytes: int = 256 * 1024 * 1024
    hello_timeout_s: float = 5.0
    tick_s: float = 0.05
    grpc_threads: int = 64
    compression: str = "zstd"
    faults: tuple[FaultSpec, ...] = ()
    fault_seed: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", check_agent_faults(self.faults))
        if not isinstance(self.secret, bytes) or len(self.secret) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"the session secret must be at least {MIN_SECRET_BYTES} bytes",
                hint="write e.g. the output of `python -c 'import secrets; print(secrets.token_hex(32))'`",
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.grpc_threads < 4:
            raise ConfigError(f"grpc_threads must be >= 4, got {self.grpc_threads}")
        if self.compression not in ("zstd", "lz4", "none"):
            raise ConfigError(f"unknown compression {self.compression!r}", hint="use zstd, lz4 or none")

    @staticmethod
    def read_secret(path: str | Path) -> bytes:
        try:
            text = Path(path).read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read the secret file {path}: {e.strerror}") from None
        return text.encode()


class ProgramRegistry:
    """Program specs the agent has been told about, and their compiled form for local runs."""

    def __init__(self) -> None:
        self._specs: dict[str, str] = {}
        self._lock = threading.Lock()
        self.compiled = ProgramCache()

    def register(self, program_id: str, spec_json: str) -> str:
        """The spec JSON of `program_id`, registering `spec_json` if given (checked against the id)."""
        with self._lock:
            if spec_json:
                spec = ProgramSpec.loads(spec_json)
                if spec.program_id != program_id:
                    raise ConfigError(
                        f"program spec hashes to {spec.program_id}, not {program_id}",
                        hint="send ProgramSpec.program_id together with ProgramSpec.dumps()",
                    )
                self._specs[program_id] = spec.dumps()
            if program_id not in self._specs:
                raise ConfigError(
                    f"unknown program {program_id!r}", hint="send the program spec with the first chunk"
                )
            return self._specs[program_id]

    def run(self, program_id: str, payload: bytes, compression: str) -> tuple[bytes, int, int]:
        with self._lock:
            spec_json = self._specs[program_id]
            program = self.compiled.get_json(program_id, spec_json)
        table = decode(payload)
        out = program.run_table(table)
        return encode(out, compression), table.num_rows, out.num_rows


_CLOSE = object()


class _StreamLink(WorkerLink):
    """A worker's gRPC stream: chunks and drains go into the queue its response generator drains."""

    def __init__(self, worker_id: str, agent_pb2: Any, delay_for: Callable[[ChunkTask], float]) -> None:
        super().__init__(worker_id)
        self.outbox: queue.Queue[Any] = queue.Queue()
        self._pb = agent_pb2
        self._delay_for = delay_for

    def send_chunk(self, task: ChunkTask) -> None:
        chunk = self._pb.Chunk(
            chunk_id=task.chunk_id,
            epoch=task.epoch,
            program_id=task.program_id,
            payload=task.payload,
            program=task.program_json,
            delay_s=self._delay_for(task),
        )
        self.outbox.put(self._pb.AgentMessage(chunk=chunk))

    def send_drain(self, reason: str) -> None:
        self.outbox.put(self._pb.AgentMessage(drain=self._pb.Drain(reason=reason)))

    def close(self) -> None:
        self.outbox.put(_CLOSE)


class AgentServer:
    """The agent in-process: `start()` binds and returns the port, `stop()` drains and shuts down."""

    def __init__(self, config: AgentConfig, invoker: Invoker | None) -> None:
        """`invoker` is the fleet's backend (None: no fleet); `config.faults` decorate it (ConfigError if
        kill-worker is asked of a backend that cannot kill). `self.invoker` stays the undecorated backend."""
        if invoker is None:  # no fleet: no worker will ever come, so never wait for one
            config = dataclasses.replace(
                config, dispatch=dataclasses.replace(config.dispatch, local_fallback_s=0.0)
            )
        self.config = config
        self.invoker = invoker
        self.counters = stats.Counters()
        self.faults = AgentFaults(config.faults, self.counters, config.fault_seed)
        self._fleet_invoker = self.faults.invoker(invoker)
        self.programs = ProgramRegistry()
        self.dispatcher = Dispatcher(config.dispatch, self.counters, self._run_local)
        self.cache = ResultCache(config.result_cache_bytes, lambda o: len(o.payload))
        self.fleet: FleetManager | None = None
        self._chunk_ids = iter(range(1, 1 << 62))
        self._ids_lock = threading.Lock()
        self._server: Any = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    # ---- life cycle ----

    def start(self) -> int:
        grpc = grpc_module()
        _, agent_pb2_grpc = pb()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(self.config.grpc_threads, thread_name_prefix="agent-rpc"),
            options=SERVER_OPTIONS,
            maximum_concurrent_rpcs=None,
        )
        agent_pb2_grpc.add_AgentServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port(f"{self.config.host}:{self.config.port}")
        if self.port == 0:
            raise SpongeError(
                f"cannot bind {self.config.host}:{self.config.port}", hint="pick another --port"
            )
        advertise = self.config.advertise_address or self.address
        self.fleet = FleetManager(
            self._fleet_invoker,
            self.config.fleet,
            session_id=self.config.session_id,
            session_secret=self.config.secret,
            agent_address=advertise,
            counters=self.counters,
        )
        self._server.start()
        self.faults.start(self._fleet_invoker, self.dispatcher.workers)
        self._ticker = threading.Thread(target=self._tick_loop, name="agent-tick", daemon=True)
        self._ticker.start()
        return self.port

    def stop(self, grace_s: float = 2.0) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self.dispatcher.close()
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1)
        if self.invoker is not None:
            self.invoker.close()

    def __enter__(self) -> AgentServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.config.tick_s):
            try:
                self.faults.tick()
                self.dispatcher.tick()
                self._scale()
            except Exception as e:  # the watchdog must survive anything
                print(f"agent tick failed: {type(e).__name__}: {e}", file=sys.stderr)

    def _scale(self) -> None:
        if self.fleet is None:
            return
        self.fleet.tick()
        wanted, _connected, head = self.dispatcher.demand()
        if wanted:
            program = json.loads(head.program_json) if head is not None else None
            self.fleet.want(wanted, program)

    # ---- chunks ----

    def _run_local(self, task: ChunkTask) -> ChunkOutcome:
        payload, rows_in, rows_out = self.programs.run(task.program_id, task.payload, self.config.compression)
        return ChunkOutcome(payload, "", True, task.redispatches, rows_in, rows_out, checksum(payload))

    def offload(self, key: ChunkKey, program_json: str, payload: bytes) -> tuple[futures.Future[Any], bool]:
        """Submit a chunk (or join the identical one already known); returns (future outcome, cached)."""
        spec_json = self.programs.register(key.program_id, program_json)
        fut, claimed = self.cache.lookup_or_claim(key)
        if not claimed:
            self.counters.add(stats.CACHE_HITS)
            return fut, True
        with self._ids_lock:
            chunk_id = next(self._chunk_ids)
        task = ChunkTask(chunk_id, key.epoch, key.program_id, spec_json, payload)
        task.future.add_done_callback(lambda f: _forward(f, fut))
        self.dispatcher.submit(task)
        if self.fleet is not None:
            wanted, _, _ = self.dispatcher.demand()
            self.fleet.want(wanted, json.loads(spec_json))
        return fut, False

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self.counters.snapshot()
        out.update(self.dispatcher.gauges())
        out["workers_starting"] = self.fleet.starting if self.fleet is not None else 0
        return out


def _forward(src: futures.Future[Any], dst: futures.Future[Any]) -> None:
    if dst.done():
        return
    error = src.exception()
    if error is not None:
        dst.set_exception(error)
    else:
        dst.set_result(src.result())


class _Servicer:
    """The gRPC face of the agent (registered as sponge.agent.Agent)."""

    def __init__(self, agent: AgentServer) -> None:
        self.agent = agent
        self.pb2, _ = pb()
        self.grpc = grpc_module()

    # ---- VM side ----

    def _check_caller(self, context: Any) -> None:
        presented = dict(context.invocation_metadata()).get(SECRET_METADATA, "")
        if not secret_matches(self.agent.config.secret, presented):
            self.agent.counters.add(stats.REJECTED_CALLERS)
            context.abort(self.grpc.StatusCode.UNAUTHENTICATED, "missing or wrong session secret")

    def Offload(self, request: Any, context: Any) -> Any:
        self._check_caller(context)
        key = ChunkKey(request.epoch, request.partition, request.chunk_seq, request.program_id)
        try:
            fut, cached = self.agent.offload(key, request.program, request.payload)
        except ConfigError as e:
            context.abort(self.grpc.StatusCode.INVALID_ARGUMENT, e.one_line())
        remaining = context.time_remaining()
        if remaining is not None:
            # Answer "not done yet" a little before the caller's deadline, so it gets this status (and
            # retries) rather than racing its own DEADLINE_EXCEEDED.
            remaining = max(0.0, remaining - min(0.5, remaining / 10))
        try:
            outcome: ChunkOutcome = fut.result(timeout=remaining)
        except futures.TimeoutError:
            context.abort(self.grpc.StatusCode.DEADLINE_EXCEEDED, "chunk not done yet; retry to collect it")
        except ChunkFailed as e:
            context.set_trailing_metadata((("x-sponge-error-type", e.error_type),))
            code = (
                self.grpc.StatusCode.UNAVAILABLE
                if e.error_type == "AgentStopping"
                else self.grpc.StatusCode.INTERNAL
            )
            context.abort(code, f"{e.error_type}: {e.detail}")
        payload, crc = outcome.payload, outcome.checksum
        if request.sink_file:
            self._write_sink(request.sink_file, payload, context)
            payload, crc = b"", checksum(b"")
        return self.pb2.OffloadReply(
            payload=payload,
            worker_id=outcome.worker_id,
            ran_locally=outcome.ran_locally,
            redispatches=outcome.redispatches,
            cached=cached,
            rows_in=outcome.rows_in,
            rows_out=outcome.rows_out,
            checksum=crc,
        )

    def _write_sink(self, sink_file: str, payload: bytes, context: Any) -> None:
        """Write a chunk's output where the caller asked (a retry finds it written already)."""
        path = Path(sink_file)
        if path.is_file():
            return
        try:
            write_chunk(path, decode(payload))
        except OSError as e:
            context.abort(self.grpc.StatusCode.INTERNAL, f"SinkWriteFailed: cannot write {path}: {e}")

    def Stats(self, request: Any, context: Any) -> Any:
        self._check_caller(context)
        s = self.agent.stats()
        counters = {k: int(s[k]) for k in stats.ALL}
        return self.pb2.StatsReply(
            counters=counters,
            workers_connected=s["workers_connected"],
            workers_starting=s["workers_starting"],
            chunks_pending=s["chunks_pending"],
            chunks_in_flight=s["chunks_in_flight"],
            session_id=self.agent.config.session_id,
        )

    # ---- workers ----

    def _reject(self, context: Any, code: Any, message: str) -> None:
        self.agent.counters.add(stats.REJECTED_WORKERS)
        context.abort(code, message)

    def Work(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        grpc, agent = self.grpc, self.agent
        timer = threading.Timer(agent.config.hello_timeout_s, context.cancel)
        timer.start()
        try:
            first = next(request_iterator, None)
        except grpc.RpcError:
            return
        finally:
            timer.cancel()
        if first is None or first.WhichOneof("kind") != "hello":
            self._reject(context, grpc.StatusCode.UNAUTHENTICATED, "a worker must say Hello first")
        hello = first.hello
        if hello.protocol_version != PROTOCOL_VERSION:
            self._reject(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"worker protocol {hello.protocol_version}, agent {PROTOCOL_VERSION}: deploy one build",
            )
        ok = hello.session_id == agent.config.session_id and token_matches(
            agent.config.secret, agent.config.session_id, hello.worker_id, hello.secret
        )
        if not ok or agent.fleet is None or not agent.fleet.admit(hello.worker_id, hello.cold_start):
            self._reject(context, grpc.StatusCode.UNAUTHENTICATED, "unknown worker or wrong session secret")
        agent.counters.add(stats.WORKERS_CONNECTED)
        if hello.cold_start:
            agent.counters.add(stats.COLD_STARTS)
        link = _StreamLink(hello.worker_id, self.pb2, agent.faults.chunk_delay)
        context.add_callback(link.close)
        threading.Thread(
            target=self._read_worker,
            args=(link, request_iterator),
            name=f"worker-{hello.worker_id}",
            daemon=True,
        ).start()
        agent.dispatcher.attach(link)
        while True:
            item = link.outbox.get()
            if item is _CLOSE:
                return
            yield item

    def _read_worker(self, link: _StreamLink, request_iterator: Iterator[Any]) -> None:
        d = self.agent.dispatcher
        try:
            for msg in request_iterator:
                kind = msg.WhichOneof("kind")
                if kind == "result":
                    r = msg.result
                    d.on_result(
                        link.worker_id, r.chunk_id, r.epoch, r.payload, r.rows_in, r.rows_out, r.checksum
                    )
                elif kind == "failure":
                    f = msg.failure
                    d.on_failure(link.worker_id, f.chunk_id, f.error_type, f.message)
                elif kind == "goodbye":
                    d.retire(link.worker_id)
        except self.grpc.RpcError:
            pass  # the stream broke: treated exactly like a goodbye without results
        finally:
            d.detach(link.worker_id)
            if self.agent.fleet is not None:
                self.agent.fleet.gone(link.worker_id)
            link.close()


# ---- command line --------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m router.agent", description="Sponge VM agent")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (printed)")
    p.add_argument("--advertise", default=None, help="host:port workers dial (default host:port)")
    p.add_argument("--secret-file", required=True, help="file holding the session secret (>= 16 bytes)")
    p.add_argument("--invoker", default="embedded", choices=("embedded", "boto3", "none"))
    p.add_argument("--max-workers", type=int, default=4)
    p.add_argument(
        "--concurrency-limit",
        type=int,
        default=4,
        help="concurrent executions (embedded fleet) or invokes in flight (boto3)",
    )
    p.add_argument("--function-name", default="sponge-worker")
    p.add_argument("--function-timeout-s", type=float, default=60.0)
    p.add_argument("--region", default=None, help="boto3: AWS region")
    p.add_argument("--qualifier", default=None, help="boto3: alias or version to invoke (e.g. live)")
    p.add_argument("--endpoint-url", default=None, help="boto3: Lambda endpoint (LocalStack's); default AWS")
    p.add_argument(
        "--invocation-type",
        default="Event",
        choices=INVOCATION_TYPES,
        help="boto3: Event (202 at once; a throttle is queued by Lambda) or RequestResponse (held for the "
        "worker's whole session; a throttle is an immediate 429)",
    )
    p.add_argument("--chunk-timeout-s", type=float, default=30.0)
    p.add_argument("--local-fallback-s", type=float, default=2.0)
    p.add_argument("--idle-timeout-s", type=float, default=10.0)
    p.add_argument(
        "--prewarm", type=int, default=0, help="warm pool: start and warm this many environments at start-up"
    )
    p.add_argument("--worker-log", default=None, help="embedded fleet: file for the workers' logs")
    p.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="SPEC",
        help="a fault for the agent to cause, repeatable: kill-worker:every=2s, throttle:share=0.2, "
        "slow-worker:share=0.1,delay=30s (kill-worker needs --invoker embedded)",
    )
    return p.parse_args(argv)


def _invoker_from_args(args: argparse.Namespace) -> Invoker | None:
    if args.invoker == "none":
        return None
    if args.invoker == "embedded":
        return make_invoker(
            "embedded",
            function_name=args.function_name,
            concurrency_limit=args.concurrency_limit,
            timeout_s=args.function_timeout_s,
            log_path=args.worker_log,
        )
    return make_invoker(
        "boto3",
        function_name=args.function_name,
        qualifier=args.qualifier,
        region=args.region,
        endpoint_url=args.endpoint_url,
        invocation_type=args.invocation_type,
        function_timeout_s=args.function_timeout_s,
        concurrency_limit=args.concurrency_limit,
    )


def _prewarm(agent: AgentServer, invoker: Any, n: int) -> None:
    """The warm pool of section 4.4: environments started and warmed before any burst needs them."""
    warmed = invoker.prewarm(n)
    agent.counters.add(stats.WORKERS_PREWARMED, warmed)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        config = AgentConfig(
            secret=AgentConfig.read_secret(args.secret_file),
            host=args.host,
            port=args.port,
            advertise_address=args.advertise,
            dispatch=DispatchConfig(
                chunk_timeout_s=args.chunk_timeout_s, local_fallback_s=args.local_fallback_s
            ),
            fleet=FleetConfig(
                max_workers=args.max_workers,
                idle_timeout_s=args.idle_timeout_s,
                safety_margin_s=min(2.0, args.function_timeout_s / 4),
            ),
            faults=parse_all(args.inject),
        )
        check_can_kill(config.faults, can_kill=args.invoker == "embedded")
    except SpongeError as e:  # before any backend is built: a typo must not start processes or clients
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    invoker: Invoker | None = None
    try:
        invoker = _invoker_from_args(args)
        agent = AgentServer(config, invoker)
        port = agent.start()
    except SpongeError as e:
        if invoker is not None:
            invoker.close()
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    if args.prewarm > 0 and invoker is not None and hasattr(invoker, "prewarm"):
        threading.Thread(target=_prewarm, args=(agent, invoker, args.prewarm), daemon=True).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(
        json.dumps(
            {"event": "listening", "port": port, "address": agent.address, "session_id": config.session_id}
        ),
        flush=True,
    )
    done.wait()
    agent.stop()
    print(json.dumps({"event": "stopped", **agent.stats()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
