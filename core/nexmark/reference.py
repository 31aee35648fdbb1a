"""Independent batch reference for NEXMark Q0-Q8: plain DuckDB SQL over person, auction and bid tables.

Why it exists: the streaming path lowers our own query API to Spark. If this reference reused any of
that code (window helpers, the query definitions, the lowering), a bug there would show up on both
sides of the comparison and cancel out. So every query here is written directly from
docs/queries.md as SQL, against nothing but the three event tables, and shares no code with
`core/nexmark/queries.py` or `core/spark`.

Window arithmetic is done on integer microseconds since the Unix epoch (`epoch_us`), never on
DuckDB's TIMESTAMPTZ calendar functions, so the session time zone cannot move a window boundary.
Window starts come back as naive timestamps (`make_timestamp(us)`) and are labelled UTC in Arrow,
and every result is cast to the exact output schema of docs/queries.md at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import ConfigError, InputError
from core.nexmark.params import QueryParams

if TYPE_CHECKING:  # the generator is imported lazily: computing over given tables must not need it
    from core.nexmark.generator import GeneratorConfig

QUERIES: tuple[str, ...] = ("q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8")

#: The defaults of docs/queries.md (W = 10 s, P = 2 s); QueryParams is frozen, so sharing it is safe.
DEFAULT_PARAMS = QueryParams()

_TS = pa.timestamp("us", tz="UTC")
_US_PER_S = 1_000_000

_WINDOW_FIELDS = [pa.field("window_start", _TS), pa.field("window_end", _TS)]

#: Exact output schema of every query (names, order and Arrow types), from docs/queries.md.
OUTPUT_SCHEMAS: dict[str, pa.Schema] = {
    "q0": pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("url", pa.string()),
            ("date_time", _TS),
            ("extra", pa.string()),
        ]
    ),
    "q1": pa.schema(
        [("auction", pa.int64()), ("bidder", pa.int64()), ("price", pa.float64()), ("date_time", _TS)]
    ),
    "q2": pa.schema([("auction", pa.int64()), ("price", pa.int64())]),
    "q3": pa.schema(
        [("name", pa.string()), ("city", pa.string()), ("state", pa.string()), ("id", pa.int64())]
    ),
    "q4": pa.schema([*_WINDOW_FIELDS, ("category", pa.int64()), ("avg_price", pa.float64())]),
    "q5": pa.schema([*_WINDOW_FIELDS, ("auction", pa.int64()), ("num_bids", pa.int64())]),
    "q6": pa.schema([("seller", pa.int64()), ("auction", pa.int64()), ("avg_price", pa.float64())]),
    "q7": pa.schema(
        [
            *_WINDOW_FIELDS,
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("date_time", _TS),
            ("extra", pa.string()),
        ]
    ),
    "q8": pa.schema([*_WINDOW_FIELDS, ("id", pa.int64()), ("name", pa.string())]),
}

#: Which event tables each query reads; only these must be passed to `compute_reference`.
INPUT_TABLES: dict[str, tuple[str, ...]] = {
    "q0": ("bid",),
    "q1": ("bid",),
    "q2": ("bid",),
    "q3": ("person", "auction"),
    "q4": ("auction", "bid"),
    "q5": ("bid",),
    "q6": ("auction", "bid"),
    "q7": ("bid",),
    "q8": ("person", "auction"),
}


def _check_query(query: str) -> str:
    """Normalise the name and reject unknown ones with a hint, so a typo on the CLI is one clear line."""
    name = query.strip().lower()
    if name not in QUERIES:
        raise ConfigError(f"unknown NEXMark query {query!r}", hint=f"valid queries: {', '.join(QUERIES)}")
    return name


def _floor(us: str, step: int) -> str:
    """SQL for `us` floored to a multiple of `step` (integers).

    DuckDB's `%` truncates toward zero (-7 % 3 = -1), so the remainder is made non-negative first;
    that keeps windows epoch-aligned for instants before 1970 too. `us` is parenthesised because it
    may be an expression such as `t - W`, and `%` binds tighter than `-`.
    """
    return f"(({us}) - (((({us}) % {step}) + {step}) % {step}))"


def _tumble(column: str, size: int) -> str:
    """SQL for the start (epoch microseconds) of the tumbling window [k*W, (k+1)*W) holding `column`."""
    return _floor(f"epoch_us({column})", size)


def _window_cols(start_us: str, size: int) -> str:
    """SQL for window_start/window_end as naive timestamps; UTC is attached in Arrow (see module doc)."""
    return f"make_timestamp({start_us}) AS window_start, make_timestamp({start_us} + {size}) AS window_end"


def winning_bids_sql() -> str:
    """CTEs used by Q4, Q6 and `winning_bids`: one row per auction with a winning bid (docs/queries.md).

    An auction's winning bid is the highest-priced bid for it with open <= bid time < expires and
    price >= reserve, the earliest on a price tie; auctions without such a bid have no row. Every
    auction closes: a bounded input ends with event time past every expiry.
    """
    return """
