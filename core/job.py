"""A user's own job: sources with their own schema, a pipeline written with the query builder, a sink.

    from core.job import Job, WindowSpec, agg, col

    job = Job("page_views")
    views = job.source("view", {"user": "int64", "page": "string", "at": "timestamp"}, event_time="at")
    views.key_by("page").window_aggregate(WindowSpec(10, 2, on="at"), views=agg("count")).sink()

A job file is plain Python. `sponge compile FILE.py:job` imports the file and reads the `Job` that
`job` names. Why a Python file and not a config format: the query builder already checks every
column, type and operator as each line runs. So a misspelt column fails on the line that names it,
with the columns that exist, before Spark or any worker starts. A config format would need a second
checker to say as much.

The NEXMark queries are built-in jobs: wherever a job is asked for, `q0`..`q8` name them (`load`).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path

from core.errors import ConfigError, PlanError
from core.expr import DType, col, lit
from core.file_schema import FORMATS, KINDS, FileSchema
from core.nexmark.params import QueryParams
from core.plan import LogicalPlan, WindowSpec
from core.query import QueryBuilder, Stream, agg

__all__ = ["Job", "WindowSpec", "agg", "col", "lit", "load", "write_source_file"]


class Job:
    """A streaming job: `source` its inputs, build the pipeline on the streams it returns, end it in
    `.sink()`. `plan()` is what the compiler, Spark and the workers run."""

    def __init__(self, name: str) -> None:
        if not name or not name.replace("_", "").isalnum():
            raise PlanError(f"a job's name is letters, digits and _, got {name!r}")
        self.name = name
        self.sources: dict[str, FileSchema] = {}  # by name: each source's records, as its files hold them
        self._builder = QueryBuilder(name)
        self._fixed: LogicalPlan | None = None  # a built-in job's plan, built by its own builder

    def source(
        self, name: str, columns: Mapping[str, DType | str], *, event_time: str, format: str = "jsonl"
    ) -> Stream:
        """A stream of the records of source `name`: `columns` maps each column to its type (int64,
        float64, string, bool, timestamp); `event_time` names the timestamp column it is ordered by;
        `format` is its files' format, "jsonl" (INPUT/NAME/*.jsonl) or "parquet" (INPUT/NAME/*.parquet)."""
        if format not in FORMATS:
            raise ConfigError(
                f"source {name!r} has unknown file format {format!r}", hint=f"known: {', '.join(FORMATS)}"
            )
        if name in self.sources:
            raise PlanError(f"job {self.name!r} has a source {name!r} already")
        if not name.isidentifier() or not name.islower():
            raise PlanError(f"a source's name is a lower-case identifier, got {name!r}")
        typed = {c: _dtype(c, t) for c, t in columns.items()}
        if not typed:
            raise PlanError(f"source {name!r} has no columns")
        if typed.get(event_time) is not DType.TIMESTAMP:
            timestamps = [c for c, t in typed.items() if t is DType.TIMESTAMP]
            raise PlanError(
                f"source {name!r}: event_time {event_time!r} is not one of its timestamp columns",
                hint=f"its timestamp columns: {', '.join(timestamps) or 'none (add one)'}",
            )
        self.sources[name] = FileSchema(
            name, tuple((c, t.value) for c, t in typed.items()), event_time, format=format
        )
        return self._builder.source(name, typed)

    def plan(self) -> LogicalPlan:
        return self._fixed or self._builder.build()


def _dtype(column: str, t: DType | str) -> DType:
    readable = list(KINDS)  # the types a file's column can hold
    if isinstance(t, DType) and t.value in readable:
        return t
    if isinstance(t, str) and t in readable:
        return DType(t)
    raise PlanError(f"column {column!r} has unknown type {t!r}", hint=f"known: {', '.join(readable)}")


