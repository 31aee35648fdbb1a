"""Measure the offload path on this machine: worker start (cold vs warm) and Offload round trips.

    python -m router.measure [--chunk-mb 1] [--rounds 200] [--workers 2]

Why a module and not a test: the figures depend on the machine; they are reported, never asserted.
Everything runs on 127.0.0.1 with the embedded fleet (real processes, the real handler and channel).
Worker start is the time from the invoke to the worker's Hello at the agent; a round trip is one
`AgentClient.offload` of a chunk of NEXMark bids of about `--chunk-mb` MB (Arrow in memory), from
encoding the request to decoding the reply, with warm workers and a distinct key each time.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from core.nexmark.generator import GeneratorConfig, generate
from core.wire.arrow_ipc import encode
from core.wire.protocol import ChannelTls
from core.wire.run_pki import make_server_pki
from lambda_worker.program import ProgramSpec
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.client import AgentClient
from router.dispatcher import DispatchConfig
from router.fleet import FleetConfig
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig

PROGRAMS = {
    "q5": ProgramSpec("q5", ("map1", "key_by2", "window_aggregate3")),
    "q7": ProgramSpec("q7", ("key_by1", "window_aggregate2")),
}


def _chunk(mb: float) -> pa.Table:
    sample = generate(GeneratorConfig(seed=1, events=20_000), "bid", 0, 20_000)
    rows = int(mb * 1024 * 1024 / (sample.nbytes / sample.num_rows))
    events = int(rows * 50 / 46) + 50
    batch = generate(GeneratorConfig(seed=1, events=events), "bid", 0, events)
    return pa.Table.from_batches([batch]).slice(0, rows)


def _pct(values: list[float], q: float) -> float:
    return float(np.quantile(values, q, method="nearest"))


def measure(
    chunk_mb: float, rounds: int, workers: int, program: str, local: bool, tls: bool = False
) -> dict[str, Any]:
    """With `tls`, the agent serves TLS under a CA made for the measurement, as a run's does."""
    secret = secrets.token_hex(16).encode()
    fleet = None if local else EmbeddedFleet(EmbeddedFleetConfig(concurrency_limit=workers))
    scratch = tempfile.TemporaryDirectory(prefix="sponge-measure-")
    tls_dir = make_server_pki(["127.0.0.1"]).write(Path(scratch.name)) if tls else None
    config = AgentConfig(
        secret=secret,
        dispatch=DispatchConfig(local_fallback_s=0.0 if local else 30.0),
        fleet=FleetConfig(max_workers=workers, idle_timeout_s=1.0),
        tls_dir=tls_dir,
    )
    channel_tls = ChannelTls.read(tls_dir) if tls_dir is not None else None
    spec = PROGRAMS[program]
    data = _chunk(chunk_mb)
    out: dict[str, Any] = {
        "program": program,
        "path": "agent-local" if local else "embedded-fleet",
        "transport": "tls" if tls else "plaintext",
        "chunk_rows": data.num_rows,
        "chunk_arrow_mb": round(data.nbytes / 2**20, 3),
        "chunk_ipc_zstd_mb": round(len(encode(data, "zstd")) / 2**20, 3),
    }
    with (
        scratch,
        AgentServer(config, fleet) as agent,
        AgentClient(agent.address, secret, tls=channel_tls) as client,
    ):
        seq = 0
        if fleet is not None:
            # Cold: new processes. Then let the workers idle out and come back warm.
            for _ in range(2):
                client.offload(0, 0, seq, spec, data)
                seq += 1
            time.sleep(2.0)
            client.offload(0, 0, seq, spec, data)
            seq += 1
            starts = list(agent.fleet.startups) if agent.fleet is not None else []
            cold = [s for c, s in starts if c]
            warm = [s for c, s in starts if not c]
            out["worker_start_cold_s"] = round(statistics.median(cold), 4) if cold else None
            out["worker_start_warm_s"] = round(statistics.median(warm), 4) if warm else None
        for _ in range(5):  # warm-up
            client.offload(1, 0, seq, spec, data)
            seq += 1
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            client.offload(2, 0, seq, spec, data)
            times.append(time.perf_counter() - t0)
            seq += 1
        out["offload_p50_ms"] = round(_pct(times, 0.5) * 1000, 2)
        out["offload_p99_ms"] = round(_pct(times, 0.99) * 1000, 2)
        compiled = spec.compile()
        compute = []
        for _ in range(20):
            t0 = time.perf_counter()
            encode(compiled.run_table(data), "zstd")
            compute.append(time.perf_counter() - t0)
        out["compute_and_encode_p50_ms"] = round(_pct(compute, 0.5) * 1000, 2)
        out["stats"] = {k: v for k, v in agent.stats().items() if v}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunk-mb", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--program", choices=sorted(PROGRAMS), default="q5")
    p.add_argument("--local", action="store_true", help="no fleet: every chunk runs in the agent")
    p.add_argument("--tls", action="store_true", help="the agent serves TLS (a run's default off loopback)")
    args = p.parse_args(argv)
    report = measure(args.chunk_mb, args.rounds, args.workers, args.program, args.local, args.tls)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