a AS (
    SELECT id, seller, category, reserve, date_time, expires, row_number() OVER () AS a_row
    FROM auction
    WHERE id IS NOT NULL AND date_time IS NOT NULL AND expires IS NOT NULL
),
candidates AS (
    SELECT a.a_row, a.id, a.seller, a.category, a.expires, b.price, b.date_time AS bid_time,
           row_number() OVER (PARTITION BY a.a_row ORDER BY b.price DESC, b.date_time ASC) AS rank
    FROM a
    JOIN bid AS b ON b.auction = a.id
    WHERE b.date_time >= a.date_time AND b.date_time < a.expires AND b.price >= a.reserve
),
winning AS (
    SELECT a_row, id, seller, category, expires, price, bid_time FROM candidates WHERE rank = 1
)"""


def _sliding_windows_sql(table: str, columns: str, time_us: str, size: int, slide: int) -> str:
    """SQL for `columns` of `table` once per sliding window holding instant `time_us`, as `ws`.

    An instant t is in every window [s, s + W) with s a multiple of P and t - W < s <= t: s runs from
    floor_P(t - W) + P to floor_P(t), one window per step of P.
    """
    first = f"{_floor(f'{time_us} - {size}', slide)} + {slide}"
    last = f"{_floor(time_us, slide)} + {slide}"
    return f"SELECT {columns}, unnest(range({first}, {last}, {slide})) AS ws FROM {table}"


def reference_sql(query: str, params: QueryParams = DEFAULT_PARAMS) -> str:
    """The DuckDB SQL of `query` with the window parameters filled in, over tables person/auction/bid.

    Returned as text so it can be printed, reviewed and run by hand against the same tables.
    """
    name = _check_query(query)
    size = params.window_size_s * _US_PER_S
    slide = params.window_slide_s * _US_PER_S

    if name == "q0":
        return "SELECT auction, bidder, price, channel, url, date_time, extra FROM bid"
    if name == "q1":
        return (
            "SELECT auction, bidder, CAST(price AS DOUBLE) * CAST(0.908 AS DOUBLE) AS price, date_time\n"
            "FROM bid"
        )
    if name == "q2":
        return "SELECT auction, price FROM bid WHERE auction % 123 = 0"
    if name == "q3":
        return (
            "SELECT p.name, p.city, p.state, a.id\n"
            "FROM auction AS a\n"
            "JOIN person AS p ON a.seller = p.id\n"
            "WHERE p.state IN ('OR', 'ID', 'CA') AND a.category = 10"
        )
    if name == "q4":
        return f"""WITH {winning_bids_sql()},
closed AS (
    {_sliding_windows_sql("winning", "category, price", "epoch_us(expires)", size, slide)}
)
SELECT {_window_cols("ws", size)}, category, avg(price) AS avg_price
FROM closed
GROUP BY ws, category"""
    if name == "q5":
        return f"""WITH b AS (
    SELECT auction, epoch_us(date_time) AS t FROM bid WHERE date_time IS NOT NULL
),
bw AS (
    {_sliding_windows_sql("b", "auction", "t", size, slide)}
),
counts AS (
    SELECT ws, auction, count(*) AS num_bids FROM bw GROUP BY ws, auction
),
ranked AS (
    SELECT ws, auction, num_bids, max(num_bids) OVER (PARTITION BY ws) AS top FROM counts
)
SELECT {_window_cols("ws", size)}, auction, num_bids
FROM ranked
WHERE num_bids = top"""
    if name == "q6":
        # Each winning bid, at its auction's close, averaged with the seller's other winning bids of
        # auctions closed by then: the 10 latest by bid time (then auction id), itself included.
        return f"""WITH {winning_bids_sql()},