def write_source_file(
    input_dir: str | Path,
    source: str,
    part: int,
    rows: Iterable[Mapping[str, object]],
    *,
    format: str = "jsonl",
) -> Path:
    """Write `rows` as INPUT_DIR/SOURCE/part-NNNNN.jsonl (or .parquet), whole: under a hidden name first,
    then renamed (core/atomic_write.py), so a run reading the directory never sees half a file. For a
    job's own data generators. In JSON lines a datetime is written in ISO-8601; in Parquet each
    column's type is inferred from its values (Python ints int64, floats float64, datetimes timestamps:
    give them a timezone, since a reader takes a timestamp without one as UTC)."""
    import json
    from datetime import datetime

    from core import atomic_write

    if format not in FORMATS:
        raise ConfigError(f"unknown file format {format!r}", hint=f"known: {', '.join(FORMATS)}")
    final = Path(input_dir) / source / f"part-{part:05d}{FORMATS[format]}"
    if format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(list(rows))
        atomic_write.write_atomically(final, lambda tmp: pq.write_table(table, tmp))
        return final

    def plain(value: object) -> object:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"no JSON form for {value!r}")

    atomic_write.write_text(final, "".join(json.dumps(r, default=plain) + "\n" for r in rows))
    return final


# ---- finding a job --------------------------------------------------------------------------------


def is_file_ref(ref: str) -> bool:
    """`ref` names a job file (`FILE.py:NAME` or `FILE.py`), not a built-in query."""
    return ":" in ref or ref.endswith(".py")


def canonical_ref(ref: str) -> str:
    """`ref` as a resumed run compares it: a job file's absolute path and its NAME (NAME defaults to
    `job`), so `examples/x.py` and `/home/me/examples/x.py:job` are the same job; a query as it is."""
    if not is_file_ref(ref):
        return ref
    path_text, _, attr = ref.rpartition(":") if ":" in ref else (ref, ":", "job")
    return f"{Path(path_text).resolve()}:{attr}"


def load(ref: str, params: QueryParams | None = None) -> Job:
    """The job `ref` names: `FILE.py:NAME` (the `Job` a file defines as NAME), or a built-in query
    with its window parameters `params` (a job file sets its own windows in its code)."""
    if not is_file_ref(ref):
        return _built_in(ref, params)
    path_text, _, attr = ref.rpartition(":") if ":" in ref else (ref, ":", "job")
    path = Path(path_text)
    if path.suffix != ".py" or not path.is_file():
        raise ConfigError(
            f"no job file {path_text!r}", hint="name a Python file and its job: path/to/file.py:job"
        )
    module = _import(path)
    job = getattr(module, attr, None)
    if not isinstance(job, Job):
        jobs = [name for name, v in vars(module).items() if isinstance(v, Job)]
        found = f"it defines {', '.join(jobs)}" if jobs else "it defines no Job"
        raise ConfigError(f"{path} has no Job named {attr!r}", hint=f"{found}; name one after the ':'")
    job.plan()  # a job without a sink fails here, naming the job
    return job


def _import(path: Path) -> object:
    """The job file run as a module of its own. A PlanError or ConfigError it raises is the user's
    mistake and passes as it is, with the file's line; any other failure is said in one line with its
    place."""
    name = f"sponge_job_{abs(hash(path.resolve()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (PlanError, ConfigError) as e:  # ours, raised on the user's line: keep its hint
        raise type(e)(f"{_where(e, path)}{e.message}", hint=e.hint) from None
    except Exception as e:  # the user's own code: say where, not a traceback of ours
        raise ConfigError(
            f"{_where(e, path)}{type(e).__name__}: {e}", hint=f"fix {path.name}, then run the command again"
        ) from None
    finally:
        sys.modules.pop(name, None)
    return module


def _where(e: BaseException, path: Path) -> str:
    if isinstance(e, SyntaxError) and e.lineno:
        return f"{path}:{e.lineno}: "
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path.resolve()
    ]
    return f"{path}:{frames[-1].lineno}: " if frames else f"{path}: "


def _built_in(name: str, params: QueryParams | None) -> Job:
    """A NEXMark query as a job: its sources are the generator's entities, ordered by date_time."""
    from core.nexmark.queries import get_query
    from core.plan import Source

    plan = get_query(name).plan(params)
    job = Job(plan.name)
    job._fixed = plan
    for node in plan.nodes:
        if isinstance(node.op, Source):
            job.sources[node.op.entity] = FileSchema.nexmark(node.op.entity)
    return job
