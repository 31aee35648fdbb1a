"""One policy's run of a drill, in its own process: `python -m core.drill.run_policy SPEC.json OUT.json`.

Why a process per run: each policy needs its own Spark JVM with its own CPU set (the "VM" cores;
Over gets them all), and a JVM inherits its CPU affinity from the process that starts it. The agent
and its Lambda workers are pinned to the other cores, so offloading adds capacity instead of
stealing it from the VMs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from core.drill.latency import Epoch

WARMUP_EVENTS = 60_000


@dataclass(frozen=True)
class PolicyRun:
    """Everything the child needs (JSON on disk between the two processes)."""

    policy: str
    query: str
    events: int
    seed: int
    schedule: str
    output: str
    master: str
    vm_cpus: list[int]
    worker_cpus: list[int] = field(default_factory=list)
    offload: bool = False  # route through the agent (sponge)
    target: str = "embedded"  # where the Lambda workers run (localstack/aws: the deployed stack)
    controlled: bool = False  # the policy loop decides the share
    max_workers: int = 4
    prewarm: int = 0
    per_core_rate: float = 0.0
    rho: float = 1.0
    deadline_s: float = 2.0
    window_size_s: int = 10
    window_slide_s: int = 2


class DrillHooks:
    """Keeps the epochs as they commit and runs the policy loop (monitoring only for baselines)."""

    def __init__(self, run: PolicyRun, schedule: Any) -> None:
        self.run = run
        self.schedule = schedule
        self.epochs: list[Epoch] = []
        self.covered = 0
        self.loop: Any = None
        self.session: Any = None
        self.origin = 0.0
        self.published: list[dict[str, Any]] = []

    def on_progress(self, p: dict) -> None:
        offsets = [
            (
                (json.loads(s["startOffset"] or "null") or {}).get("event", 0),
                (json.loads(s["endOffset"] or "null") or {}).get("event"),
            )
            for s in p["sources"]
            if s.get("endOffset")
        ]
        offsets = [(a, b) for a, b in offsets if b is not None]
        if not offsets:
            return
        started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        commit = started + p["durationMs"].get("triggerExecution", 0) / 1000.0
        epoch = Epoch(started, commit, min(a for a, _ in offsets), min(b for _, b in offsets))
        self.epochs.append(epoch)
        self.covered = max(self.covered, epoch.covered)

    def started(self, spark: Any, session: Any, origin: float) -> None:
        from policy.decision_log import DecisionLog
        from policy.loop import PolicyLoop
        from policy.monitor import Monitor, ProcessTreeCpu
        from policy.offload_policy import PolicyConfig, SpongePolicy

        self.session, self.origin = session, origin
        jvm = spark.sparkContext._gateway.proc.pid
        released_cap = self.run.events + 1
        monitor = Monitor(
            cpu=ProcessTreeCpu(lambda: [jvm]),
            vm_cores=lambda: len(os.sched_getaffinity(jvm)),
            released=lambda: min(int(self.schedule.events_by(time.time() - origin)), released_cap),
            committed=lambda: self.covered,
            last_epoch_s=lambda: (
                (self.epochs[-1].commit_t - self.epochs[-1].started_t) if self.epochs else None
            ),
            origin=origin,
        )
        policy = log = None
        if self.run.controlled:
            config = PolicyConfig(
                per_core_rate=self.run.per_core_rate,
                rho=self.run.rho,
                deadline_s=self.run.deadline_s,
                max_workers=self.run.max_workers,
            )
            policy, log = (
                SpongePolicy(config),
                DecisionLog(Path(self.run.output + "-decisions.jsonl"), config),
            )
        self.loop = PolicyLoop(
            monitor=monitor, policy=policy, apply=self._apply, log=log, gauges=self._gauges
        )
        self.loop.start()

    def _gauges(self) -> dict[str, float]:
        if self.session is None or self.session.agent is None:
            return {}
        latest = self.session.agent.latest()
        return {k: latest.get(k, 0) for k in ("workers_connected", "workers_prewarmed", "records_offloaded")}

    def _apply(self, decision: Any) -> None:
        plan = self.session.publish(decision.share, decision.workers)
        self.published.append({"t": time.time() - self.origin, "share": plan.share, "workers": plan.workers})

    def stopped(self) -> None:
        if self.loop is not None:
            self.loop.stop()

    def per_second(self) -> list[dict[str, Any]]:
        """The loop's samples: observation, decision and the agent's worker gauge."""
        return [
            {"observation": asdict(o), "decision": asdict(d) if d is not None else None, "gauges": g}
            for o, d, g in self.loop.samples
        ]


def run(spec: PolicyRun) -> dict[str, Any]:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.params import QueryParams
    from core.nexmark.schedule import RateSchedule
    from core.spark.offload_session import OffloadConfig
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig

    os.sched_setaffinity(0, set(spec.vm_cpus))  # the JVM and its Python workers inherit it
    schedule = RateSchedule.parse(spec.schedule)
    out = Path(spec.output)
    offload = None
    if spec.offload:
        offload = OffloadConfig(
            share=0.0,
            target=spec.target,
            workers=spec.max_workers,
            worker_cpus=frozenset(spec.worker_cpus) or None,
            prewarm=spec.prewarm,
            idle_timeout_s=600.0,  # the warm pool keeps its sessions for the whole drill
        )
    hooks = DrillHooks(spec, schedule)
    config = RunConfig(
        query=spec.query,
        generator=GeneratorConfig(seed=spec.seed, events=spec.events, schedule=schedule),
        output=out,
        params=QueryParams(window_size_s=spec.window_size_s, window_slide_s=spec.window_slide_s),
        pace=True,
        spark=SparkConfig(master=spec.master),
        offload=offload,
    )
    # Warm the JVM, its code generation and the Python workers first: the VMs of a job in its stable
    # period are warm, and the drill's trace starts in that stable period.
    run_query(
        replace(
            config,
            generator=GeneratorConfig(seed=spec.seed, events=WARMUP_EVENTS),
            pace=False,
            offload=None,
            output=out.parent / f"{out.name}-warmup",
        )
    )
    summary = run_query(config, progress=hooks.on_progress, hooks=hooks)
    return {
        "summary": summary,
        "origin": hooks.origin,
        "epochs": [asdict(e) for e in hooks.epochs],
        "samples": hooks.per_second(),
        "published": hooks.published,
    }


def main(argv: list[str]) -> int:
    spec = PolicyRun(**json.loads(Path(argv[0]).read_text()))
    result = run(spec)
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