latest AS (
    SELECT r.a_row, r.seller, r.id AS auction, o.price,
           row_number() OVER (PARTITION BY r.a_row ORDER BY o.bid_time DESC, o.id DESC) AS rank
    FROM winning AS r
    JOIN winning AS o ON o.seller IS NOT DISTINCT FROM r.seller AND o.expires <= r.expires
)
SELECT seller, auction, avg(price) AS avg_price
FROM latest
WHERE rank <= 10
GROUP BY a_row, seller, auction"""
    if name == "q7":
        return f"""WITH b AS (
    SELECT auction, bidder, price, date_time, extra, {_tumble("date_time", size)} AS ws
    FROM bid
    WHERE date_time IS NOT NULL
),
top AS (
    SELECT ws, max(price) AS price FROM b GROUP BY ws
)
SELECT {_window_cols("b.ws", size)}, b.auction, b.bidder, b.price, b.date_time, b.extra
FROM b
JOIN top ON b.ws = top.ws AND b.price = top.price"""
    # q8
    return f"""WITH p AS (
    SELECT id, name, {_tumble("date_time", size)} AS ws FROM person WHERE date_time IS NOT NULL
),
a AS (
    SELECT DISTINCT seller, {_tumble("date_time", size)} AS ws FROM auction WHERE date_time IS NOT NULL
)
SELECT DISTINCT {_window_cols("p.ws", size)}, p.id, p.name
FROM p
JOIN a ON a.seller = p.id AND a.ws = p.ws"""


def _conform(result: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast DuckDB's output to the documented schema.

    DuckDB labels TIMESTAMPTZ with the session zone (e.g. `Etc/UTC`) and naive window bounds have no
    zone at all; both hold UTC instants, so relabelling to `UTC` does not change a value.
    """
    if result.column_names != schema.names:
        raise AssertionError(f"reference SQL produced {result.column_names}, expected {schema.names}")
    # Arrow casts naive -> UTC and zone -> zone without touching the stored UTC microseconds.
    columns = [column.cast(field.type) for column, field in zip(result.columns, schema, strict=True)]
    return pa.Table.from_arrays(columns, schema=schema)


def winning_bids(tables: Mapping[str, pa.Table]) -> pa.Table:
    """Every auction's winning bid over `tables`' auctions and bids: id, seller, expires, price,
    bid_time (for figures that count what Q4's and Q6's state must hold at a moment)."""
    return _run_sql(
        f"WITH {winning_bids_sql()} SELECT id, seller, expires, price, bid_time FROM winning",
        {t: tables[t] for t in ("auction", "bid")},
    )


def _run_sql(sql: str, tables: Mapping[str, pa.Table | pa.RecordBatch]) -> pa.Table:
    """`sql` over `tables` registered by name in a fresh DuckDB in UTC."""
    import duckdb  # local: importing core.nexmark must stay cheap for the CLI

    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        for name, data in tables.items():
            con.register(name, pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def compute_reference(
    query: str, tables: Mapping[str, pa.Table], params: QueryParams = DEFAULT_PARAMS
) -> pa.Table:
    """Run `query` over `tables` ({"person", "auction", "bid"} -> Arrow table) in a fresh DuckDB.

    Only the tables the query reads are required. Extra columns (event_id, arrival_time) are ignored.
    """
    name = _check_query(query)
    missing = [t for t in INPUT_TABLES[name] if t not in tables]
    if missing:
        raise InputError(
            f"{name} needs the event tables {', '.join(INPUT_TABLES[name])}; missing {', '.join(missing)}",
            hint="pass a dict with keys person, auction and bid",
        )
    result = _run_sql(reference_sql(name, params), {t: tables[t] for t in INPUT_TABLES[name]})
    return _conform(result, OUTPUT_SCHEMAS[name])


def generate_tables(config: GeneratorConfig) -> dict[str, pa.Table]:
    """All events of `config` as one Arrow table per entity, from the generator (imported lazily)."""
    from core.nexmark.generator import iter_batches
    from core.nexmark.schema import schema_for

    tables = {}
    for entity in ("person", "auction", "bid"):
        batches = list(iter_batches(config, entity))
        tables[entity] = pa.Table.from_batches(batches) if batches else schema_for(entity).empty_table()
    return tables


def reference_for(query: str, config: GeneratorConfig, params: QueryParams = DEFAULT_PARAMS) -> pa.Table:
    """Generate the events of `config` and compute the reference result of `query` over them."""
    name = _check_query(query)
    return compute_reference(name, generate_tables(config), params)


def write_reference(
    query: str, config: GeneratorConfig, params: QueryParams, out_dir: str | Path
) -> dict[str, object]:
    """Write the reference result to `out_dir/part-00000.parquet` plus `out_dir/summary.json`.

    The summary holds {"query", "records_in", "records_out", "wall_s"}: records_in counts every
    generated event (all entities), wall_s covers generation and query. Returns the summary.
    """
    name = _check_query(query)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tables = generate_tables(config)
    result = compute_reference(name, tables, params)
    wall_s = time.perf_counter() - started
    pq.write_table(result, out / "part-00000.parquet")
    summary: dict[str, object] = {
        "query": name,
        "records_in": sum(t.num_rows for t in tables.values()),
        "records_out": result.num_rows,
        "wall_s": round(wall_s, 6),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
