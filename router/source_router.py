"""The router operator inside the source read: each record goes to the VM path or to the workers.

Why in the read (ADR 0005): the source task already holds every record of its offset range as an
Arrow batch in a Python process, so splitting there costs one vectorised mask, and an epoch with
nothing offloaded costs nothing at all. A query's source is read twice, as two Spark streams over
the same offsets: the *local* stream keeps the records the plan leaves on the VMs and feeds Spark's
native operators; the *offload* stream sends the others, in chunks, through the VM agent to Lambda
workers and yields what the transient chain returns (output rows, or partial states). Both streams
take each offset's plan from the routing log, so together they see every record exactly once, on
every attempt.

Both streams also yield one heartbeat row per task (`_hb` true, the event-time column at the range's
last event time, or the end of the stream): a stream whose records all went the other way still
moves its watermark, so windows close on time whatever the share.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from core import atomic_write
from core.direct_sink import chunk_name
from core.errors import ConfigError
from core.nexmark.schema import END_OF_STREAM_TIME_US, ENTITIES, TIMESTAMP, schema_for
from core.offload_plan import key_groups_of, record_units
from router.keyed_route import RECEIPT_FIELDS, stash_chunks, with_groups

if TYPE_CHECKING:
    from core.file_schema import FileSchema
    from core.nexmark.generator import GeneratorConfig
    from lambda_worker.program import ProgramSpec
    from lambda_worker.transient import TransientProgram
    from router.client import AgentClient
    from router.routing_log import Segment

HEARTBEAT = "_hb"
LOCAL = "local"
OFFLOAD = "offload"
ROUTES = (LOCAL, OFFLOAD)
TASK_FAILURE_SALT = 0x5851F42D4C957F2D
COUNTS = "counts"  # beside a read source's routing log: what its VM read took and routed, per task


@dataclass(frozen=True)
class RouteOptions:
    """How one routed source stream reads: which share it keeps and where offloaded chunks go.

    `event_time` names the offload stream's column that carries event time (the heartbeat sets it;
    window_start for partial states); None when the chain's output drops it. With `direct_sink` the
    agent writes the chain's rows into its sink directory, the query's output (core/direct_sink.py),
    instead of returning them. `fail_share` and `fault_dir` inject task failures.
    """

    route: str
    offload_dir: Path
    program: str = ""
    agent: str = ""
    secret_file: str = ""
    event_time: str | None = None
    chunk_rows: int = 16_384
    parallelism: int = 4
    fail_share: float = 0.0
    fault_dir: str = ""
    request_timeout_s: float = 600.0
    direct_sink: bool = False
    keys: tuple[str, ...] = ()  # a stream feeding a keyed stage: its key columns; routed by key group

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> RouteOptions | None:
        route = opts.get("route", "none").strip().lower()
        if route == "none":
            return None
        if route not in ROUTES:
            raise ConfigError(f"unknown route {route!r}", hint=f"use one of none, {', '.join(ROUTES)}")
        if "offload_dir" not in opts:
            raise ConfigError("a routed nexmark source needs the offload_dir option")
        parsed = cls(
            route=route,
            offload_dir=Path(opts["offload_dir"]),
            program=opts.get("program", ""),
            agent=opts.get("agent", ""),
            secret_file=opts.get("secret_file", ""),
            event_time=opts.get("event_time") or None,
            chunk_rows=int(opts.get("chunk_rows", "16384")),
            parallelism=int(opts.get("parallelism", "4")),
            fail_share=float(opts.get("fail_share", "0")),
            fault_dir=opts.get("fault_dir", ""),
            direct_sink=opts.get("direct_sink", "") == "1",
            keys=tuple(k for k in opts.get("keys", "").split(",") if k),
        )
        if route == OFFLOAD and not (parsed.program and parsed.agent and parsed.secret_file):
            raise ConfigError("the offload route needs the program, agent and secret_file options")
        if parsed.chunk_rows <= 0 or parsed.parallelism <= 0:
            raise ConfigError("chunk_rows and parallelism must be positive")
        return parsed

    def spec(self) -> ProgramSpec:
        from lambda_worker.program import ProgramSpec

        return ProgramSpec.loads(self.program)

    def compiled(self) -> TransientProgram:
        return _compiled(self.program)


@lru_cache(maxsize=16)
def _compiled(program_json: str) -> TransientProgram:
    """Compiled once per program per Python worker process: every task of the run reuses it."""
    from lambda_worker.program import ProgramSpec

    return ProgramSpec.loads(program_json).compile()


# ---- schemas ------------------------------------------------------------------------------------


def _heartbeat_field() -> pa.Field:
    return pa.field(HEARTBEAT, pa.bool_())


def output_schema(records: pa.Schema, route: RouteOptions) -> pa.Schema:
    """The Arrow schema of a routed stream over `records` (a source's own schema): the records, or the
    chain's output; plus `_hb`."""
    if route.route == LOCAL:
        base = list(records)
    elif route.keys:
        base = list(RECEIPT_FIELDS)
    else:
        base = list(route.compiled().output_schema(sent_schema(records, route)))
    return pa.schema([*base, _heartbeat_field()])


def sent_columns(records: pa.Schema, route: RouteOptions) -> list[str]:
    """The record columns an offload route builds and sends: those its chain reads (all when the
    chain passes columns through, or reads one the source lacks, such as an upstream window)."""
    names = records.names
    reads = route.compiled().input_columns()
    return names if reads is None or not reads <= set(names) else [n for n in names if n in reads]


def sent_schema(records: pa.Schema, route: RouteOptions) -> pa.Schema:
    return pa.schema([records.field(n) for n in sent_columns(records, route)])


def heartbeat_batch(schema: pa.Schema, time_column: str | None, time_us: int) -> pa.RecordBatch:
    """One row: `_hb` true, `time_column` at `time_us`, everything else null."""
    columns = []
    for f in schema:
        if f.name == HEARTBEAT:
            columns.append(pa.array([True]))
        elif f.name == time_column:
            columns.append(pa.array([time_us], type=TIMESTAMP).cast(f.type))
        else:
            columns.append(pa.nulls(1, type=f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def with_heartbeat_column(table: pa.Table, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    body = pa.schema(list(schema)[:-1])
    table = table.select(body.names).cast(body)
    table = table.append_column(_heartbeat_field(), pa.nulls(table.num_rows, pa.bool_()))
    yield from table.combine_chunks().to_batches()


# ---- the two routes -----------------------------------------------------------------------------


def read_routed(
    config: GeneratorConfig,
    entity: str,
    route: RouteOptions,
    start: int,
    end: int,
    punctuate: bool,
    segments: tuple[Segment, ...],
    attempt: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batches of one routed source task over events [start, end); `attempt` is the Spark task's
    attempt number (None outside a Spark task), which injected task failures need."""
    from core.nexmark.generator import date_time_us, event_ids, generate_ids
    from router.routing_log import routed_mask

    schema = output_schema(schema_for(entity), route)
    stop = min(end, config.events)
    # Which records this route keeps depends on their offsets (and keys) alone: build only those.
    ids = event_ids(entity, start, stop)
    groups = None
    if route.keys:
        keys = pa.Table.from_batches([generate_ids(config, entity, ids, list(route.keys))])
        groups = key_groups_of(keys.select(list(route.keys)))
    keep = routed_mask(segments, ids, groups)
    if route.route == LOCAL:
        keep = ~keep
    if keep.any():
        columns = None if route.route == LOCAL else sent_columns(schema_for(entity), route)
        if route.keys and columns is not None:
            columns = [c for c in schema_for(entity).names if c in {*columns, *route.keys, "date_time"}]
        records = pa.Table.from_batches([generate_ids(config, entity, ids[keep], columns)])
        kept = groups[keep] if groups is not None else None
        yield from routed_batches(route, entity, start, end, records, kept, segments, schema, "date_time")
    maybe_fail(route, entity, start, attempt)
    time_column = _time_column(route, "date_time")
    if stop > start:
        last_us = int(date_time_us(config, np.array([stop - 1], dtype=np.int64))[0])
        yield heartbeat_batch(schema, time_column, last_us)
    if punctuate:
        yield heartbeat_batch(schema, time_column, END_OF_STREAM_TIME_US)


def route_records(
    route: RouteOptions,
    source: FileSchema,
    table: pa.Table,
    ids: np.ndarray,
    span: tuple[int, int],
    segments: tuple[Segment, ...],
    counts: Path | None,
    attempt: int | None,
) -> Iterator[pa.RecordBatch]:
    """The batches of one routed task over records that were read, not generated: a file (ADR 0037)
    or a shard's range of a Kinesis stream (ADR 0050). `table` holds the task's valid records,
    `ids` their routing units (a function of where they are in the input alone, so both reads split
    them alike on every attempt), `span` the task's units [start, end) and `segments` the plans
    routing them. Then the task's heartbeat at its last event time, so a stream whose records all
    went the other way still moves its watermark. The VM's read notes in `counts` how many records
    it read and how many went to the workers (the same on every replay); `attempt` is the Spark
    task's (injected task failures need it).
    """
    from router.routing_log import routed_mask

    schema = output_schema(source.arrow, route)
    groups = key_groups_of(table.select(list(route.keys))) if route.keys else None
    sent = routed_mask(segments, ids, groups)
    keep = ~sent if route.route == LOCAL else sent
    if route.route == LOCAL and counts is not None:
        note_counts(counts, span[0], table.num_rows, int(sent.sum()))
    if keep.any():
        records = table.filter(pa.array(keep))
        if route.route != LOCAL:
            wanted = {*sent_columns(source.arrow, route), *(route.keys and (*route.keys, source.event_time))}
            records = records.select([c for c in source.arrow.names if c in wanted])
        kept = groups[keep] if groups is not None else None
        yield from routed_batches(
            route, source.name, *span, records, kept, segments, schema, source.event_time
        )
    maybe_fail(route, source.name, span[0], attempt)
    if table.num_rows:
        last_us = int(np.max(table[source.event_time].cast(pa.int64()).to_numpy()))
        yield heartbeat_batch(schema, _time_column(route, source.event_time), last_us)


def end_of_stream(route: RouteOptions, source: FileSchema) -> pa.RecordBatch:
    """A routed read's end-of-stream punctuation: its heartbeat at the end of time."""
    schema = output_schema(source.arrow, route)
    return heartbeat_batch(schema, _time_column(route, source.event_time), END_OF_STREAM_TIME_US)


def _time_column(route: RouteOptions, event_time: str) -> str | None:
    """Where a route's rows carry event time: the records' own column, or the chain's output's."""
    return event_time if route.route == LOCAL else route.event_time


def note_counts(directory: Path, unit: int, rows: int, routed: int) -> None:
    """Record a task's valid records and how many went to the workers, by the task's first unit."""
    path = directory / f"{unit:09d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write.write_text(path, json.dumps({"rows": rows, "routed": routed}))


def routed_counts(offload_dir: Path, sources: Iterable[str]) -> tuple[int, int]:
    """The valid records of every task the sources' VM reads noted (in `counts/` directories of their
    routing logs, `OFFLOAD_DIR/<kind>/<source>/...`), and those routed to the workers.

    Read after a run stops: a task's counts are noted by the read of an epoch that has committed
    (a stopped run ends between epochs; a crashed one writes no summary)."""
    rows = routed = 0
    for source in sources:
        for path in offload_dir.glob(f"*/{source}/**/{COUNTS}/*.json"):
            counts = json.loads(path.read_text(encoding="utf-8"))
            rows, routed = rows + counts["rows"], routed + counts["routed"]
    return rows, routed


def routed_batches(
    route: RouteOptions,
    source: str,
    start: int,
    end: int,
    records: pa.Table,
    groups: np.ndarray | None,
    segments: tuple[Segment, ...],
    schema: pa.Schema,
    event_time: str,
) -> Iterator[pa.RecordBatch]:
    """The rows a route yields for the records it keeps of a task over [start, end) of `source`: the
    records themselves (local), the receipts of their stash (a keyed stage's input, by `groups`), or
    what the workers return; in the stream's `schema`, without heartbeats.

    One home for every kind of routed source: the generator's (offsets are events), and through
    `route_records` the file source's (offsets are files) and the Kinesis source's (offsets are
    records of a shard).
    """
    if route.route == LOCAL:
        tables = [records]
    elif groups is not None:
        tables = [_stash(route, source, start, end, with_groups(records, groups), event_time)]
    else:
        tables = _offload(route, source, start, end, records, segments)
    for table in tables:
        if table.num_rows:
            yield from with_heartbeat_column(table, schema)


# ---- talking to the agent -----------------------------------------------------------------------


def _client(route: RouteOptions) -> AgentClient:
    from router.client import shared_client

    return shared_client(route.agent, route.secret_file, route.request_timeout_s)


def _offload(
    route: RouteOptions,
    entity: str,
    start: int,
    end: int,
    records: pa.Table,
    segments: tuple[Segment, ...],
) -> list[pa.Table]:
    """Send the task's offloaded records in chunks, as many at a time as the plans have workers (at
    most `parallelism`); results in chunk order (empty when the agent writes them to the sink).

    A chunk is keyed by (range start, range end, sequence, program): a retried task asks for the
    same keys and gets the agent's cached answers.
    """
    spec = route.spec()
    client = _client(route)
    n = records.num_rows
    chunks = [records.slice(i, route.chunk_rows) for i in range(0, n, route.chunk_rows)]

    def one(seq: int) -> pa.Table:
        sink = chunk_name(entity, start, end, seq) if route.direct_sink else ""
        return client.offload(start, end, seq, spec, chunks[seq], sink_file=sink).table

    if len(chunks) == 1:
        return [one(0)]
    workers = max((seg.plan.workers for seg in segments if seg.plan.offloads), default=0) or route.parallelism
    lanes = max(1, min(route.parallelism, workers, len(chunks)))
    with ThreadPoolExecutor(lanes, thread_name_prefix="offload") as pool:
        return list(pool.map(one, range(len(chunks))))


def _stash(
    route: RouteOptions, entity: str, start: int, end: int, records: pa.Table, time_column: str
) -> pa.Table:
    """Keep a keyed stream's records at the agent, chunk by chunk; the receipts (router/keyed_route.py)."""
    client = _client(route)

    def stash(seq: int, chunk: pa.Table) -> None:
        client.stash(entity, start, end, seq, chunk)

    return stash_chunks(records, start, end, route.chunk_rows, route.parallelism, stash, time_column)


# ---- injected task failures ---------------------------------------------------------------------


def _name_salt(name: str) -> int:
    """A NEXMark entity's index (the salts task failures have always had), or a stable hash of a user's
    source's name."""
    if name in ENTITIES:
        return ENTITIES.index(name)
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def maybe_fail(route: RouteOptions, entity: str, start: int, attempt: int | None) -> None:
    """Fail the first attempt of a deterministic share of tasks (after their chunks were offloaded,
    so the retry exercises the agent's result cache)."""
    if route.fail_share <= 0 or attempt is None or attempt > 0:
        return
    salt = TASK_FAILURE_SALT + 2 * _name_salt(entity) + (route.route == OFFLOAD)
    if record_units(np.array([start ^ salt], dtype=np.int64))[0] >= route.fail_share:
        return
    if route.fault_dir:
        marker = Path(route.fault_dir) / f"task-failure-{entity}-{route.route}-{start}-{time.time_ns()}"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    raise RuntimeError(
        f"injected task failure ({entity} {route.route} events from {start}, pid {os.getpid()})"
    )
