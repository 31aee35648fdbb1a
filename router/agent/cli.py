"""`python -m router.agent`: the agent as a process, configured from its command line.

Why this contract matters: router/agent_process.py starts the agent with these flags and waits for
the one JSON line {"event": "listening", "port": ...} on stdout (router/agent/__init__.py's
`ready_line`) before any task may call it; on SIGTERM or SIGINT (or, with --exit-with-parent, once its
standard input closes) the agent stops and prints {"event": "stopped", ...counters}. A bad flag or
secret is reported in one line `error: ... (hint)` on stderr with exit status 2 before any backend
(process or AWS client) is built. Stdout carries only those JSON lines; everything the running agent
reports goes through `logging` to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from core.errors import SpongeError
from core.fault_spec import parse_all
from router.agent import ready_line
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.agent.warm_pool import Programs, Round, WarmPool, WarmPoolConfig
from router.dispatcher import DEFAULT_CHUNK_TIMEOUT_S, DEFAULT_LOCAL_FALLBACK_S, DispatchConfig
from router.faults import check_can_kill
from router.fleet import FleetConfig
from router.invokers import make_invoker
from router.invokers.base import Invoker
from router.invokers.lambda_api import INVOCATION_TYPES

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """Send the agent's log records to stderr, stamped with time and level, for whoever reads it: the
    `.agent.log` beside a run's worker log, and the launcher's report of an agent that failed to start.
    A no-op when the host process configured logging already (an in-process `main`, pytest)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)


def _refuse(error: SpongeError) -> int:
    """The command line's answer to a bad flag, secret or bind: one readable line and exit status 2,
    the same shape as `sponge`'s errors; not a log record, because nothing is running yet."""
    print(f"error: {error.one_line()}", file=sys.stderr)
    return 2


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
    p.add_argument("--chunk-timeout-s", type=float, default=DEFAULT_CHUNK_TIMEOUT_S)
    p.add_argument("--local-fallback-s", type=float, default=DEFAULT_LOCAL_FALLBACK_S)
    p.add_argument("--idle-timeout-s", type=float, default=10.0)
    p.add_argument(
        "--prewarm", type=int, default=0, help="warm pool: start and warm this many environments at start-up"
    )
    p.add_argument(
        "--keep-warm-s",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="while no worker is connected or starting, warm --max-workers environments every SECONDS of "
        "idleness, before the platform reclaims them (0, the default: never)",
    )
    p.add_argument("--worker-log", default=None, help="embedded fleet: file for the workers' logs")
    p.add_argument(
        "--handoff-dir",
        default=None,
        help="keyed stages: where stashed records and key groups' states are kept",
    )
    p.add_argument(
        "--worker-netns",
        default=None,
        metavar="NAME",
        help="embedded fleet: start the workers in this network namespace (made with `ip netns add`), "
        "so they reach the agent only over the network, at --advertise, as Lambda workers do",
    )
    p.add_argument(
        "--tls-dir",
        default=None,
        help="serve TLS only, with DIR/server.pem and DIR/server.key; workers are told to trust DIR/ca.pem "
        "(a run makes all three, core/wire/run_pki.py); without it the agent speaks plaintext",
    )
    p.add_argument(
        "--sink-dir",
        default=None,
        help="stateless chains that end at the sink: the one directory the agent writes their chunk "
        "files to (the query's output/_offloaded); without it such requests are refused",
    )
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when standard input closes: a launcher that holds its other end and dies, even "
        "SIGKILLed, takes the agent and its workers with it",
    )
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
            launcher=("ip", "netns", "exec", args.worker_netns) if args.worker_netns else (),
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


def _warm_rounds(invoker: Invoker) -> Callable[[int, Programs], Round] | None:
    """One round of n concurrent warm-ups on this backend, as the warm pool counts it; None for a backend
    that cannot warm. The Lambda API answers each warm-up with its environment's cold flag; the embedded
    fleet counts the environments it had to start."""
    warm = getattr(invoker, "warm", None)
    if warm is not None:

        def lambda_round(n: int, programs: Programs) -> Round:
            done = warm(n, programs)
            return Round(done.answered, done.cold)

        return lambda_round
    prewarm = getattr(invoker, "prewarm", None)
    counters = getattr(invoker, "counters", None)
    if prewarm is None or not isinstance(counters, dict):
        return None

    def fleet_round(n: int, programs: Programs) -> Round:
        before = counters.get("cold", 0)
        answered = prewarm(n, programs)
        return Round(answered, counters.get("cold", 0) - before)

    return fleet_round


def _idle(agent: AgentServer) -> Callable[[], bool]:
    """True while the fleet has nothing to do: no worker connected or starting, no chunk waiting."""

    def idle() -> bool:
        s = agent.stats()
        busy = ("workers_connected", "workers_starting", "chunks_pending", "chunks_in_flight")
        return not any(s.get(k, 0) for k in busy)

    return idle


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    configure_logging()
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
            handoff_dir=Path(args.handoff_dir) if args.handoff_dir else None,
            sink_dir=Path(args.sink_dir) if args.sink_dir else None,
            tls_dir=Path(args.tls_dir) if args.tls_dir else None,
            warm_pool=WarmPoolConfig(
                prewarm=max(0, args.prewarm), pool=args.max_workers, keep_warm_s=args.keep_warm_s
            ),
        )
        check_can_kill(config.faults, can_kill=args.invoker == "embedded")
    except SpongeError as e:  # before any backend is built: a typo must not start processes or clients
        return _refuse(e)
    invoker: Invoker | None = None
    try:
        invoker = _invoker_from_args(args)
        agent = AgentServer(config, invoker)
        port = agent.start()
    except SpongeError as e:
        if invoker is not None:
            invoker.close()
        return _refuse(e)
    rounds = _warm_rounds(invoker) if invoker is not None else None
    pool = WarmPool(config.warm_pool, rounds, _idle(agent), agent.counters) if rounds is not None else None
    if pool is not None:
        agent.warm_pool = pool
        pool.start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if args.exit_with_parent:
        threading.Thread(target=_set_at_eof, args=(done,), name="parent-watch", daemon=True).start()
    logger.info("serving on %s, session %s", agent.address, config.session_id)
    print(ready_line(port, agent.address, config.session_id), flush=True)
    done.wait()
    logger.info("stopping")
    if pool is not None:
        pool.stop()
    agent.stop()
    with contextlib.suppress(BrokenPipeError):  # a launcher that died reads nothing
        print(json.dumps({"event": "stopped", **agent.stats()}), flush=True)
    return 0


def _set_at_eof(done: threading.Event) -> None:
    """Set `done` once standard input closes (its writer, the launcher, has exited)."""
    while sys.stdin.buffer.read(65_536):
        pass
    done.set()
