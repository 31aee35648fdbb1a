"""The tables bench.offload prints, rendered from its report (the dict it also writes as JSON).

Why from the report alone: what is printed is then exactly what is written, never a second
computation of the same figures.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def print_report(console: Console, report: dict[str, Any], elapsed: float) -> None:
    """The per-query table, the dispatch table, the method and the legend, then the total bench time."""
    config, queries, dispatch = report["config"], report["queries"], report["dispatch"]
    table = Table(
        title=f"VM path per core (Spark local[1], {config['events']:,} events) vs offloaded path per worker "
        f"core ({config['worker_bids']:,} bids in {config['chunk_rows']:,}-row chunks, "
        f"{config['in_flight']} in flight), median of {config['rounds']} rounds"
    )
    left = ("query", "check")
    for name in (
        "query",
        "VM events/s",
        "VM bids/s",
        "worker bids/s",
        "rho",
        "rho per round",
        "worker busy",
        "bids/worker CPU-s",
        "rho_cpu",
        "agent core busy",
        "program only bids/s",
        "check",
    ):
        table.add_column(name, justify="left" if name in left else "right")
    for q, s in queries.items():
        per_round = s["rho_per_round"]
        table.add_row(
            q,
            f"{s['vm_events_per_s']:,.0f}",
            f"{s['vm_bids_per_s']:,.0f}",
            f"{s['worker_bids_per_s']:,.0f}",
            f"{s['rho']:.2f}",
            f"{min(per_round):.2f}-{max(per_round):.2f}",
            f"{s['worker_busy']:.2f}",
            f"{s['worker_bids_per_cpu_s']:,.0f}",
            f"{s['rho_cpu']:.2f}",
            f"{s['agent_core_busy']:.2f}",
            f"{s['program_only_bids_per_s']:,.0f}",
            s["check"].splitlines()[0],
        )
    console.print(table)
    dtable = Table(
        title=f"dispatch and worker start (router.measure, q5, {dispatch['chunk_rows']:,}-row chunk = "
        f"{dispatch['chunk_arrow_mb']} MB Arrow / {dispatch['chunk_ipc_zstd_mb']} MB IPC zstd), "
        f"median of {config['rounds']} rounds"
    )
    for name in ("round trip p50 ms", "round trip p99 ms", "cold start s", "warm start s"):
        dtable.add_column(name, justify="right")
    dtable.add_row(
        f"{dispatch['offload_p50_ms']:.2f}",
        f"{dispatch['offload_p99_ms']:.2f}",
        f"{dispatch['worker_start_cold_s']:.3f}",
        f"{dispatch['worker_start_warm_s']:.3f}",
    )
    console.print(dtable)
    console.print(f"method: {report['method']}", highlight=False)
    console.print(
        "rho = worker bids/s / VM bids/s; rho_cpu uses bids per worker CPU-second (the worker never idle); "
        "busy = CPU time / wall time of the worker process / of this process (agent + client); "
        "program only = decode + program + encode here, no gRPC",
        highlight=False,
    )
    console.print(f"total bench time {elapsed:.0f} s", highlight=False)
