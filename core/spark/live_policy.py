"""The policy loop of a live run (`sponge run --policy sponge|noscaling`), and what users watch of it.

Why here and not in the drill: a drill replays one trace under several policies and reports on them
afterwards; a live run streams the user's own input for as long as it lasts, so its policy must read
the backlog from what the job really reads (the files of `--input`, or the generated schedule),
keep a bounded memory of its seconds, append to its decision log when the run is resumed, and say
once a second how the run is doing, in files any monitoring reads (core/run_status.py names them).
The rules both share (the Monitor over the Spark JVM, an epoch from a progress event, the agent's
gauges) live here once; core/drill/run_policy.py uses them.

The backlog is in records: `released()` what the sources have made available, `committed()` what
finished epochs have read. For files, a file counts once it has its `.jsonl` (or `.parquet`) name (a
writer renames it into place when it is whole), with core/spark/file_source.py's own listing, so what
is counted is what the source reads. For a Kinesis stream, a record counts once Kinesis shows it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from core import atomic_write
from core.deployment import METRICS_NAMESPACE
from core.file_schema import FORMATS, FileSchema
from core.latency import Epoch
from core.run_status import (
    DECISIONS,
    EMF,
    HISTORY,
    HISTORY_LINES,
    LATEST,
    METRICS,
    POLICY_DIR,
    STATUS_DIR,
)
from core.spark.file_source import list_files
from core.spark.parquet_read import count_rows
from core.spark.runner import RunHooks, source_offset

POLICIES = ("none", "noscaling", "sponge")
KEEP_SAMPLES = 600  # the loop's own samples a live run keeps (its tallies and files hold the rest)
READ_BLOCK = 1 << 20


# ---------------------------------------------------------------------------------------------
# Rules the drill shares


def epoch_times(p: Mapping[str, Any]) -> tuple[float, float]:
    """When an epoch started and committed (unix seconds), from its StreamingQueryProgress JSON."""
    started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
    return started, started + p["durationMs"].get("triggerExecution", 0) / 1000.0


def generated_epoch(p: Mapping[str, Any]) -> Epoch | None:
    """The epoch of a progress event over the generated source, by its "event" offsets (the lowest of
    its sources: every event below it has committed); None when no source reported an offset."""
    offsets = [
        (
            source_offset(s["startOffset"]).get("event", 0),
            source_offset(s["endOffset"]).get("event"),
        )
        for s in p["sources"]
        if s.get("endOffset")
    ]
    offsets = [(a, b) for a, b in offsets if b is not None]
    if not offsets:
        return None
    started, commit = epoch_times(p)
    return Epoch(started, commit, min(a for a, _ in offsets), min(b for _, b in offsets))


def stream_epoch(p: Mapping[str, Any]) -> Epoch | None:
    """The epoch of a progress event over a Kinesis stream, in records of the stream: each source's
    records read (its shards' `n`, core/kinesis.py `next_shards`) at the epoch's start and end, the
    lowest of its sources. A producer puts events in order, so that count is the events the epoch
    has covered, as the generated source's offsets are."""

    def records(offset: str | None) -> int | None:
        value = source_offset(offset)
        if "shards" not in value:
            return None
        return sum(int(at.get("n", 0)) for at in value["shards"].values())

    offsets = [(records(s.get("startOffset")) or 0, records(s.get("endOffset"))) for s in p["sources"]]
    offsets = [(a, b) for a, b in offsets if b is not None]
    if not offsets:
        return None
    started, commit = epoch_times(p)
    return Epoch(started, commit, min(a for a, _ in offsets), min(b for _, b in offsets))


def spark_monitor(
    spark: Any,
    *,
    released: Callable[[], int],
    committed: Callable[[], int],
    last_epoch_s: Callable[[], float | None],
    origin: float,
    epoch_fixed_s: float | None = None,
    pool: Any = None,
) -> Any:
    """A Monitor of the Spark JVM and its Python workers (their CPU over the cores the JVM may use), or,
    with a standalone `pool` (core/spark/vm_pool.py), of every executor JVM over the executors' cores."""
    from policy.monitor import Monitor, ProcessTreeCpu

    jvm = spark.sparkContext._gateway.proc.pid
    cpu: Any = ProcessTreeCpu(lambda: [jvm])
    vm_cores: Callable[[], int] = lambda: len(os.sched_getaffinity(jvm))  # noqa: E731
    if pool is not None:
        # Executors join and fork Python workers as tasks arrive: walk the tree at every sample.
        cpu, vm_cores = ProcessTreeCpu(pool.cpu_roots, rescan_every=1), pool.cores
    return Monitor(
        cpu=cpu,
        vm_cores=vm_cores,
        released=released,
        committed=committed,
        last_epoch_s=last_epoch_s,
        origin=origin,
        epoch_fixed_s=epoch_fixed_s,
    )


AGENT_GAUGES = ("workers_connected", "workers_prewarmed", "records_offloaded")


def agent_gauges(session: Any) -> dict[str, float]:
    """The VM agent's gauges the loop records each second ({} when the run does not offload)."""
    if session is None or session.agent is None:
        return {}
    latest = session.agent.latest()
    return {k: latest.get(k, 0) for k in AGENT_GAUGES}


# ---------------------------------------------------------------------------------------------
# Backlog sources


class Backlog(Protocol):
    """Records released by the sources and committed by finished epochs, fed by progress events."""

    def on_progress(self, p: Mapping[str, Any]) -> None: ...
    def released(self) -> int: ...
    def committed(self) -> int: ...


class FileBacklog:
    """The backlog of a run over `--input DIR`: records of the complete files under DIR/<source>/ (a
    source is its FileSchema, or a JSON-lines source's name).

    `committed` counts, per source, the records of its first k sorted files, k being the highest
    `endOffset["files"]` a progress event reported for it (a routed run reads each source twice, over
    the same offsets). Each file's records are counted once and kept (files are immutable once named).
    Without `follow` the source fixed its file list when it started, so files arriving later are not
    released: `freeze()` takes the listing then.
    """

    def __init__(self, root: Path, sources: Iterable[FileSchema | str], follow: bool = True) -> None:
        self.root = root
        formats = [(s, "jsonl") if isinstance(s, str) else (s.name, s.format) for s in sources]
        self.sources = tuple(name for name, _ in formats)
        self._formats = dict(formats)  # each source's file format: its files' suffix and how to count them
        self.follow = follow
        self._records: dict[str, int] = {}
        self._frozen: dict[str, list[str]] | None = None
        self._read: dict[str, int] = dict.fromkeys(self.sources, 0)  # files committed, per source

    def freeze(self) -> None:
        if not self.follow:
            self._frozen = {s: self._list(s) for s in self.sources}

    def _list(self, source: str) -> list[str]:
        return list_files(self.root / source, FORMATS[self._formats[source]])

    def _files(self, source: str) -> list[str]:
        return self._frozen[source] if self._frozen is not None else self._list(source)

    def _count(self, source: str, path: str) -> int:
        n = self._records.get(path)
        if n is None:
            n = count_records(Path(path), self._formats[source])
            self._records[path] = n
        return n

    def on_progress(self, p: Mapping[str, Any]) -> None:
        for s in p.get("sources", ()):
            end = source_offset(s.get("endOffset"))
            if "files" in end and end.get("source") in self._read:
                self._read[end["source"]] = max(self._read[end["source"]], int(end["files"]))

    def released(self) -> int:
        return sum(self._count(s, f) for s in self.sources for f in self._files(s))

    def committed(self) -> int:
        # The bounded source's last offset is one past its last file (the end-of-stream punctuation).
        return sum(self._count(s, f) for s in self.sources for f in self._files(s)[: self._read[s]])


def count_records(path: Path, format: str) -> int:
    """The records a complete file of `format` holds (a FileSchema's): a JSON-lines file's lines, a
    Parquet file's rows from its footer; 0 if it has gone."""
    return count_rows(path) if format == "parquet" else count_lines(path)


def count_lines(path: Path) -> int:
    """Records in a JSONL file: its newlines, plus a last line that lacks one; 0 if it has gone."""
    n, last = 0, b"\n"
    try:
        with path.open("rb") as f:
            while block := f.read(READ_BLOCK):
                n += block.count(b"\n")
                last = block[-1:]
    except FileNotFoundError:
        return 0
    return n + (last != b"\n")


class GeneratedBacklog:
    """The backlog of a run over the generated source paced by `--rate`: released by the schedule since
    the pace began, committed up to the lowest "event" end offset of the last epoch."""

    def __init__(self, schedule: Any, events: int) -> None:
        self.schedule = schedule
        self.cap = events + 1  # the end-of-stream punctuation sits at offset `events`
        self.origin: float | None = None  # set when the run starts (the pace's origin)
        self.covered = 0

    def on_progress(self, p: Mapping[str, Any]) -> None:
        epoch = generated_epoch(p)
        if epoch is not None:
            self.covered = max(self.covered, epoch.covered)

    def released(self) -> int:
        if self.origin is None:
            return 0
        return min(int(self.schedule.events_by(time.time() - self.origin)), self.cap)

    def committed(self) -> int:
        return self.covered


class KinesisBacklog:
    """The backlog of a run over a Kinesis stream: released, the records its shards hold now (read off
    the stream's tail, core/kinesis.py `StreamTail`); committed, per shard, the records below the
    position every source's committed epochs reached (the offsets' `n`).

    Records of every kind count, as the generated backlog counts events of every entity: a NEXMark
    stream holds all three, and each source's read moves through all of them.
    """

    def __init__(self, tail: Any, sources: Iterable[FileSchema | str]) -> None:
        self.tail = tail
        self.sources = tuple(s if isinstance(s, str) else s.name for s in sources)
        self._read: dict[tuple[str, str], int] = {}  # (source, shard) -> records committed

    def on_progress(self, p: Mapping[str, Any]) -> None:
        for s in p.get("sources", ()):
            end = source_offset(s.get("endOffset"))
            if "shards" in end and end.get("source") in self.sources:
                for shard, at in end["shards"].items():
                    key = (end["source"], shard)
                    self._read[key] = max(self._read.get(key, 0), int(at.get("n", 0)))

    def released(self) -> int:
        return self.tail.count()

    def committed(self) -> int:
        shards = {shard for _, shard in self._read}
        return sum(min(self._read.get((source, shard), 0) for source in self.sources) for shard in shards)


# ---------------------------------------------------------------------------------------------
# The run's status files


def _round(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


GAUGES: tuple[tuple[str, str, str], ...] = (
    # (latest.json key, metric name, help)
    ("t", "sponge_run_seconds", "Seconds since the run's pace began."),
    ("input_rate", "sponge_input_rate", "Records the sources released per second."),
    ("processed_rate", "sponge_processed_rate", "Records finished epochs committed per second."),
    ("backlog", "sponge_backlog_records", "Records released but not committed."),
    ("queue_delay_s", "sponge_queue_delay_seconds", "Seconds the backlog needs at the current rate."),
    ("cpu", "sponge_vm_cpu_ratio", "CPU of the Spark processes over the VM cores (0..1)."),
    ("load", "sponge_vm_load_ratio", "The VM load the policy reads: epoch utilisation, else the CPU."),
    ("vm_cores", "sponge_vm_cores", "Cores the Spark JVM may run on."),
    ("epoch_s", "sponge_epoch_seconds", "Duration of the last finished epoch."),
    ("share", "sponge_offload_share", "Share of records the current offload plan sends to workers."),
    ("workers", "sponge_offload_workers", "Lambda workers the current plan keeps."),
    ("workers_connected", "sponge_workers_connected", "Workers connected to the VM agent."),
    ("records_offloaded", "sponge_records_offloaded", "Records the workers have run (this run segment)."),
    ("decisions", "sponge_policy_decisions", "Decisions the policy took in this run segment."),
    ("at", "sponge_status_timestamp_seconds", "When these figures were taken (unix seconds)."),
)


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(figures: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """The figures as Prometheus text exposition (gauges named sponge_*), for node_exporter's
    textfile collector; a figure not known yet (None) is left out rather than reported as 0."""
    base = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
    lines: list[str] = []
    for key, name, text in GAUGES:
        value = figures.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge", f"{name}{{{base}}} {float(value):g}"]
    trigger = figures.get("trigger")
    if trigger:
        name = "sponge_policy_trigger"
        lines += [
            f"# HELP {name} The signal that fired in the last decision (1 for that trigger).",
            f"# TYPE {name} gauge",
            f'{name}{{{base},trigger="{_label(str(trigger))}"}} 1',
        ]
    return "\n".join(lines) + "\n"


class _BoundedLog:
    """A JSON-lines file appended to and cut back to its last `limit` lines once it holds twice that many
    (whole, atomically), so a run of days keeps a bounded file; a resumed run carries on with it."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self._tail: deque[str] = deque(maxlen=limit)
        self._lines = 0
        if path.is_file():
            lines = path.read_text(encoding="utf-8").splitlines()
            self._tail.extend(lines)
            self._lines = len(lines)

    def append(self, line: str) -> None:
        self._tail.append(line)
        self._lines += 1
        if self._lines >= 2 * self.limit:
            atomic_write.write_text(self.path, "\n".join(self._tail) + "\n")
            self._lines = len(self._tail)
        else:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


# The figures as CloudWatch metrics, with their units (the rest of latest.json is not a metric).
EMF_UNITS = {
    "input_rate": "Count/Second",
    "processed_rate": "Count/Second",
    "backlog": "Count",
    "queue_delay_s": "Seconds",
    "cpu": "None",
    "load": "None",
    "epoch_s": "Seconds",
    "share": "None",
    "workers": "Count",
    "workers_connected": "Count",
    "records_offloaded": "Count",
}


def emf_document(figures: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """One CloudWatch Embedded Metric Format document of the figures (namespace "Sponge", as the workers'
    own; dimensions the run's labels), built by Powertools, which the workers use too. CloudWatch Logs
    turns a log line of it into metrics, so the CloudWatch agent shipping `emf.jsonl` is enough."""
    from aws_lambda_powertools.metrics import Metrics

    metrics = Metrics(namespace=METRICS_NAMESPACE)
    try:
        for key, unit in EMF_UNITS.items():
            value = figures.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics.add_metric(name=key, unit=unit, value=float(value))
        for name, value in labels.items():
            metrics.add_dimension(name=name, value=value)
        return metrics.serialize_metric_set()
    finally:
        metrics.clear_metrics()


class StatusFiles:
    """Writes OUTPUT/_status/: latest.json and metrics.prom replaced whole, history.jsonl appended and
    cut back to the last HISTORY_LINES lines; with `emf`, emf.jsonl likewise (a run whose workers are
    deployed on AWS, where CloudWatch is the monitoring)."""

    def __init__(
        self, output: Path, labels: Mapping[str, str], history_lines: int = HISTORY_LINES, emf: bool = False
    ) -> None:
        self.dir = output / STATUS_DIR
        self.labels = dict(labels)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.history = _BoundedLog(self.dir / HISTORY, history_lines)
        self.emf = _BoundedLog(self.dir / EMF, history_lines) if emf else None

    def write(self, figures: Mapping[str, Any]) -> None:
        text = json.dumps({k: _round(v) for k, v in figures.items()})
        atomic_write.write_text(self.dir / LATEST, text + "\n")
        atomic_write.write_text(self.dir / METRICS, prometheus_text(figures, self.labels))
        self.history.append(text)
        if self.emf is not None:
            self.emf.append(json.dumps(emf_document(figures, self.labels)))


# ---------------------------------------------------------------------------------------------
# The live policy


class LivePolicy(RunHooks):
    """RunHooks (core/spark/runner.py) plus a `progress` callback: runs the policy loop while the query
    streams. "sponge" decides the offloaded share and publishes each new plan to the offload session;
    "noscaling" observes and records only (its seconds are what a run without offloading looks like).
    """

    def __init__(
        self,
        policy: str,
        output: Path,
        backlog: Backlog,
        *,
        per_core_rate: float,
        rho: float,
        max_workers: int,
        deadline_s: float = 2.0,
        offload_cost: float = 0.0,
        append: bool = False,
        labels: Mapping[str, str] | None = None,
        interval_s: float | None = None,
        emf: bool = False,
    ) -> None:
        from policy.offload_policy import PolicyConfig

        if policy not in ("noscaling", "sponge"):
            raise ValueError(f"LivePolicy runs noscaling or sponge, not {policy!r}")
        self.name = policy
        self.output = output
        self.backlog = backlog
        self.append = append
        self.config = PolicyConfig(
            per_core_rate=per_core_rate,
            rho=rho,
            deadline_s=deadline_s,
            max_workers=max_workers,
            offload_cost=offload_cost,
        )
        # The policy's own monitoring period unless told otherwise: it confirms a burst over periods.
        self.interval_s = interval_s if interval_s is not None else self.config.period_s
        self.labels = {"run": output.name, **(labels or {})}
        self.emf = emf  # the figures also as CloudWatch EMF (workers deployed on AWS)
        self.status: StatusFiles | None = None  # made once the run has claimed its output (started)
        self.loop: Any = None
        self.session: Any = None
        self.origin = 0.0
        self.last_epoch: tuple[float, float] | None = None  # started, committed (unix s)
        self.plan: tuple[float, int] = (0.0, 0)  # the current plan's share and workers
        self.decisions = 0
        self.plans_published = 0
        self.max_share = 0.0
        self.offloaded_s = 0.0
        self.triggers: Counter[str] = Counter()
        self.last_fired: tuple[str, float] | None = None
        self._latest: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._write_every_interval, name="live-status", daemon=True)

    @property
    def decision_log(self) -> Path:
        return self.output / POLICY_DIR / DECISIONS

    def progress(self, p: Mapping[str, Any]) -> None:
        """Each committed epoch's progress: the backlog's committed offsets and the last epoch's length."""
        self.backlog.on_progress(p)
        self.last_epoch = epoch_times(p)

    def _last_epoch_s(self) -> float | None:
        return None if self.last_epoch is None else self.last_epoch[1] - self.last_epoch[0]

    def started(self, spark: Any, session: Any, origin: float) -> None:
        from policy.decision_log import DecisionLog
        from policy.loop import PolicyLoop
        from policy.offload_policy import SpongePolicy

        self.session, self.origin = session, origin
        self.status = StatusFiles(self.output, self.labels, emf=self.emf)
        if isinstance(self.backlog, GeneratedBacklog):
            self.backlog.origin = origin
        if isinstance(self.backlog, FileBacklog):
            self.backlog.freeze()
        monitor = spark_monitor(
            spark,
            released=self.backlog.released,
            committed=self.backlog.committed,
            last_epoch_s=self._last_epoch_s,
            origin=origin,
        )
        policy = log = None
        if self.name == "sponge":
            started = datetime.fromtimestamp(origin).astimezone().isoformat(timespec="seconds")
            policy = SpongePolicy(self.config)
            log = DecisionLog(self.decision_log, self.config, append=self.append, started=started)
        self.loop = PolicyLoop(
            monitor=monitor,
            policy=policy,
            apply=self._apply,
            log=log,
            interval_s=self.interval_s,
            gauges=lambda: agent_gauges(self.session),
            keep_samples=KEEP_SAMPLES,
            on_sample=self.on_sample,
        )
        self.loop.start()
        self._writer.start()

    def _apply(self, decision: Any) -> None:
        if self.session is None:
            return
        plan = self.session.publish(decision.share, decision.workers)
        self.plan = (plan.share, plan.workers)
        self.plans_published += 1

    def on_sample(self, obs: Any, decision: Any, gauges: Mapping[str, float]) -> None:
        """One second of the loop: tally it for the summary and keep it as the latest figures."""
        with self._lock:
            if decision is not None:
                self.decisions += 1
                self.triggers[decision.trigger] += 1
                if decision.trigger != "hold":
                    self.last_fired = (decision.trigger, decision.t)
            share = self.plan[0]
            self.max_share = max(self.max_share, share)
            if share > 0:
                self.offloaded_s += self.interval_s
            self._latest = self.figures(obs, decision, gauges)

    def figures(self, obs: Any, decision: Any, gauges: Mapping[str, float]) -> dict[str, Any]:
        """What latest.json and metrics.prom say about one second."""
        return {
            "at": round(time.time(), 3),
            "state": "running",
            "policy": self.name,
            "t": obs.t,
            "input_rate": obs.input_rate,
            "processed_rate": obs.processed_rate,
            "backlog": obs.backlog,
            "released": self.backlog.released(),
            "committed": self.backlog.committed(),
            "queue_delay_s": obs.queue_delay_s,
            "cpu": obs.cpu,
            "load": obs.load,
            "vm_cores": obs.vm_cores,
            "epoch_s": obs.epoch_s,
            "share": self.plan[0],
            "workers": self.plan[1],
            "workers_connected": gauges.get("workers_connected"),
            "records_offloaded": gauges.get("records_offloaded"),
            "decisions": self.decisions,
            "trigger": decision.trigger if decision is not None else None,
            "last_fired": self.last_fired[0] if self.last_fired else None,
            "last_fired_t": self.last_fired[1] if self.last_fired else None,
        }

    def _write_every_interval(self) -> None:
        """Write the latest figures once a second, off the loop's thread (a slow disk must not delay
        the policy's observations)."""
        written = None
        while not self._stop.wait(self.interval_s / 2):
            with self._lock:
                latest = self._latest
            if latest is not None and latest is not written:
                self._write(latest)
                written = latest

    def _write(self, figures: Mapping[str, Any]) -> None:
        if self.status is None:
            return
        try:
            self.status.write(figures)
        except OSError as e:  # a full disk must not stop the run; the loop's errors keep the reason
            if self.loop is not None:
                self.loop.errors.append(f"status: {type(e).__name__}: {e}")

    def stopped(self) -> None:
        if self.loop is not None:
            self.loop.stop()
        self._stop.set()
        if self._writer.is_alive():
            self._writer.join(timeout=5)
        with self._lock:
            latest = self._latest
        if latest is not None:
            self._write({**latest, "state": "stopped", "at": round(time.time(), 3)})

    def summary(self) -> dict[str, Any]:
        """The run's summary.json "policy": what the policy did in this run segment."""
        return {
            "name": self.name,
            "decisions": self.decisions,
            "plans_published": self.plans_published,
            "max_share": self.max_share,
            "offloaded_s": round(self.offloaded_s, 1),
            "triggers": dict(self.triggers),
            "decision_log": str(self.decision_log) if self.name == "sponge" else None,
            "status": str(self.output / STATUS_DIR),
            "loop_errors": list(self.loop.errors) if self.loop is not None else [],
        }


def backlog_for(
    input_dir: Path | None,
    sources: Sequence[FileSchema | str],
    follow: bool,
    schedule: Any,
    events: int,
    kinesis: Any = None,
) -> Backlog:
    """The backlog of a run: its Kinesis stream (a core.kinesis.KinesisEndpoint), its input files, or
    its generated schedule."""
    if kinesis is not None:
        from core.kinesis import StreamTail

        return KinesisBacklog(StreamTail(kinesis), sources)
    if input_dir is not None:
        return FileBacklog(input_dir, sources, follow)
    return GeneratedBacklog(schedule, events)
