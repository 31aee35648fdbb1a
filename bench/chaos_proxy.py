"""A gRPC proxy in the data plane that does to its messages what a bad network does.

Why a proxy and not hooks in the agent or the worker: a partition, a delayed, duplicated or
reordered message and a result that arrives after the chunk timeout are what the network does to the
real agent and the real workers; neither side can tell the proxy's faults from the real thing, and
neither carries code for them. The proxy stands at the address the agent advertises: callers and
workers dial it, it dials the agent. It serves TLS with the run's server certificate and dials the
agent over TLS trusting the run's CA, passing each call's metadata (the secret) through untouched.
Messages pass as opaque bytes, except that a worker's message is read for its kind when a result is
to be held.

| fault              | what the proxy does                                                          |
|--------------------|------------------------------------------------------------------------------|
| `partition(s)`     | breaks every call and stream at once and refuses new ones for s seconds      |
| `hold_next_result` | keeps the next worker result from the agent for s seconds (past its timeout) |
| `delay_s`          | every message waits a random time up to it, each way                         |
| `duplicate`        | that share of messages is delivered twice (a call's copy may come later)     |
| `reorder`          | that share of calls is held back so that calls made after it overtake it     |
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from core.wire.protocol import CHANNEL_OPTIONS, SERVER_OPTIONS, ChannelTls, open_channel, pb
from router.client import RECONNECT_OPTIONS

WORK = "/sponge.agent.Agent/Work"
COPY_LAG_S = 0.3  # a duplicated call's copy goes out up to this long after the original
HOLD_BACK_S = (0.05, 0.3)  # how long a reordered call is held back
_END = object()


@dataclass(frozen=True)
class NetworkFaults:
    """The standing faults: each message's delay (up to `delay_s`), and the shares of messages
    duplicated and of calls held back (reordered)."""

    delay_s: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0


class FaultProxy:
    """`start()` serves on a free port of `host` and returns it; `stop()` ends every call."""

    def __init__(
        self, upstream: str, *, host: str, cert_pem: bytes, key_pem: bytes, ca_pem: bytes, seed: int = 0
    ) -> None:
        self.upstream = upstream
        self.host = host
        self._credentials = (key_pem, cert_pem)
        self._tls = ChannelTls(ca_pem)
        self.faults = NetworkFaults()
        self.injected: Counter[str] = Counter()  # what the proxy did, by kind
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._cut_until = 0.0
        self._hold_result_s = 0.0
        self._live: set[Any] = set()  # upstream calls (futures and streams) a partition cancels
        self._server: Any = None
        self._channel: Any = None
        self._pb2, _ = pb()

    # ---- life cycle ----

    def start(self) -> int:
        self._channel = open_channel(self.upstream, CHANNEL_OPTIONS + RECONNECT_OPTIONS, self._tls)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(64, thread_name_prefix="proxy"), options=SERVER_OPTIONS
        )
        self._server.add_generic_rpc_handlers((_Handler(self),))
        port = self._server.add_secure_port(
            f"{self.host}:0", grpc.ssl_server_credentials([self._credentials])
        )
        self._server.start()
        return int(port)

    def stop(self) -> None:
        self.partition(0.0)
        if self._server is not None:
            self._server.stop(0.5).wait(2)
        if self._channel is not None:
            self._channel.close()

    # ---- faults ----

    def set_faults(self, faults: NetworkFaults) -> None:
        self.faults = faults

    def reset(self) -> None:
        """No standing fault and nothing held: the state between two schedules."""
        with self._lock:
            self.faults = NetworkFaults()
            self._hold_result_s = 0.0
            self._cut_until = 0.0

    def partition(self, seconds: float) -> None:
        """Break every call in flight now and refuse new ones for `seconds`."""
        with self._lock:
            self._cut_until = time.monotonic() + seconds
            live = list(self._live)
        if seconds:
            self._count("partition")
        for call in live:
            call.cancel()

    def hold_next_result(self, seconds: float) -> None:
        with self._lock:
            self._hold_result_s = seconds

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def _cut(self) -> bool:
        return time.monotonic() < self._cut_until

    def _draw(self, share: float) -> bool:
        if share <= 0:
            return False
        with self._lock:
            return self._rng.random() < share

    def _wait(self) -> None:
        limit = self.faults.delay_s
        if limit > 0:
            with self._lock:
                pause = self._rng.uniform(0, limit)
            self._count("delay")
            time.sleep(pause)

    def _take_hold(self, message: bytes) -> float:
        """How long to keep this worker message back: the held time if it is the result to hold."""
        if self._hold_result_s <= 0:
            return 0.0
        if self._pb2.WorkerMessage.FromString(message).WhichOneof("kind") != "result":
            return 0.0
        with self._lock:
            held, self._hold_result_s = self._hold_result_s, 0.0
        if held:
            self._count("held_result")
        return held

    # ---- forwarding ----

    def _refuse_if_cut(self, context: Any) -> None:
        if self._cut():
            context.abort(grpc.StatusCode.UNAVAILABLE, "network partition (chaos proxy)")

    def unary(self, method: str, request: bytes, context: Any) -> bytes:
        self._refuse_if_cut(context)
        metadata = _passed(context.invocation_metadata())
        timeout = context.time_remaining()
        if self._draw(self.faults.reorder):
            self._count("reorder")
            with self._lock:
                pause = self._rng.uniform(*HOLD_BACK_S)
            time.sleep(pause)
        self._wait()
        call = self._channel.unary_unary(method)
        if self._draw(self.faults.duplicate):
            self._count("duplicate")
            with self._lock:
                lag = self._rng.uniform(0, COPY_LAG_S)
            threading.Timer(lag, self._copy, (call, request, metadata, timeout)).start()
        future = call.future(request, metadata=metadata, timeout=timeout, wait_for_ready=True)
        with self._lock:
            self._live.add(future)
        try:
            reply = future.result()
        except grpc.FutureCancelledError:
            context.abort(grpc.StatusCode.UNAVAILABLE, "network partition (chaos proxy)")
        except grpc.RpcError as e:
            context.set_trailing_metadata(tuple(e.trailing_metadata() or ()))
            context.abort(e.code(), e.details() or "")
        finally:
            with self._lock:
                self._live.discard(future)
        self._wait()
        return bytes(reply)

    def _copy(self, call: Any, request: bytes, metadata: Any, timeout: float | None) -> None:
        """The second delivery of a duplicated call; its answer goes nowhere, as a copy's would."""
        with contextlib.suppress(grpc.RpcError):
            call(request, metadata=metadata, timeout=timeout, wait_for_ready=True)

    def stream(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        self._refuse_if_cut(context)
        outgoing: queue.Queue[Any] = queue.Queue()

        def upstream_messages() -> Iterator[bytes]:
            while (item := outgoing.get()) is not _END:
                yield item

        call = self._channel.stream_stream(WORK)(
            upstream_messages(), metadata=_passed(context.invocation_metadata()), wait_for_ready=True
        )
        with self._lock:
            self._live.add(call)
        threading.Thread(target=self._pump_up, args=(requests, outgoing), daemon=True).start()
        try:
            for message in call:
                self._wait()
                yield message
                if self._draw(self.faults.duplicate):
                    self._count("duplicate")
                    yield message
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                context.abort(grpc.StatusCode.UNAVAILABLE, "network partition (chaos proxy)")
            context.abort(e.code(), e.details() or "")
        finally:
            with self._lock:
                self._live.discard(call)
            call.cancel()
            outgoing.put(_END)

    def _pump_up(self, requests: Iterator[bytes], outgoing: queue.Queue[Any]) -> None:
        """A worker's messages on their way to the agent: delayed, held or duplicated as the faults say."""
        try:
            for message in requests:
                self._wait()
                held = self._take_hold(message)
                if held:
                    time.sleep(held)
                outgoing.put(message)
                if self._draw(self.faults.duplicate):
                    self._count("duplicate")
                    outgoing.put(message)
        except grpc.RpcError:
            pass  # the worker's side broke: the agent sees the stream end, as it would
        finally:
            outgoing.put(_END)


def _passed(metadata: Any) -> tuple[tuple[str, str], ...]:
    """The caller's own metadata (the secret), without what gRPC sets itself on each hop."""
    return tuple(
        (m.key, m.value)
        for m in metadata or ()
        if not m.key.startswith((":", "grpc-")) and m.key != "user-agent"
    )


class _Handler(grpc.GenericRpcHandler):
    """Every method of the agent's service, forwarded as bytes: Work as a stream, the rest as calls."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self._stream = grpc.stream_stream_rpc_method_handler(proxy.stream)

    def service(self, details: Any) -> Any:
        if details.method == WORK:
            return self._stream
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self.proxy.unary(details.method, request, context)
        )
