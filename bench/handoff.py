"""Record latency through a keyed operator's handoff to the workers: lazy fetch against all-at-once.

Method. The operator is Q4's winner_at_close, the product's own: the VM's side is `run_batch`
(merge/keyed_batch.py, what the Spark processor runs), the agent a separate process
(router/agent_process.py) reached over gRPC, the workers its embedded fleet's processes. Before the
handoff the VM's state holds `--keys` open auctions (each a key; they close after the bench). At the
switch every key group goes to the workers, and bids on auctions drawn uniformly arrive at `--rate`
per second for `--seconds`. As in a Spark micro-batch stream, a batch takes every record arrived so
far once the previous batch is done: its bids are stashed at the agent, its receipts go through
`run_batch`, which fetches state and seals each group on a worker. A record's latency is the end of
its batch less its arrival. Both strategies see the same records, keys and state, one after the
other in one run (this machine is shared: only the ratio is compared):

- all-at-once: a group's whole state moves with its first seal (ADR 0024);
- lazy: a seal takes only the keys its records are of (ADR 0025);
- progressive: as lazy, and each batch moves `--round-keys` more keys still on the VM (ADR 0034);
- vm-only, first, as the reference: no switch, no agent; the VM's step takes every record over its
  whole state, as before a burst (the thesis's "ready-state" latency, against which its migrations
  are judged).

Printed per strategy: p50/p99/max latency, batches, keys fetched and state bytes moved (the agent's
counters), and the keys still on the VM at the end (none once a migration completed); the JSON line
carries `p99_ratio_lazy_vs_all_at_once` (lazy p99 / all-at-once p99) and `p99_ratio_lazy_vs_vm_only`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from bench.report_line import finish
from core.nexmark.schema import AUCTION_SCHEMA, BID_SCHEMA
from core.offload_plan import key_groups_of
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.keyed_batch import RECEIPT_SIDE, ROUND_KEYS, Fetch, run_batch
from merge.keyed_groups import GROUP, RECEIPT, Frames
from merge.keyed_step import SIDE

QUERY, NODE = "q4", "winner_at_close6"
T0_US = 1_700_000_000 * 1_000_000  # event time of the switch
US = 1_000_000
CHUNK_ROWS = 16_384
VM_ONLY = "vm-only"  # the reference run: no handoff, the VM steps every record
METHOD = (__doc__ or "").split("Method. ", 1)[1].split("\n\nPrinted", 1)[0].replace("\n", " ")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def auctions(n: int) -> pa.Table:
    """`n` open auctions with ids 0..n-1, opened before the switch, closing a day after it."""
    ids = np.arange(n, dtype=np.int64)
    blank = pa.array([""] * n, pa.string())
    columns = {
        "id": ids,
        "item_name": blank,
        "description": blank,
        "initial_bid": np.ones(n, np.int64),
        "reserve": np.zeros(n, np.int64),
        "date_time": pa.array(np.full(n, T0_US - US), pa.timestamp("us", "UTC")),
        "expires": pa.array(np.full(n, T0_US + 86_400 * US), pa.timestamp("us", "UTC")),
        "seller": ids % 1000,
        "category": ids % 10,
        "extra": blank,
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in AUCTION_SCHEMA})


def bids(count: int, keys: int, rate: float, seed: int) -> pa.Table:
    """`count` bids on auctions drawn uniformly from `keys`, the i-th at event time T0 + i / rate."""
    rng = np.random.default_rng(seed)
    at = T0_US + (np.arange(count) * (US / rate)).astype(np.int64)
    blank = pa.array([""] * count, pa.string())
    columns = {
        "auction": rng.integers(0, keys, count, dtype=np.int64),
        "bidder": rng.integers(0, 10_000, count, dtype=np.int64),
        "price": rng.integers(1, 1_000_000, count, dtype=np.int64),
        "channel": blank,
        "url": blank,
        "date_time": pa.array(at, pa.timestamp("us", "UTC")),
        "extra": blank,
    }
    table = pa.table({f.name: pa.array(columns[f.name], f.type) for f in BID_SCHEMA})
    return table.append_column(GROUP, pa.array(key_groups_of(table["auction"]).astype(np.int32)))


def vm_state(program: KeyedProgram, keys: int) -> Frames:
    """The VM's state before the switch: every auction open, no bid yet."""
    rows = program.staged({"auction": pl.from_arrow(auctions(keys))})  # type: ignore[dict-item]
    return program.spec.step({}, rows, (T0_US - US) // 1000).state


def _receipts(table: pa.Table, start: int, end: int, seq: int) -> pl.DataFrame:
    """A stashed chunk's receipts in the operator's input layout (one row per key group)."""
    groups = np.unique(table[GROUP].to_numpy())
    n = len(groups)
    return pl.DataFrame(
        {SIDE: [RECEIPT_SIDE] * n, GROUP: groups.astype(np.int32), RECEIPT[0]: ["bid"] * n}
        | {c: [v] * n for c, v in zip(RECEIPT[1:], (start, end, seq), strict=True)},
        schema={SIDE: pl.Int32, GROUP: pl.Int32, RECEIPT[0]: pl.Utf8} | dict.fromkeys(RECEIPT[1:], pl.Int64),
    )


def handoff(
    address: str | None, secret_file: Path, fetch: Fetch | None, state: Frames, records: pa.Table, args: Any
) -> dict[str, Any]:
    """One handoff: every group switches at once, the records arrive at `args.rate`; the latencies.
    `fetch` None: no handoff, the VM steps every record over its state (the reference: no agent)."""
    from router.client import shared_client
    from router.seal_service import AgentSealService

    spec = ProgramSpec(QUERY, (NODE,))
    program = spec.compile()
    assert isinstance(program, KeyedProgram)
    service = client = None
    if fetch is not None:
        assert address is not None
        service = AgentSealService(
            address,
            str(secret_file),
            spec.dumps(),
            fetch,
            subscales=args.subscales,
            round_keys=args.round_keys,
        )
        service.warm()  # as the query's start does (core/spark/offload_session.py)
        client = shared_client(address, str(secret_file), 600.0)
    empty = pl.DataFrame(schema={c: program.types[c] for c in program.spec.columns})
    layout = pl.concat(
        [
            empty,
            pl.DataFrame(
                schema={GROUP: pl.Int32, RECEIPT[0]: pl.Utf8} | dict.fromkeys(RECEIPT[1:], pl.Int64)
            ),
        ],
        how="horizontal",
    )
    total = records.num_rows
    arrival = np.arange(total) / args.rate
    vm, held = state, {}
    latencies = np.zeros(total)
    watermark_ms = T0_US // 1000
    taken, batches = 0, 0
    started = time.monotonic()
    while taken < total:
        ready = min(total, int((time.monotonic() - started) * args.rate) + 1)
        if ready <= taken:
            time.sleep(max(0.0, arrival[taken] - (time.monotonic() - started)))
            continue
        batch = records.slice(taken, ready - taken)
        if client is None:
            new = program.staged({"bid": pl.from_arrow(batch)})  # type: ignore[dict-item]
        else:
            receipts = []
            for seq, i in enumerate(range(0, batch.num_rows, CHUNK_ROWS)):
                chunk = batch.slice(i, CHUNK_ROWS)
                client.stash("bid", taken, ready, seq, chunk)
                receipts.append(_receipts(chunk, taken, ready, seq))
            new = pl.concat([layout, *receipts], how="diagonal_relaxed")
        done = run_batch(program.spec, service, fetch or Fetch.LAZY, vm, held, new, watermark_ms)
        latencies[taken:ready] = (time.monotonic() - started) - arrival[taken:ready]
        vm, held = done.state, done.held
        last = batch["date_time"][-1].value
        watermark_ms = max(watermark_ms, last // 1000)
        taken, batches = ready, batches + 1
    return {
        "fetch": fetch.value if fetch is not None else VM_ONLY,
        "batches": batches,
        "records": total,
        "p50_s": round(float(np.percentile(latencies, 50)), 4),
        "p99_s": round(float(np.percentile(latencies, 99)), 4),
        "max_s": round(float(latencies.max()), 4),
        "keys_left_on_vm": program.key_count(vm),
    }


def measure(args: argparse.Namespace, say: Callable[[str], None] = _say) -> dict[str, Any]:
    from router.agent_process import AgentProcess, AgentProcessConfig, write_secret
    from router.stats import handoffs

    started = time.time()
    program = ProgramSpec(QUERY, (NODE,)).compile()
    assert isinstance(program, KeyedProgram)
    say(f"building the VM's state: {args.keys:,} open auctions")
    state = vm_state(program, args.keys)
    records = bids(int(args.rate * args.seconds), args.keys, args.rate, args.seed)
    say(f"{VM_ONLY}: {records.num_rows:,} bids at {args.rate:,.0f}/s, no handoff")
    runs = [handoff(None, Path(), None, state, records, args)]
    say(f"{VM_ONLY}: p99 {runs[0]['p99_s']:.3f} s over {runs[0]['batches']} batches")
    with tempfile.TemporaryDirectory(prefix="sponge-bench-handoff-") as tmp:
        for fetch in (Fetch.ALL_AT_ONCE, Fetch.LAZY, Fetch.PROGRESSIVE):
            work = Path(tmp) / fetch.value
            work.mkdir()
            agent = AgentProcess(
                AgentProcessConfig(
                    secret_file=write_secret(work / "secret"),
                    max_workers=args.workers,
                    log_path=work / "workers.log",
                    handoff_dir=work / "handoff",
                    prewarm=args.workers,
                )
            )
            agent.start()
            agent.wait_warm(args.workers, 60.0)
            try:
                say(f"{fetch.value}: {records.num_rows:,} bids at {args.rate:,.0f}/s")
                run = handoff(agent.address, work / "secret", fetch, state, records, args)
            finally:
                totals = agent.stop()
            run |= handoffs(totals).get(NODE, {})
            say(f"{fetch.value}: p99 {run['p99_s']:.3f} s over {run['batches']} batches")
            runs.append(run)
    by = {r["fetch"]: r for r in runs}
    ratio = by[Fetch.LAZY]["p99_s"] / by[Fetch.ALL_AT_ONCE]["p99_s"]
    return {
        "method": METHOD,
        "keys": args.keys,
        "rate": args.rate,
        "seconds": args.seconds,
        "workers": args.workers,
        "subscales": args.subscales,
        "round_keys": args.round_keys,
        "seed": args.seed,
        "runs": runs,
        "p99_ratio_lazy_vs_all_at_once": round(ratio, 4),
        "p99_ratio_lazy_vs_vm_only": round(by[Fetch.LAZY]["p99_s"] / by[VM_ONLY]["p99_s"], 4),
        "elapsed_s": round(time.time() - started, 1),
    }


def render(report: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"handoff of {report['keys']:,} keys, {report['rate']:,.0f} records/s")
    figures = ("batches", "p50 s", "p99 s", "max s", "keys fetched", "state bytes moved", "left on VM")
    table.add_column("fetch")
    for col in figures:
        table.add_column(col, justify="right")
    for r in report["runs"]:
        table.add_row(
            r["fetch"],
            str(r["batches"]),
            f"{r['p50_s']:.3f}",
            f"{r['p99_s']:.3f}",
            f"{r['max_s']:.3f}",
            f"{r.get('keys_fetched', 0):,}",
            f"{r.get('state_bytes_moved', 0):,}",
            f"{r['keys_left_on_vm']:,}",
        )
    table.caption = (
        f"p99 lazy / all-at-once = {report['p99_ratio_lazy_vs_all_at_once']:.4f}; "
        f"lazy / no handoff = {report['p99_ratio_lazy_vs_vm_only']:.2f}"
    )
    return table


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.handoff", description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--keys", type=int, default=100_000, help="open auctions in the VM's state (default 100,000)"
    )
    ap.add_argument("--rate", type=float, default=20_000.0, help="records per second after the switch")
    ap.add_argument("--seconds", type=float, default=5.0, help="how long records arrive (default 5)")
    ap.add_argument("--workers", type=int, default=2, help="Lambda workers (default 2)")
    ap.add_argument(
        "--subscales", type=int, default=1, help="seals a batch runs at once (sponge run --subscales)"
    )
    ap.add_argument(
        "--round-keys",
        type=int,
        default=ROUND_KEYS,
        help=f"progressive: keys a batch moves beyond those it reads (default {ROUND_KEYS:,})",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    if min(args.keys, args.workers, args.subscales, args.round_keys) < 1:
        ap.error("--keys, --workers, --subscales and --round-keys must be at least 1")
    if not args.rate > 0 or not args.seconds > 0:
        ap.error("--rate and --seconds must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = measure(args)
    return finish(report, render(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
