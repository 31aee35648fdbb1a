"""The agent in-process: its life cycle, the path of a chunk, and its gRPC face.

`AgentServer.start()` binds, starts the fleet and the tick loop (faults, dispatcher watchdog, fleet
scaling) and returns the port; `offload()` turns an `Offload` call into a chunk, joining an identical
one already known (result cache) or handing it to the dispatcher. `_Servicer` is the gRPC service
(sponge.agent.Agent): `Offload` and `Stats` for Spark tasks, `Work` for the workers that dial in.
Why the service lives with the server: it reads the server's config, counters, fleet and dispatcher
at every call; kept apart, the two would import each other.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

from core.direct_sink import is_chunk_name, write_chunk
from core.errors import ConfigError, InputError, SpongeError
from core.wire.arrow_ipc import checksum, decode, read_schema
from core.wire.protocol import (
    CA_FILE,
    ERROR_TYPE_METADATA,
    PROTOCOL_VERSION,
    SERVER_OPTIONS,
    grpc_module,
    pb,
    token_matches,
)
from core.wire.run_pki import CA_KEY_FILE, CERT_FILE, KEY_FILE, issue_client
from lambda_worker.program import preload
from lambda_worker.transient import TransientProgram
from router import stats
from router.agent import result_check
from router.agent.config import AgentConfig
from router.agent.gate import secret_gate
from router.agent.keyed import GroupVersion, KeyedAgent
from router.agent.programs import ProgramRegistry, UnknownProgram
from router.agent.warm_pool import WarmPool
from router.agent.worker_link import CLOSE, StreamLink
from router.dispatcher import ChunkFailed, ChunkOutcome, ChunkTask, Dispatcher
from router.faults import AgentFaults
from router.fleet import FleetManager
from router.handoff_store import ChunkRef, HandoffStore
from router.invokers.base import Invoker
from router.result_cache import ChunkKey, ResultCache

logger = logging.getLogger(__name__)


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
        self._schemas: dict[tuple[str, Any], Any] = {}  # (program, input schema) -> the output schema
        self.dispatcher = Dispatcher(config.dispatch, self.counters, self._run_local)
        self.cache = ResultCache(config.result_cache_bytes, lambda o: len(o.payload))
        self.keyed = (
            KeyedAgent(HandoffStore(config.handoff_dir), self.offload, config.compression, self.counters)
            if config.handoff_dir is not None
            else None
        )
        self.fleet: FleetManager | None = None
        self.warm_pool: WarmPool | None = None  # set by whoever runs one (router/agent/cli.py)
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
        # Calls past the threads are refused at once (RESOURCE_EXHAUSTED, which callers ask again
        # after), not queued without bound; callers without the secret are refused before their
        # request is read (router/agent/gate.py).
        self._server = grpc.server(
            futures.ThreadPoolExecutor(self.config.grpc_threads, thread_name_prefix="agent-rpc"),
            options=SERVER_OPTIONS,
            interceptors=[secret_gate(self.config.secret, lambda: self.counters.add(stats.REJECTED_CALLERS))],
            maximum_concurrent_rpcs=self.config.grpc_threads,
        )
        agent_pb2_grpc.add_AgentServicer_to_server(_Servicer(self), self._server)
        bind = f"{self.config.host}:{self.config.port}"
        tls = self.config.tls_dir
        ca: bytes | None = None
        issue_cert = None
        if tls is None:
            self.port = self._server.add_insecure_port(bind)
        else:  # TLS only: a plaintext client cannot even complete its handshake
            ca = (tls / CA_FILE).read_bytes()
            # Mutual TLS: the run left the CA's key with the agent, to issue workers' certificates.
            mutual = (tls / CA_KEY_FILE).is_file()
            if mutual:
                issue_cert = self._worker_certs(ca, (tls / CA_KEY_FILE).read_bytes())
            pair = ((tls / KEY_FILE).read_bytes(), (tls / CERT_FILE).read_bytes())
            credentials = grpc.ssl_server_credentials(
                [pair],
                root_certificates=ca if mutual else None,
                require_client_auth=mutual,  # mutual TLS: a caller without the run's certificate
            )
            self.port = self._server.add_secure_port(bind, credentials)
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
            tls_ca=ca.decode() if ca is not None else None,
            issue_cert=issue_cert,
        )
        self._server.start()
        self.faults.start(self._fleet_invoker, self.dispatcher.workers)
        self._ticker = threading.Thread(target=self._tick_loop, name="agent-tick", daemon=True)
        self._ticker.start()
        # The agent runs keyed programs' bookkeeping (and chunks locally): loaded before a burst needs it.
        threading.Thread(target=preload, name="agent-preload", daemon=True).start()
        return self.port

    def _worker_certs(self, ca_pem: bytes, ca_key_pem: bytes) -> Callable[[str], tuple[str, str]]:
        """What issues a worker its own client certificate, valid for the longest session it may have."""
        valid = dt.timedelta(seconds=self.config.fleet.admission_s + 300)

        def issue(worker_id: str) -> tuple[str, str]:
            cert, key = issue_client(ca_pem, ca_key_pem, worker_id, valid)
            return cert.decode(), key.decode()

        return issue

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
            except Exception:  # the watchdog must survive anything
                logger.exception("agent tick failed")

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

    def offload(
        self,
        key: ChunkKey,
        program_json: str,
        payload: bytes,
        rows: int | None = None,
        check: result_check.Check | None = None,
    ) -> tuple[futures.Future[Any], bool]:
        """Submit a chunk (or join the identical one already known); returns (future outcome, cached).

        A worker's result must pass `check` (default: what the chunk's program makes of its input,
        with `rows` records read when the caller counted them; router/agent/result_check.py)."""
        # A caller's payload: bytes that are not Arrow at all never reach a queue or a worker.
        schema = read_schema(payload) if check is None else None
        spec_json = self.programs.register(key.program_id, program_json)
        if schema is not None:  # before the claim: a program that cannot compile leaves no claim behind
            check = self._check(key.program_id, spec_json, schema, rows)
        fut, claimed = self.cache.lookup_or_claim(key)
        if not claimed:
            self.counters.add(stats.CACHE_HITS)
            return fut, True
        with self._ids_lock:
            chunk_id = next(self._chunk_ids)
        task = ChunkTask(chunk_id, key.epoch, key.program_id, spec_json, payload, check=check)
        task.future.add_done_callback(lambda f: _forward(f, fut))
        self.dispatcher.submit(task)
        if self.fleet is not None:
            wanted, _, _ = self.dispatcher.demand()
            self.fleet.want(wanted, json.loads(spec_json))
        return fut, False

    def _check(self, program_id: str, spec_json: str, schema: Any, rows: int | None) -> result_check.Check:
        """A transient chunk's result must have the schema its program makes of the chunk's input
        (found once per program and input schema, on zero rows); another program's must read whole."""
        program = self.programs.compiled.get_json(program_id, spec_json)
        if not isinstance(program, TransientProgram):
            return result_check.readable
        known = (program_id, schema)
        expected = self._schemas.get(known)
        if expected is None:
            try:
                expected = self._schemas[known] = program.run_table(schema.empty_table()).schema
            except Exception:  # input the program cannot read: it fails on the worker, with the
                return result_check.readable  # program's own error, as it would here
        return result_check.transient(expected, rows)

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
    """The gRPC face of the agent (registered as sponge.agent.Agent).

    Every failed VM-side call ends with the status code the caller acts on (the list is at `Offload` in
    core/wire/agent.proto) and names the failure's class in the x-sponge-error-type trailer.
    """

    def __init__(self, agent: AgentServer) -> None:
        self.agent = agent
        self.pb2, _ = pb()
        self.grpc = grpc_module()

    # ---- VM side ----

    def _fail(self, context: Any, code: Any, error_type: str, message: str) -> None:
        """End the call with `code` (what the caller can do) and `error_type` in the trailer (what failed)."""
        context.set_trailing_metadata(((ERROR_TYPE_METADATA, error_type),))
        context.abort(code, message)

    def Offload(self, request: Any, context: Any) -> Any:
        codes = self.grpc.StatusCode
        key = ChunkKey(request.epoch, request.partition, request.chunk_seq, request.program_id)
        if request.sink_file:
            self._check_sink(request.sink_file, context)
        try:
            fut, cached = self.agent.offload(key, request.program, request.payload, request.rows or None)
        except UnknownProgram as e:
            self._fail(context, codes.NOT_FOUND, type(e).__name__, e.one_line())
        except (ConfigError, InputError) as e:
            self._fail(context, codes.INVALID_ARGUMENT, type(e).__name__, e.one_line())
        outcome: ChunkOutcome = self._wait(fut, context)
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

    def _wait(self, fut: futures.Future[Any], context: Any) -> Any:
        """The future's result, or the call ended with the status that says what the caller can do."""
        codes = self.grpc.StatusCode
        remaining = context.time_remaining()
        if remaining is not None:
            # Answer "not done yet" a little before the caller's deadline, so it gets this status (and
            # retries) rather than racing its own DEADLINE_EXCEEDED.
            remaining = max(0.0, remaining - min(0.5, remaining / 10))
        try:
            return fut.result(timeout=remaining)
        except futures.TimeoutError:
            self._fail(
                context, codes.DEADLINE_EXCEEDED, "NotDoneYet", "chunk not done yet; ask again to collect it"
            )
        except ChunkFailed as e:
            code = codes.UNAVAILABLE if e.error_type == "AgentStopping" else codes.INTERNAL
            self._fail(context, code, e.error_type, f"{e.error_type}: {e.detail}")

    # ---- keyed stages ----

    def _keyed(self, context: Any) -> KeyedAgent:
        if self.agent.keyed is None:
            code = self.grpc.StatusCode.FAILED_PRECONDITION
            self._fail(
                context, code, "NoHandoffDir", "this agent keeps no keyed state (start it with --handoff-dir)"
            )
        assert self.agent.keyed is not None
        return self.agent.keyed

    def Stash(self, request: Any, context: Any) -> Any:
        keyed = self._keyed(context)
        c = request.chunk
        try:
            keyed.stash(ChunkRef(c.entity, c.start, c.end, c.seq), request.payload)
        except (ValueError, InputError) as e:
            self._fail(context, self.grpc.StatusCode.INVALID_ARGUMENT, type(e).__name__, str(e))
        return self.pb2.StashReply()

    def Seal(self, request: Any, context: Any) -> Any:
        keyed = self._keyed(context)
        groups = [GroupVersion(g.group, g.version, g.fresh) for g in request.groups]
        if not groups:
            self._fail(
                context, self.grpc.StatusCode.INVALID_ARGUMENT, "InputError", "a seal names no key group"
            )
        try:
            refs = [ChunkRef(c.entity, c.start, c.end, c.seq) for c in request.parts]
            fut = keyed.seal(
                request.program, groups, refs, request.moved, request.forwarded, request.watermark_ms
            )
        except KeyError as e:  # a stashed chunk or a state version that is not there: never guess
            self._fail(context, self.grpc.StatusCode.FAILED_PRECONDITION, "MissingKeyedState", str(e))
        except (ConfigError, InputError) as e:
            self._fail(context, self.grpc.StatusCode.INVALID_ARGUMENT, type(e).__name__, e.one_line())
        answer, outcome = self._wait(fut, context)
        return self.pb2.SealReply(
            payload=answer, worker_id=outcome.worker_id, ran_locally=outcome.ran_locally
        )

    def Touched(self, request: Any, context: Any) -> Any:
        keyed = self._keyed(context)
        try:
            refs = [ChunkRef(c.entity, c.start, c.end, c.seq) for c in request.parts]
            payload = keyed.touched(request.program, list(request.groups), refs)
        except KeyError as e:
            self._fail(context, self.grpc.StatusCode.FAILED_PRECONDITION, "MissingKeyedState", str(e))
        except (ConfigError, InputError) as e:
            self._fail(context, self.grpc.StatusCode.INVALID_ARGUMENT, type(e).__name__, e.one_line())
        return self.pb2.TouchedReply(payload=payload)

    def Warm(self, request: Any, context: Any) -> Any:
        keyed = self._keyed(context)
        try:
            spec = keyed.warm(request.program)
        except (ConfigError, InputError) as e:
            self._fail(context, self.grpc.StatusCode.INVALID_ARGUMENT, type(e).__name__, e.one_line())
        pool = self.agent.warm_pool
        warmed = pool.learn(spec.to_json()).answered if pool is not None else 0
        return self.pb2.WarmReply(warmed=warmed)

    def Release(self, request: Any, context: Any) -> Any:
        reason = request.reason or "released: the load is on VMs"
        return self.pb2.ReleaseReply(drained=self.agent.dispatcher.drain_idle(int(request.keep), reason))

    def HandBack(self, request: Any, context: Any) -> Any:
        keyed = self._keyed(context)
        try:
            payload = keyed.hand_back(request.program, request.group, request.version)
        except KeyError as e:
            self._fail(context, self.grpc.StatusCode.FAILED_PRECONDITION, "MissingKeyedState", str(e))
        return self.pb2.HandBackReply(payload=payload)

    def _check_sink(self, name: str, context: Any) -> None:
        """A sink file is a chunk file's bare name, written only into the agent's own sink directory."""
        codes = self.grpc.StatusCode
        if self.agent.config.sink_dir is None:
            message = "this agent writes no sink files (it was started without --sink-dir)"
            self._fail(context, codes.FAILED_PRECONDITION, "NoSinkDir", message)
        if not is_chunk_name(name):
            message = f"sink file {name[:200]!r} is not a chunk file's name (ENTITY-START-END-SEQ.parquet)"
            self._fail(context, codes.INVALID_ARGUMENT, "BadSinkFile", message)

    def _write_sink(self, name: str, payload: bytes, context: Any) -> None:
        """Write a chunk's output into the sink directory (a retry finds it written already)."""
        assert self.agent.config.sink_dir is not None  # _check_sink
        path = self.agent.config.sink_dir / name
        if path.is_file():
            return
        try:
            write_chunk(path, decode(payload))
        except OSError as e:
            self._fail(context, self.grpc.StatusCode.INTERNAL, "SinkWriteFailed", f"cannot write {path}: {e}")

    def Stats(self, request: Any, context: Any) -> Any:
        s = self.agent.stats()
        counters = {k: int(v) for k, v in self.agent.counters.snapshot().items()}
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
        first_kind = first.WhichOneof("kind") if first is not None else None
        if first_kind != "hello":
            said = f"its first message was {first_kind}" if first_kind else "it sent no message"
            self._reject(context, grpc.StatusCode.UNAUTHENTICATED, f"a worker must say Hello first; {said}")
        hello = first.hello
        if hello.protocol_version != PROTOCOL_VERSION:
            self._reject(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"worker protocol {hello.protocol_version}, agent {PROTOCOL_VERSION}: deploy one build",
            )
        if hello.session_id != agent.config.session_id:
            # Named apart from a bad token: it is what a worker invoked by an earlier agent run sees.
            self._reject(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"worker {hello.worker_id!r} belongs to session {hello.session_id!r}, not this agent's: a "
                "worker joins only the session that invoked it (a late invocation from an earlier run?)",
            )
        ok = token_matches(agent.config.secret, agent.config.session_id, hello.worker_id, hello.secret)
        if not ok or agent.fleet is None:
            self._reject(context, grpc.StatusCode.UNAUTHENTICATED, "unknown worker or wrong session secret")
        if hello.build != agent.config.build:
            message = (
                f"worker {hello.worker_id!r} runs build {hello.build or 'unknown (an older worker)'}, the "
                f"agent build {agent.config.build}: deploy this build (sponge deploy), or start the "
                "agent from the deployed sources"
            )
            agent.fleet.refused(hello.worker_id)
            logger.warning(
                "refused a worker: %s; no worker is started for %g s, chunks run in the agent meanwhile",
                message,
                agent.config.fleet.refused_backoff_s,
            )
            self._reject(context, grpc.StatusCode.FAILED_PRECONDITION, message)
        if not agent.fleet.admit(hello.worker_id, hello.cold_start):
            self._reject(context, grpc.StatusCode.UNAUTHENTICATED, "unknown worker or wrong session secret")
        agent.counters.add(stats.WORKERS_CONNECTED)
        agent.counters.add(stats.COLD_STARTS if hello.cold_start else stats.WARM_STARTS)
        link = StreamLink(hello.worker_id, self.pb2, agent.faults.chunk_delay)
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
            if item is CLOSE:
                return
            yield item

    def _read_worker(self, link: StreamLink, request_iterator: Iterator[Any]) -> None:
        d = self.agent.dispatcher
        try:
            for msg in request_iterator:
                kind = msg.WhichOneof("kind")
                if kind == "result":
                    r = msg.result
                    d.on_result(
                        link.worker_id,
                        r.chunk_id,
                        r.epoch,
                        r.payload,
                        r.rows_in,
                        r.rows_out,
                        r.checksum,
                        rows_by_node=r.rows_by_node,
                        cpu_seconds=r.cpu_seconds,
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
