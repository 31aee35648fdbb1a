"""The figures of bench.offload: per-query medians and rho, and the dispatch summary, from the runs.

Why apart from the rendering (bench/offload_render.py): these numbers are what the JSON report holds
and what the simulator is calibrated with (policy/sim/costs.py); the tables only format them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bench.offload_rigs import BID_SHARE, VmRun, WorkerRun

METHOD = (
    "VM: Spark local[1] on one pinned core, compiled plan, events / sum(triggerExecution) of the batches "
    "with events except the first, converted to bids/s (x46/50); worker: one prewarmed embedded-fleet "
    "worker on its own pinned core, bid rows / wall time of a pass through AgentClient.offload with "
    "several chunks in flight (agent and client on the VM core); rho = worker bids/s / VM bids/s, "
    "medians over interleaved rounds"
)


def _ratio(x: float, y: float) -> float:
    return x / y if y > 0 else float("nan")


def _median(xs: Sequence[float | None]) -> float:
    """The median of the values that exist (a start router.measure did not observe is None)."""
    values = [x for x in xs if x is not None]
    return statistics.median(values) if values else float("nan")


def summarize_query(
    vm: list[VmRun], worker: list[WorkerRun], prog: list[float], check: str
) -> dict[str, Any]:
    """The per-query figures of the report: medians over rounds, rho as the ratio of the medians."""
    vm_events = _median([r.events_per_s for r in vm])
    vm_bids = vm_events * BID_SHARE
    w_bids = _median([r.bids_per_s for r in worker])
    w_cpu = _median([r.bids_per_worker_cpu_s for r in worker])
    return {
        "vm_events_per_s": vm_events,
        "vm_bids_per_s": vm_bids,
        "worker_bids_per_s": w_bids,
        "rho": _ratio(w_bids, vm_bids),
        "rho_per_round": [_ratio(w.bids_per_s, v.bids_per_s) for v, w in zip(vm, worker, strict=True)],
        "worker_busy": _median([r.worker_busy for r in worker]),
        "worker_bids_per_cpu_s": w_cpu,
        "rho_cpu": _ratio(w_cpu, vm_bids),
        "agent_core_busy": _median([r.agent_busy for r in worker]),
        "program_only_bids_per_s": _median(prog),
        "check": check,
        "runs": {
            "vm": [{**asdict(r), "bids_per_s": r.bids_per_s} for r in vm],
            "worker": [
                {
                    **asdict(r),
                    "worker_busy": r.worker_busy,
                    "agent_busy": r.agent_busy,
                    "bids_per_worker_cpu_s": r.bids_per_worker_cpu_s,
                }
                for r in worker
            ],
            "program_only_bids_per_s": prog,
        },
    }


def summarize_dispatch(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    return {
        "source": "router.measure.measure(chunk_mb=1.0, workers=1, program='q5'), a new process per round",
        "chunk_rows": first["chunk_rows"],
        "chunk_arrow_mb": first["chunk_arrow_mb"],
        "chunk_ipc_zstd_mb": first["chunk_ipc_zstd_mb"],
        "offload_p50_ms": _median([r["offload_p50_ms"] for r in runs]),
        "offload_p99_ms": _median([r["offload_p99_ms"] for r in runs]),
        "worker_start_cold_s": _median([r.get("worker_start_cold_s") for r in runs]),
        "worker_start_warm_s": _median([r.get("worker_start_warm_s") for r in runs]),
        "runs": runs,
    }
