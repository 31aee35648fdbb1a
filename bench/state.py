"""Bounded memory: the state and the JVM heap of every NEXMark query after T and after 10T seconds.

Run:  .venv/bin/python -m bench.state [--rate R] [--seconds T] [--queries q0,...,q8] [--json]

What runs: per query (by name, through `core.spark.runner.run_query`, so the bench knows nothing of a
query's operators), two runs in ONE SparkSession (the product's `local[2,4]`, 2 shuffle partitions):
R*T events, then R*10T events, at a constant event rate R, read unpaced (as fast as Spark goes). Every
micro-batch holds --batch-seconds of event time (R * batch_seconds events), in both runs: the state an
operator holds at a batch's end includes the windows the batch itself opened, so the batch's span of
event time must not change between T and 10T. Defaults: R = 1,000 events/s, T = 60 s, 20 s of event
time per batch, so 60,000 then 600,000 events in 3 then 30 batches (each run adds a batch holding the
end-of-stream punctuation alone and the closing epoch). The windowed state is on its plateau from the
second batch on. Q0-Q8 take about 15 minutes on this 2-core machine shared with other jobs, most of
it per-batch overhead (Q4's to Q8's Python state operators); growth ratios do not depend on the rate,
absolute sizes do.

State, from the streaming progress' `stateOperators`, per operator and summed over operators:
* rows: `numRowsTotal`.
* bytes, by the operator's store:
  - HDFS-backed (Spark's default store): `memoryUsedBytes`, Spark's SizeEstimator of the state maps the
    store keeps on the JVM heap (the current version and the cached previous one; the current one
    alone is `stateOnCurrentVersionSizeBytes`, kept in the per-operator detail).
  - RocksDB (transformWithState, e.g. Q5's and Q8's fused operators): `rocksdbSstFileSize`, the
    state's bytes in RocksDB's files. Its `memoryUsedBytes` is RocksDB's native memory (memtables,
    block cache, table readers): it follows reads and flushes up to RocksDB's caps, not the state
    (Q5 with the product's settings: 1,080,628 bytes batch after batch), so it cannot tell a bounded
    state from a growing one; it is
    kept as `memory_bytes`, and `state_memory_bytes_*` sums `memoryUsedBytes` over all operators.
    For the SST size to be the live state's at every batch, this bench runs with
    `spark.sql.streaming.stateStore.minDeltasForSnapshot=1` and `...rocksdb.compactOnCommit=true`:
    every commit flushes the memtable and compacts the files. (With the product's settings the
    memtable is flushed every 10th batch only, and RocksDB compacts when 4 files have piled up, so
    the SST size is a saw-tooth of overwritten and deleted entries on top of the live ones: Q5's
    went 22, 34, 47, 59, 22, ... KB at a flat state, which made a T run look 1.6x smaller than a 10T
    run.) The bytes are as RocksDB stores them, compressed.
* Which moment: the PEAK over the run's batches that read data. Not the last progress: the closing
  epoch applies the end-of-stream watermark and empties every window, and the batch before it holds
  the punctuation alone, after the watermark has already closed the windows of the last full batch.
  The peak is what the job has to hold while it runs: for windowed queries (Q5, Q7, Q8) the top of a
  plateau that should not move from T to 10T (`state_growth_10x` ~ 1); for the keyed queries whose
  state lives as long as its key (Q3's unwindowed join; Q4 and Q6 as their semantics make them) it
  is the state at the end of the data, so the bytes per live key of each keyed operator should stay
  flat from T to 10T (`bytes_per_key[].ratio` ~ 1, the worst of them `bytes_per_key_ratio`) even
  while the state grows. The keyed operators and their live keys (`KEYED_STATE`):
  - Q3's stream-stream join: the store's rows, one per person or auction it keeps.
  - Q4's and Q6's winners at the close: the auctions seen and not yet closed at the peak batch's
    watermark W (ceil to the ms of `expires` > W);
  - Q6's 10 latest winners per seller: the sellers with a winning bid decided by W
    (core.nexmark.reference.winning_bids).
  The last two run on transformWithState, whose rows are the lowering's (it groups keys into
  buckets, one row holding many keys), so their keys are counted from the run's events by the
  queries' definitions (docs/queries.md), not from the store. A progress lists its state operators
  in the order Spark's plan is walked from the sink, which is how `KEYED_STATE` names them.
  Every batch's [batch, rows, bytes] is kept in the JSON (`run_T.series`, `run_10T.series`), to see
  the plateau or the growth.

Heap: the peak, over the run, of the JVM heap right after a garbage collection (local mode: driver and
executors share this one JVM). The sum of the memory pools' `getCollectionUsage()` does not give it
on Java 17's G1: young collections leave the old generation pool's collection usage as it was (it
stayed 0 through 23 young collections here, until a full collection), so the sum misses the old
generation. Instead a thread polls every collector's
`com.sun.management.GarbageCollectorMXBean.getLastGcInfo()` through py4j every 0.2 s and sums
`getMemoryUsageAfterGc()` over the heap pools of each collection it has not seen; `gcs_seen` /
`gcs_total` says how many collections that caught (a young collection's "after" includes garbage in
the old generation not yet reclaimed, as GC logs print it: an upper bound of the live heap). Before
each run `System.gc()` (a full collection) clears what the previous run left; the live heap it leaves
is `run_*.heap.baseline_bytes`, which the peak includes. RocksDB's state is native memory, not heap.

Output: a table on stdout and one line per query start and end on stderr; with --json the last stdout
line is one JSON object, {"queries": [{"query": "q5", "state_bytes_T": ..., ...}, ...], ...}.
A query that fails is reported with its error, the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from bench.report_line import finish
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES
from core.nexmark.reference import generate_tables, winning_bids
from core.nexmark.schedule import RateSchedule
from core.run_output import Existing
from core.spark.runner import RunConfig, run_query
from core.spark.session import SparkConfig, spark_session

#: The operators whose state lives as long as its key, per query: (what a key is, the operator's name
#: in the progress), in the progress' order; they report bytes per live key.
KEYED_STATE: dict[str, tuple[tuple[str, str], ...]] = {
    "q3": (("joined records", "symmetricHashJoin"),),
    "q4": (("open auctions", "transformWithStateInPandasExec"),),
    "q6": (
        ("sellers", "transformWithStateInPandasExec"),
        ("open auctions", "transformWithStateInPandasExec"),
    ),
}
KEYED_QUERIES = tuple(KEYED_STATE)
WINDOWED_QUERIES = ("q5", "q7", "q8")  # state per open window: constant at a constant rate
SCALE = 10  # the long run is SCALE times the short one
#: Every commit flushes RocksDB's memtable and compacts its files, so the SST size is the live state's.
ROCKSDB_LIVE_SIZE = (
    ("spark.sql.streaming.stateStore.minDeltasForSnapshot", "1"),
    ("spark.sql.streaming.stateStore.rocksdb.compactOnCommit", "true"),
)
HEAP_POLL_S = 0.2
METHOD = (
    "state: peak over the batches that read data of the sum over stateOperators of rows (numRowsTotal) "
    "and bytes (HDFS store: memoryUsedBytes; RocksDB: rocksdbSstFileSize, flushed and compacted every "
    "commit); "
    "heap: peak JVM heap after GC (GarbageCollectorMXBean.getLastGcInfo, polled every 0.2 s), "
    "after a System.gc() before each run"
)


# ---- pure figures --------------------------------------------------------------------------------


def as_dict(progress: Any) -> dict:
    """A streaming progress as plain JSON data (pyspark's StreamingQueryProgress, or a dict already)."""
    text = getattr(progress, "json", None)
    if isinstance(text, str):
        return json.loads(text)
    return json.loads(json.dumps(progress))


def operator_state(op: Mapping[str, Any]) -> dict[str, Any]:
    """One state operator's rows and bytes (module doc: which metric is its bytes, per store)."""
    custom = op.get("customMetrics") or {}
    memory = int(op.get("memoryUsedBytes") or 0)
    if "rocksdbSstFileSize" in custom:
        store, size = "rocksdb", int(custom["rocksdbSstFileSize"])
    else:
        store, size = ("hdfs" if "stateOnCurrentVersionSizeBytes" in custom else "other"), memory
    detail = {
        "operator": op.get("operatorName"),
        "store": store,
        "rows": int(op.get("numRowsTotal") or 0),
        "bytes": size,
        "memory_bytes": memory,
        "instances": op.get("numStateStoreInstances"),
    }
    for name, key in (
        ("sst_bytes", "rocksdbSstFileSize"),
        ("current_version_bytes", "stateOnCurrentVersionSizeBytes"),
    ):
        if key in custom:
            detail[name] = int(custom[key])
    return detail


def progress_state(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The state of one batch, summed over its state operators, with each operator's detail."""
    ops = [operator_state(op) for op in progress.get("stateOperators") or []]
    event_time = progress.get("eventTime") or {}
    return {
        "batch": progress.get("batchId"),
        "watermark_us": _iso_us(event_time.get("watermark")),
        "max_event_us": _iso_us(event_time.get("max")),
        "rows": sum(o["rows"] for o in ops),
        "bytes": sum(o["bytes"] for o in ops),
        "memory_bytes": sum(o["memory_bytes"] for o in ops),
        "operators": ops,
    }


def _iso_us(text: str | None) -> int | None:
    """A progress' event time (ISO 8601, UTC) as epoch microseconds."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return round(moment.replace(tzinfo=moment.tzinfo or UTC).timestamp() * 1_000_000)


def peak_state(progresses: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The batch with the most state bytes among those that read data (the closing epoch, which has
    emptied every window, reads none); the later batch on a tie. None for a stateless query."""
    running = [p for p in progresses if (p.get("numInputRows") or 0) > 0 and p.get("stateOperators")]
    if not running:
        return None
    states = [progress_state(p) for p in running]
    return max(reversed(states), key=lambda s: s["bytes"])


def series(progresses: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """[batch, rows, bytes] of every batch with state operators, in batch order."""
    out = []
    for p in sorted(progresses, key=lambda p: p.get("batchId", 0)):
        if p.get("stateOperators"):
            s = progress_state(p)
            out.append([s["batch"], s["rows"], s["bytes"]])
    return out


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, or None when either is missing or den is 0."""
    if num is None or not den:
        return None
    return round(num / den, 4)


def live_keys(query: str, tables: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, int] | None:
    """What a key is -> how many `query`'s keyed operators must hold after the batch of `state` (module
    doc: which, per query)."""
    if query == "q3":
        return {"joined records": state["rows"]}
    watermark, last = state.get("watermark_us"), state.get("max_event_us")
    if query not in ("q4", "q6") or watermark is None or last is None:
        return None

    def ceil_ms(column: str) -> pl.Expr:
        return (pl.col(column).dt.epoch("us") + 999) // 1000 * 1000

    auctions = pl.from_arrow(tables["auction"])
    open_auctions = auctions.filter(
        (pl.col("date_time").dt.epoch("us") <= last) & (ceil_ms("expires") > watermark)
    )
    keys = {"open auctions": open_auctions.height}
    if query == "q6":
        decided = pl.from_arrow(winning_bids(tables)).filter(ceil_ms("expires") <= watermark)
        keys["sellers"] = decided["seller"].n_unique()
    return keys


def keyed_operators(query: str, state: Mapping[str, Any], keys: Mapping[str, int]) -> list[dict[str, Any]]:
    """Each keyed operator of `query` (KEYED_STATE) in `state`: its bytes, live keys, bytes per key."""
    remaining = list(state["operators"])
    out = []
    for kind, name in KEYED_STATE[query]:
        op = next((o for o in remaining if o["operator"] == name), None)
        if op is None:
            continue
        remaining.remove(op)
        n = keys.get(kind)
        out.append(
            {"keys_are": kind, "bytes": op["bytes"], "keys": n, "bytes_per_key": ratio(op["bytes"], n)}
        )
    return out


def per_key_figures(short: Mapping[str, Any], long: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per keyed operator: live keys and bytes per key after T and 10T, and their ratio."""
    out = []
    for a, b in zip(short.get("keyed") or [], long.get("keyed") or [], strict=False):
        out.append({
            "keys_are": a["keys_are"],
            "keys_T": a["keys"],
            "keys_10T": b["keys"],
            "bytes_per_key_T": a["bytes_per_key"],
            "bytes_per_key_10T": b["bytes_per_key"],
            "ratio": ratio(b["bytes_per_key"], a["bytes_per_key"]),
        })  # fmt: skip
    return out


def query_figures(query: str, short: Mapping[str, Any], long: Mapping[str, Any]) -> dict[str, Any]:
    """One query's JSON entry from its T run and its 10T run (each as `measure_run` returns it)."""
    s_short, s_long = short.get("state"), long.get("state")
    heaps = [r["heap"]["peak_bytes"] for r in (short, long) if r.get("heap", {}).get("peak_bytes")]
    kind = "stateless" if s_short is None and s_long is None else "stateful"
    if query in KEYED_QUERIES:
        kind = "keyed"
    elif query in WINDOWED_QUERIES:
        kind = "windowed"
    fig: dict[str, Any] = {
        "query": query,
        "kind": kind,
        "state_rows_T": s_short["rows"] if s_short else None,
        "state_rows_10T": s_long["rows"] if s_long else None,
        "state_bytes_T": s_short["bytes"] if s_short else None,
        "state_bytes_10T": s_long["bytes"] if s_long else None,
        "state_growth_10x": ratio(s_long["bytes"] if s_long else None, s_short["bytes"] if s_short else None),
        "state_memory_bytes_T": s_short["memory_bytes"] if s_short else None,
        "state_memory_bytes_10T": s_long["memory_bytes"] if s_long else None,
        "peak_heap_bytes": max(heaps) if heaps else None,
    }
    if query in KEYED_QUERIES:
        fig["bytes_per_key"] = per_key_figures(short, long)
        ratios = [k["ratio"] for k in fig["bytes_per_key"] if k["ratio"] is not None]
        fig["bytes_per_key_ratio"] = max(ratios) if ratios else None
    for label, run in (("T", short), ("10T", long)):
        fig[f"run_{label}"] = {k: v for k, v in run.items() if k != "state"}
        fig[f"operators_{label}"] = run["state"]["operators"] if run.get("state") else []
    errors = [f"{label}: {run['error']}" for label, run in (("T", short), ("10T", long)) if run.get("error")]
    if errors:
        fig["error"] = "; ".join(errors)
    return fig


# ---- the heap ------------------------------------------------------------------------------------


class HeapSampler:
    """The peak heap after GC while it runs, from each collector's last GcInfo (module doc)."""

    def __init__(self, jvm: Any, interval_s: float = HEAP_POLL_S) -> None:
        self._jvm = jvm
        mf = jvm.java.lang.management.ManagementFactory
        self._memory = mf.getMemoryMXBean()
        self._heap_pools = [
            p.getName() for p in mf.getMemoryPoolMXBeans() if p.getType().toString() == "Heap memory"
        ]
        self._collectors = list(mf.getGarbageCollectorMXBeans())
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counts: dict[int, int] = {}
        self._ids: dict[int, int] = {}
        self._seen = 0
        self._first_count = 0
        self.peak_bytes = 0
        self.baseline_bytes = 0
        self.error: str | None = None

    def _count(self) -> int:
        return sum(int(g.getCollectionCount()) for g in self._collectors)

    def _poll(self) -> None:
        for i, g in enumerate(self._collectors):
            count = int(g.getCollectionCount())
            if count == self._counts.get(i):
                continue
            self._counts[i] = count
            info = g.getLastGcInfo()
            if info is None or int(info.getId()) == self._ids.get(i):
                continue
            self._ids[i] = int(info.getId())
            self._seen += 1
            after = info.getMemoryUsageAfterGc()
            used = sum(int(after[p].getUsed()) for p in self._heap_pools if p in after)
            self.peak_bytes = max(self.peak_bytes, used)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                self._poll()
        except Exception as exc:  # the run goes on; the figure says it is incomplete
            self.error = f"heap sampling stopped: {exc}".splitlines()[0]

    def start(self) -> None:
        self._jvm.java.lang.System.gc()
        self.baseline_bytes = int(self._memory.getHeapMemoryUsage().getUsed())
        self.peak_bytes = self.baseline_bytes
        self._first_count = self._count()
        for i, g in enumerate(self._collectors):  # the System.gc() is not the run's
            self._counts[i] = int(g.getCollectionCount())
            info = g.getLastGcInfo()
            if info is not None:
                self._ids[i] = int(info.getId())
        self._thread = threading.Thread(target=self._loop, name="heap-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """The figures so far; what a JVM that died under the run no longer tells is left out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        out: dict[str, Any] = {"peak_bytes": self.peak_bytes, "baseline_bytes": self.baseline_bytes}
        try:
            self._poll()
            out["peak_bytes"] = self.peak_bytes
            out["gcs_seen"] = self._seen
            out["gcs_total"] = self._count() - self._first_count
            out["max_bytes"] = int(self._memory.getHeapMemoryUsage().getMax())
        except Exception as exc:
            self.error = self.error or f"heap sampling stopped: {exc}".splitlines()[0]
        if self.error:
            out["error"] = self.error[:300]
        return out


# ---- runs ----------------------------------------------------------------------------------------


def measure_run(
    query: str, events: int, args: argparse.Namespace, sc: SparkConfig, work: Path
) -> dict[str, Any]:
    """Run `query` on `events` events; its peak state, every batch's state and its peak heap."""
    progresses: list[dict] = []
    gen = GeneratorConfig(seed=args.seed, events=events, schedule=RateSchedule.constant(args.rate))
    config = RunConfig(
        query=query,
        generator=gen,
        output=work / f"{query}_{events}",
        existing=Existing.REPLACE,  # a run of its own from an earlier call
        params=QueryParams(),
        max_events_per_batch=max(1, round(args.rate * args.batch_seconds)),
        spark=sc,
        timeout_s=args.timeout,
    )
    sampler: HeapSampler | None = None
    started = time.time()
    run: dict[str, Any] = {"events": events}
    try:
        sampler = HeapSampler(spark_session(sc)._jvm)  # the session's JVM now, should one have died
        sampler.start()
        summary = run_query(config, progress=lambda p: progresses.append(as_dict(p)))
        run["wall_s"] = summary["wall_s"]
    except Exception as exc:  # one query's failure must not cost the others' figures
        run["wall_s"] = round(time.time() - started, 3)
        run["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    finally:
        run["heap"] = sampler.stop() if sampler is not None else {}
        shutil.rmtree(config.output, ignore_errors=True)
    run["batches"] = len(progresses)
    run["state"] = peak_state(progresses)
    run["series"] = series(progresses)
    if query in KEYED_QUERIES and run["state"] is not None:
        keys = live_keys(query, generate_tables(gen) if query != "q3" else {}, run["state"])
        run["keyed"] = keyed_operators(query, run["state"], keys or {})
    return run


# ---- output --------------------------------------------------------------------------------------


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


def _num(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def render_table(report: Mapping[str, Any]) -> Any:
    from rich.table import Table

    t, scale = report["seconds"], report["scale"]
    table = Table(
        title=f"state and heap after T = {t:g} s and {scale}T = {scale * t:g} s of event time at "
        f"{report['rate']:,.0f} events/s ({report['batch_seconds']:g} s per batch, unpaced)"
    )
    for name in (
        "query",
        "kind",
        "rows T",
        f"rows {scale}T",
        "state T",
        f"state {scale}T",
        "growth",
        "keys are",
        "keys T",
        f"keys {scale}T",
        "B/key T",
        f"B/key {scale}T",
        "B/key ratio",
        "peak heap",
        "wall s",
        "note",
    ):
        table.add_column(name, justify="left" if name in ("query", "kind", "keys are", "note") else "right")
    for q in report["queries"]:
        walls = [q[f"run_{k}"].get("wall_s") for k in ("T", "10T")]
        keyed = q.get("bytes_per_key") or [{}]

        def per_op(field: str, fmt: str = "{:,.0f}", keyed=keyed) -> str:  # one line per keyed operator
            return "\n".join(
                _num(k.get(field), fmt) if field != "keys_are" else k.get(field, "-") for k in keyed
            )

        table.add_row(
            q["query"],
            q["kind"],
            _num(q["state_rows_T"]),
            _num(q["state_rows_10T"]),
            human_bytes(q["state_bytes_T"]),
            human_bytes(q["state_bytes_10T"]),
            _num(q["state_growth_10x"], "{:.2f}x"),
            per_op("keys_are"),
            per_op("keys_T"),
            per_op("keys_10T"),
            per_op("bytes_per_key_T", "{:,.1f}"),
            per_op("bytes_per_key_10T", "{:,.1f}"),
            per_op("ratio", "{:.2f}x"),
            human_bytes(q["peak_heap_bytes"]),
            " + ".join(_num(w, "{:.0f}") for w in walls),
            (q.get("error") or "")[:60],
        )
    return table


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.state", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rate", type=float, default=1_000.0, help="events/s of event time (constant)")
    ap.add_argument("--seconds", type=float, default=60.0, help="T: event-time seconds of the short run")
    ap.add_argument("--batch-seconds", type=float, default=20.0, help="event-time seconds per micro-batch")
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated, from " + ",".join(QUERIES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds one run may take")
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where runs and the JVM's log (jvm.log) are written; kept (default: a temp dir, removed)",
    )
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    args.queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in args.queries if q not in QUERIES]
    if unknown or not args.queries:
        ap.error(f"unknown queries {', '.join(unknown)}; choose from {', '.join(QUERIES)}")
    if args.rate <= 0 or args.seconds <= 0 or args.batch_seconds <= 0:
        ap.error("--rate, --seconds and --batch-seconds must be positive")
    if round(args.rate * args.seconds) < 1:
        ap.error("--rate * --seconds must be at least one event")
    return args


def run_bench(args: argparse.Namespace, say: Callable[[str], None] = _say) -> dict[str, Any]:
    short_events = round(args.rate * args.seconds)
    started = time.time()
    figures = []
    with tempfile.TemporaryDirectory(prefix="sponge-bench-state-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        sc = SparkConfig(app_name="sponge-bench-state", conf=ROCKSDB_LIVE_SIZE, jvm_log=work / "jvm.log")
        spark = spark_session(sc)
        try:
            for q in args.queries:
                t0 = time.time()
                say(f"{q}: start: T {short_events:,} events, then {SCALE}T {short_events * SCALE:,} events")
                short = measure_run(q, short_events, args, sc, work)
                long = measure_run(q, short_events * SCALE, args, sc, work)
                fig = query_figures(q, short, long)
                figures.append(fig)
                state = (
                    f"state {human_bytes(fig['state_bytes_T'])} -> {human_bytes(fig['state_bytes_10T'])}"
                    if fig["kind"] != "stateless"
                    else "no state"
                )
                say(
                    f"{q}: end in {time.time() - t0:.0f} s: {state}, "
                    f"peak heap {human_bytes(fig['peak_heap_bytes'])}"
                    + (f"; FAILED: {fig['error']}" if fig.get("error") else "")
                )
        finally:
            with contextlib.suppress(Exception):  # a JVM that died has nothing left to stop
                spark.stop()
    return {
        "method": METHOD,
        "rate": args.rate,
        "seconds": args.seconds,
        "scale": SCALE,
        "batch_seconds": args.batch_seconds,
        "max_events_per_batch": max(1, round(args.rate * args.batch_seconds)),
        "master": sc.master,
        "shuffle_partitions": sc.shuffle_partitions,
        "elapsed_s": round(time.time() - started, 1),
        "queries": figures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run_bench(args)
    return finish(report, render_table(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
