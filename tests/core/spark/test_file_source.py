"""The "nexmark-files" source: JSONL events read like the generator's, bad lines to dead letters.

Validation, offsets, partition reads and dead-letter files are tested without a JVM; the rest runs
real Spark queries, including a windowed count over dirty input and a batch replayed from a checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from core.errors import ConfigError, InputError
from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.jsonl import jsonl_bytes, write_jsonl_events
from core.nexmark.schema import END_OF_STREAM_TIME_US, ENTITIES, schema_for
from core.spark.file_source import (
    FileBatchReader,
    FilePartition,
    FileSourceOptions,
    FileStreamReader,
    bounded_end_offset,
    list_files,
    read_partition,
    register,
    require_entity_dirs,
)
from core.spark.input_validation import (
    RecordError,
    dead_letter_file,
    dead_letter_summary,
    parse_record,
    read_file,
    reason_kind,
)
from core.spark.source import end_of_stream_batch
from router.source_router import routed_counts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

BID = {
    "auction": 1000,
    "bidder": 1001,
    "price": 250,
    "channel": "Google",
    "url": "https://example.com/item?id=1",
    "date_time": "2026-01-01T00:00:00.000100Z",
    "extra": "",
}
BID_US = 1_767_225_600_000_100


def _line(**changes: Any) -> str:
    """BID with `changes` applied; a value of ... deletes the key."""
    record = {**BID, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...})


def _end_of_stream() -> Any:
    return F.lit("2100-01-01").cast("timestamp")


# ---------------------------------------------------------------------------------------------
# Line validation, without Spark


def test_valid_line_becomes_a_row_in_schema_order() -> None:
    row = (1000, 1001, 250, "Google", "https://example.com/item?id=1", BID_US, "")
    assert parse_record(_line(), "bid") == row


@pytest.mark.parametrize(
    ("date_time", "micros"),
    [
        ("2026-01-01T00:00:00.000100Z", BID_US),
        ("2026-01-01T02:00:00.000100+02:00", BID_US),
        ("2026-01-01 00:00:00.000100+00:00", BID_US),
        ("2026-01-01T00:00:00.0001009Z", BID_US),  # past the microsecond: truncated
        (BID_US, BID_US),
        (0, 0),
    ],
)
def test_timestamps_are_iso_with_a_zone_or_epoch_micros(date_time: Any, micros: int) -> None:
    assert parse_record(_line(date_time=date_time), "bid")[5] == micros


def test_nullable_strings_extra_keys_and_bytes_are_accepted() -> None:
    assert parse_record(_line(channel=None, extra=None, note="ignored"), "bid")[3::3] == (None, None)
    assert parse_record(_line().encode(), "bid")[2] == 250


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_line(price=...), "missing field 'price'"),
        (_line(extra=...), "missing field 'extra'"),
        (_line(price="12"), "field 'price': expected int64, got string"),
        (_line(price=12.5), "field 'price': expected int64, got number"),
        (_line(price=True), "field 'price': expected int64, got boolean"),
        (_line(auction=[1]), "field 'auction': expected int64, got array"),
        (_line(price=-5), "field 'price': must be >= 0, got -5"),
        (_line(bidder=-1), "field 'bidder': must be >= 0, got -1"),
        (_line(price=2**63), f"field 'price': {2**63} is out of the int64 range"),
        (_line(auction=None), "field 'auction': must not be null"),
        (_line(date_time=None), "field 'date_time': must not be null"),
        (_line(channel=7), "field 'channel': expected string, got integer"),
        (_line(date_time="yesterday"), "field 'date_time': not an ISO-8601 timestamp: 'yesterday'"),
        (
            _line(date_time="2026-01-01T00:00:00"),
            "field 'date_time': timestamp without a timezone: '2026-01-01T00:00:00'",
        ),
        (
            _line(date_time=1.5),
            "field 'date_time': expected timestamp (ISO-8601 string or epoch microseconds), got number",
        ),
        (
            _line(date_time="2100-01-01T00:00:00Z"),
            "field 'date_time': at or after the end-of-stream time 2100-01-01T00:00:00Z",
        ),
        (
            _line(date_time=END_OF_STREAM_TIME_US),
            "field 'date_time': at or after the end-of-stream time 2100-01-01T00:00:00Z",
        ),
        ("[1, 2]", "malformed json: expected an object, got array"),
        ("null", "malformed json: expected an object, got null"),
        ('{"auction": 1000, "bidder": ', "malformed json: Expecting value: line 1 column 29 (char 28)"),
        (b'{"url": "\xff"}', "malformed json: invalid utf-8 (invalid start byte at byte 9)"),
    ],
)
def test_bad_lines_get_one_stable_reason(line: str | bytes, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        parse_record(line, "bid")
    assert info.value.reason == reason


def test_first_problem_in_column_order_wins() -> None:
    with pytest.raises(RecordError, match=r"^missing field 'bidder'$"):
        parse_record(_line(bidder=..., price=-1, date_time=None), "bid")


def test_other_entities_validate_their_own_columns() -> None:
    person = generate(GeneratorConfig(seed=1, events=100), "person", 0, 100)
    for line, row in zip(jsonl_bytes(person).splitlines(), person.to_pylist(), strict=True):
        values = parse_record(line, "person")
        assert values[0] == row["id"] and values[1] == row["name"]
    with pytest.raises(RecordError, match=r"^missing field 'id'$"):
        parse_record(_line(), "person")  # a bid in the person directory
    auction_rows = jsonl_bytes(generate(GeneratorConfig(seed=1, events=10), "auction", 0, 10))
    auction = json.loads(auction_rows.splitlines()[0])
    with pytest.raises(RecordError, match=r"^field 'expires': must not be null$"):
        parse_record(json.dumps({**auction, "expires": None}), "auction")


def test_reason_kind_is_the_part_before_the_colon() -> None:
    assert reason_kind("malformed json: Expecting value: line 1") == "malformed json"
    assert reason_kind("missing field 'price'") == "missing field 'price'"
    assert reason_kind("field 'price': must be >= 0, got -5") == "field 'price'"


# ---------------------------------------------------------------------------------------------
# Files, partitions and dead letters, without Spark


def test_write_jsonl_events_round_trips_through_read_file(tmp_path: Path) -> None:
    config = GeneratorConfig(seed=4, events=3000)
    (tmp_path / "bid").mkdir()
    (tmp_path / "bid" / "part-00009.jsonl").write_text("stale\n")
    counts = write_jsonl_events(config, tmp_path, files_per_entity=3)
    assert counts == {"person": 60, "auction": 180, "bid": 2760}
    for entity in ENTITIES:
        files = list_files(tmp_path / entity, ".jsonl")
        assert [Path(f).name for f in files] == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
        batches = [b for f in files for b in read_file(f, entity, tmp_path / "dl", batch_rows=500)]
        assert all(b.schema == schema_for(entity) for b in batches)
        expected = pa.Table.from_batches([generate(config, entity, 0, 3000)])
        assert pa.Table.from_batches(batches).equals(expected)
    assert dead_letter_summary(tmp_path / "dl") == {"count": 0, "by_reason": {}}
    first_auctions = (tmp_path / "auction" / "part-00000.jsonl").read_bytes()
    assert b'"date_time":"2026-01-01T00:00:00.000100Z"' in first_auctions


def test_write_jsonl_events_makes_every_file_even_when_empty(tmp_path: Path) -> None:
    assert write_jsonl_events(GeneratorConfig(seed=0, events=3), tmp_path, files_per_entity=2) == {
        "person": 1,
        "auction": 2,
        "bid": 0,
    }
    assert [p.stat().st_size == 0 for p in sorted((tmp_path / "bid").iterdir())] == [True, True]
    with pytest.raises(ConfigError):
        write_jsonl_events(GeneratorConfig(seed=0, events=3), tmp_path, files_per_entity=0)


def test_list_files_skips_hidden_temporary_and_other_files(tmp_path: Path) -> None:
    for name in ("b.jsonl", "a.jsonl", ".a.jsonl.tmp", "_x.jsonl", ".y.jsonl", "c.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "d.jsonl").mkdir()
    assert [Path(f).name for f in list_files(tmp_path, ".jsonl")] == ["a.jsonl", "b.jsonl"]
    assert list_files(tmp_path / "missing", ".jsonl") == []


def _dirty_file(path: Path) -> list[tuple[int, str]]:
    """Write a bid file with good and bad lines; return the (line, reason) pairs it should yield."""
    lines = [
        _line(),
        "",
        '{"auction": 1000,',
        _line(price=...),
        _line(date_time=BID_US + 1, note="extra keys are fine"),
        "   ",
        _line(price=-3),
    ]
    path.write_text("\n".join(lines) + "\n")
    return [
        (3, "malformed json: Expecting property name enclosed in double quotes: line 1 column 18 (char 17)"),
        (4, "missing field 'price'"),
        (7, "field 'price': must be >= 0, got -3"),
    ]


def test_read_file_sends_bad_lines_to_a_dead_letter_file(tmp_path: Path) -> None:
    source = tmp_path / "in" / "part-00003.jsonl"
    source.parent.mkdir()
    expected = _dirty_file(source)
    batches = list(read_file(source, "bid", tmp_path / "dl"))
    times = [row["date_time"].timestamp() * 1e6 for b in batches for row in b.to_pylist()]
    assert times == [BID_US, BID_US + 1]
    target = dead_letter_file(tmp_path / "dl", "bid", source)
    assert target == tmp_path / "dl" / "bid" / "part-00003.jsonl"
    letters = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(d["line"], d["reason"]) for d in letters] == expected
    assert {d["file"] for d in letters} == {str(source)}
    assert letters[1]["record"] == _line(price=...)
    assert dead_letter_summary(tmp_path / "dl") == {
        "count": 3,
        "by_reason": {"field 'price'": 1, "malformed json": 1, "missing field 'price'": 1},
    }
    # A replayed partition replaces its dead letters (a new inode, same content) instead of appending.
    before, inode = target.read_bytes(), target.stat().st_ino
    list(read_file(source, "bid", tmp_path / "dl"))
    assert target.read_bytes() == before and target.stat().st_ino != inode
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left
    # A consumer that stops early writes nothing; a fixed input removes the stale dead letters.
    target.unlink()
    next(iter(read_file(source, "bid", tmp_path / "dl", batch_rows=1)))
    assert not target.exists()
    list(read_file(source, "bid", tmp_path / "dl"))
    source.write_text(_line() + "\n")
    assert len(list(read_file(source, "bid", tmp_path / "dl"))) == 1
    assert not target.exists()
    assert dead_letter_summary(tmp_path / "nothing") == {"count": 0, "by_reason": {}}


def test_read_partition_adds_the_punctuation_and_ignores_placeholders(tmp_path: Path) -> None:
    source = tmp_path / "bid" / "a.jsonl"
    source.parent.mkdir()
    source.write_text(_line() + "\n")
    opts = FileSourceOptions.parse({"path": str(tmp_path), "entity": "bid"})
    assert opts.dead_letter == str(tmp_path / "_dead_letter")
    batches = list(read_partition(opts, FilePartition(None, punctuate=True)))
    assert len(batches) == 1 and batches[0].equals(end_of_stream_batch("bid"))
    assert len(list(read_partition(opts, FilePartition(str(source), punctuate=True)))) == 2
    assert list(read_partition(opts, InputPartition(None))) == []
    with pytest.raises(InputError, match="disappeared"):
        list(read_partition(opts, FilePartition(str(tmp_path / "bid" / "gone.jsonl"))))


def test_options_defaults_and_errors(tmp_path: Path) -> None:
    opts = FileSourceOptions.parse({"PATH": "/data", "Entity": "Auction", "dead_letter": "/dl"})
    assert (opts.path, opts.entity, opts.dead_letter, opts.bounded, opts.max_files_per_batch) == (
        "/data",
        "auction",
        "/dl",
        True,
        64,
    )
    assert not FileSourceOptions.parse({"path": "/d", "entity": "bid", "bounded": "FALSE"}).bounded
    for bad in (
        {"entity": "bid"},
        {"path": "/d"},
        {"path": "/d", "entity": "seller"},
        {"path": "/d", "entity": "bid", "bounded": "yes"},
        {"path": "/d", "entity": "bid", "max_files_per_batch": "0"},
        {"path": "/d", "entity": "bid", "max_files_per_batch": "many"},
    ):
        with pytest.raises(ConfigError) as info:
            FileSourceOptions.parse(bad)
        assert info.value.hint
    missing = FileSourceOptions.parse({"path": str(tmp_path), "entity": "bid"})
    with pytest.raises(InputError, match="no bid directory"):
        FileStreamReader(missing)
    with pytest.raises(InputError, match="no bid directory"):
        FileBatchReader(missing)
    (tmp_path / "bid").mkdir()
    require_entity_dirs(tmp_path, ["bid", "bid"])
    with pytest.raises(InputError, match="has no person, auction directories") as info:
        require_entity_dirs(tmp_path, ["person", "auction", "bid"])
    assert "person/*.jsonl" in info.value.hint


def _files(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text(_line() + "\n")


def _names(parts: list[InputPartition]) -> list[str | None]:
    return [Path(p.path).name if p.path else ("EOS" if p.punctuate else None) for p in parts]  # type: ignore[attr-defined]


def test_bounded_offsets_end_with_the_punctuation_position(tmp_path: Path) -> None:
    _files(tmp_path / "bid", "p0.jsonl", "p1.jsonl", "p2.jsonl")
    reader = FileStreamReader(
        FileSourceOptions.parse({"path": str(tmp_path), "entity": "bid", "max_files_per_batch": "2"})
    )
    assert reader.initialOffset() == {"files": 0, "source": "bid"}
    offsets, start = [], reader.initialOffset()
    for _ in range(4):
        start = reader.latestOffset(start, ReadAllAvailable())
        offsets.append(start["files"])
    assert offsets == [2, 4, 4, 4]
    assert reader.reportLatestOffset() == {"files": 4, "source": "bid"}
    assert bounded_end_offset(tmp_path, "bid") == 4
    assert reader.latestOffset({"files": 0}, ReadMaxFiles(1)) == {"files": 1, "source": "bid"}
    assert _names(reader.partitions({"files": 0}, {"files": 2})) == ["p0.jsonl", "p1.jsonl"]
    assert _names(reader.partitions({"files": 2}, {"files": 4})) == ["p2.jsonl", "EOS"]
    assert reader.partitions({"files": 4}, {"files": 4}) == []
    # Files arriving later are not part of a bounded stream.
    _files(tmp_path / "bid", "p3.jsonl")
    assert reader.latestOffset({"files": 4}, ReadAllAvailable()) == {"files": 4, "source": "bid"}
    # A checkpoint further than the directory reaches cannot be mapped back onto files.
    with pytest.raises(InputError, match="the checkpoint says 6 bid files"):
        reader.partitions({"files": 4}, {"files": 6})


def test_unbounded_offsets_follow_new_files_and_never_punctuate(tmp_path: Path) -> None:
    opts = FileSourceOptions.parse({"path": str(tmp_path), "entity": "bid", "bounded": "false"})
    reader = FileStreamReader(opts)  # the directory may appear later
    assert reader.latestOffset({"files": 0}, ReadAllAvailable()) == {"files": 0, "source": "bid"}
    _files(tmp_path / "bid", "p1.jsonl", "p2.jsonl")
    assert reader.latestOffset({"files": 0}, ReadAllAvailable()) == {"files": 2, "source": "bid"}
    _files(tmp_path / "bid", "p0.jsonl", "p3.jsonl")  # p0 sorts first but arrived late: read after
    assert reader.latestOffset({"files": 2}, ReadAllAvailable()) == {"files": 4, "source": "bid"}
    names = _names(reader.partitions({"files": 0}, {"files": 4}))
    assert names == ["p1.jsonl", "p2.jsonl", "p0.jsonl", "p3.jsonl"]
    reader.prepareForTriggerAvailableNow()
    _files(tmp_path / "bid", "p4.jsonl")
    assert reader.latestOffset({"files": 4}, ReadAllAvailable()) == {"files": 4, "source": "bid"}


# ---------------------------------------------------------------------------------------------
# Real Spark queries


def _utc_rows(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, timestamps zoned UTC like the generator's, sorted by event time (unique per event)."""
    table = df.toArrow()
    table = table.cast(
        pa.schema(
            [
                f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                for f in table.schema
            ]
        )
    )
    return sorted(table.to_pylist(), key=lambda row: row["date_time"])


def _await(query: StreamingQuery, done: Callable[[dict[str, Any]], bool], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise AssertionError(str(query.exception()))
            progress = query.lastProgress
            if progress is not None and done(progress):
                return
            time.sleep(0.1)
        raise AssertionError(f"stream did not finish in {timeout_s}s; last progress {query.lastProgress}")
    finally:
        query.stop()


def _files_at(progress: dict[str, Any]) -> int:
    raw = progress["sources"][0]["endOffset"]
    return int(json.loads(raw)["files"]) if raw else 0


def _lowering_filter(df: DataFrame) -> DataFrame:
    """core/spark/streams.py's nexmark_sources: watermark first, then drop the punctuation."""
    alive = F.col("date_time") < _end_of_stream()
    df = df.withWatermark("date_time", "0 seconds")
    return df.select(
        *[F.col(c) if c == "date_time" else F.when(alive, F.col(c)).alias(c) for c in df.columns]
    ).filter(alive)


@pytest.fixture(scope="module")
def events_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jsonl")
    write_jsonl_events(GeneratorConfig(seed=5, events=5000), out, files_per_entity=4)
    return out


@pytest.mark.spark
@pytest.mark.parametrize("entity", ENTITIES)
def test_stream_read_equals_generate_plus_punctuation(
    spark: SparkSession, events_dir: Path, entity: str, tmp_path: Path
) -> None:
    register(spark)
    expected = generate(GeneratorConfig(seed=5, events=5000), entity, 0, 5000).to_pylist()

    def stream() -> DataFrame:
        return (
            spark.readStream.format("nexmark-files")
            .option("entity", entity)
            .option("dead_letter", str(tmp_path / "dl"))
            .option("max_files_per_batch", "3")
            .load(str(events_dir))
        )

    raw_name, lowered_name = f"files_raw_{entity}", f"files_lowered_{entity}"
    raw = stream().writeStream.format("memory").queryName(raw_name).trigger(processingTime="100 milliseconds")
    _await(raw.start(), lambda p: _files_at(p) == 5)
    out = spark.table(raw_name)
    punctuation = out.filter(F.col("date_time") >= _end_of_stream()).collect()
    assert len(punctuation) == 1
    row = punctuation[0].asDict()
    assert row.pop("date_time").timestamp() == END_OF_STREAM_TIME_US / 1e6
    assert set(row.values()) == {None}
    assert _utc_rows(out.filter(F.col("date_time") < _end_of_stream())) == expected

    lowered = _lowering_filter(stream()).writeStream.format("memory").queryName(lowered_name)
    query = lowered.trigger(processingTime="100 milliseconds").start()
    _await(query, lambda p: _files_at(p) == 5)
    per_file = [_file_rows(Path(f)) for f in list_files(events_dir / entity, ".jsonl")]
    # Three files, then the last file and the punctuation (max_files_per_batch = 3).
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [
        sum(per_file[:3]),
        per_file[3] + 1,
    ]
    assert _utc_rows(spark.table(lowered_name)) == expected
    assert dead_letter_summary(tmp_path / "dl")["count"] == 0


def _file_rows(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


@pytest.mark.spark
def test_batch_read_has_one_partition_per_file_and_no_punctuation(
    spark: SparkSession, events_dir: Path
) -> None:
    register(spark)
    df = (
        spark.read.format("nexmark-files")
        .option("path", str(events_dir))
        .option("entity", "auction")
        .option("dead_letter", str(events_dir / "_dl_batch"))
        .load()
    )
    assert df.rdd.getNumPartitions() == 4
    assert [f.name for f in df.schema] == schema_for("auction").names
    assert _utc_rows(df) == generate(GeneratorConfig(seed=5, events=5000), "auction", 0, 5000).to_pylist()


# ---- dirty input through a windowed count, with a replayed batch -----------------------------


def _inject(
    path: Path, edits: dict[int, Callable[[dict[str, Any]], str | None]], inserts: dict[int, str]
) -> tuple[list[tuple[int, str]], list[int]]:
    """Rewrite a generated bid file: `edits[i]` replaces original line i (None keeps a valid edit),
    `inserts[i]` adds a line before original line i. Returns the bad (line number, reason kind) pairs
    in file order and the date_time (µs) of each original row that no longer counts."""
    original = path.read_text().splitlines()
    out: list[str] = []
    bad: list[tuple[int, str]] = []
    dropped: list[int] = []
    for i, text in enumerate(original):
        if i in inserts:
            out.append(inserts[i])
            if inserts[i].strip():
                bad.append((len(out), inserts[i]))
        record = json.loads(text)
        if i in edits:
            new = edits[i](dict(record))
            out.append(new if new is not None else text)
            if new is not None and _is_bad(new):
                bad.append((len(out), new))
                dropped.append(parse_record(text, "bid")[5])
        else:
            out.append(text)
    path.write_text("\n".join(out) + "\n")
    return bad, dropped


def _is_bad(line: str) -> bool:
    try:
        parse_record(line, "bid")
    except RecordError:
        return True
    return False


def _set(**changes: Any) -> Callable[[dict[str, Any]], str]:
    def edit(record: dict[str, Any]) -> str:
        record.update(changes)
        return json.dumps({k: v for k, v in record.items() if v is not ...})

    return edit


def _epoch_micros(record: dict[str, Any]) -> str:
    return json.dumps({**record, "date_time": parse_record(json.dumps(record), "bid")[5]})


def _plus_two_hours(record: dict[str, Any]) -> str:
    stamp = record["date_time"].replace("Z", "+00:00")
    hours = int(stamp[11:13]) + 2
    return json.dumps({**record, "date_time": f"{stamp[:11]}{hours:02d}{stamp[13:-6]}+02:00"})


def _windowed_counts(
    spark: SparkSession, source_dir: Path, dead_letter: Path, out: Path, chk: Path
) -> StreamingQuery:
    """Bids per 1 s window, append mode; each micro-batch is written to out/batch-<id>.json, replacing
    an earlier attempt of the same batch (foreachBatch is at-least-once; this makes it idempotent)."""
    counts = (
        _lowering_filter(
            spark.readStream.format("nexmark-files")
            .option("entity", "bid")
            .option("dead_letter", str(dead_letter))
            .option("max_files_per_batch", "2")
            .load(str(source_dir))
        )
        .groupBy(F.window("date_time", "1 second"))
        .count()
        .select(F.col("window.start").alias("start"), "count")
    )

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = [[row["start"].timestamp(), row["count"]] for row in batch.collect()]
        (out / f"batch-{batch_id}.json").write_text(json.dumps(rows))

    out.mkdir(exist_ok=True)
    return (
        counts.writeStream.foreachBatch(write)
        .outputMode("append")
        .option("checkpointLocation", str(chk))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def _closed(progress: dict[str, Any]) -> bool:
    return progress["eventTime"].get("watermark", "").startswith("2100-01-01")


def _results(out: Path) -> dict[float, int]:
    got: dict[float, int] = {}
    for path in out.glob("batch-*.json"):
        for start, count in json.loads(path.read_text()):
            assert start not in got, f"window {start} emitted twice"
            got[start] = count
    return got


def _batch_reaching(chk: Path, files: int) -> int:
    """The id of the micro-batch whose end offset reaches `files` files, from the checkpoint's offset log."""
    for path in (chk / "offsets").iterdir():
        if path.name.isdigit() and json.loads(path.read_text().splitlines()[-1])["files"] == files:
            return int(path.name)
    raise AssertionError(f"no batch ends at {files} files")


def _forget_batches_from(chk: Path, batch_id: int) -> None:
    """Simulate a crash after batch `batch_id` ran but before Spark logged its commit: drop its commit
    and every later batch, so a restart re-executes it from its logged offsets."""
    for log, first in (("commits", batch_id), ("offsets", batch_id + 1)):
        for path in (chk / log).iterdir():
            name = path.name.removeprefix(".").removesuffix(".crc")
            if name.isdigit() and int(name) >= first:
                path.unlink()


@pytest.mark.spark
def test_dirty_input_goes_to_dead_letters_and_the_windowed_count_keeps_running(
    spark: SparkSession, tmp_path: Path
) -> None:
    register(spark)
    config = GeneratorConfig(seed=9, events=40_000)  # 4 s of events at 10,000/s, four files of bids
    source = tmp_path / "in"
    write_jsonl_events(config, source, files_per_entity=4)
    bids = sorted((source / "bid").glob("*.jsonl"))
    bad1, dropped1 = _inject(
        bids[1],
        edits={10: _set(price=...), 20: _epoch_micros, 30: _set(note="unknown keys are ignored")},
        inserts={3: '{"auction": 1000, "bidder": 1001, "price": ', 15: ""},
    )
    bad2, dropped2 = _inject(
        bids[2],
        edits={5: _set(price="12"), 6: _set(price=-5), 7: _set(date_time=None), 8: _plus_two_hours},
        inserts={},
    )
    assert len(bad1) == 2 and len(bad2) == 3 and len(dropped1) + len(dropped2) == 4

    # The expected result: bids per 1 s window over the valid rows only.
    table = generate(config, "bid", 0, config.events)
    valid = pl.from_arrow(pa.table({"t": table["date_time"].cast(pa.int64())})).filter(
        ~pl.col("t").is_in(dropped1 + dropped2)
    )
    expected = valid.group_by((pl.col("t") // 1_000_000).alias("w")).len().sort("w")
    expected_counts = {float(w): n for w, n in expected.iter_rows()}
    assert sum(expected_counts.values()) == table.num_rows - 4

    dead, out, chk = tmp_path / "dead", tmp_path / "out", tmp_path / "chk"
    _await(_windowed_counts(spark, source, dead, out, chk), _closed)
    assert _results(out) == expected_counts

    def letters() -> list[tuple[str, int, str]]:
        return sorted(
            (Path(d["file"]).name, d["line"], d["reason"])
            for path in sorted((dead / "bid").glob("*.jsonl"))
            for d in map(json.loads, path.read_text().splitlines())
        )

    first = letters()
    assert [(name, line) for name, line, _ in first] == [(bids[1].name, line) for line, _ in bad1] + [
        (bids[2].name, line) for line, _ in bad2
    ]
    reasons = [reason for _, _, reason in first]
    assert reasons[0].startswith("malformed json: Expecting value")
    assert reasons[1:] == [
        "missing field 'price'",
        "field 'price': expected int64, got string",
        "field 'price': must be >= 0, got -5",
        "field 'date_time': must not be null",
    ]
    summary = {
        "count": 5,
        "by_reason": {
            "field 'date_time'": 1,
            "field 'price'": 2,
            "malformed json": 1,
            "missing field 'price'": 1,
        },
    }
    assert dead_letter_summary(dead) == summary
    assert sorted(p.name for p in (dead / "bid").iterdir()) == [bids[1].name, bids[2].name]

    # Restart from the checkpoint as if the batch reading bids[2] had crashed before its commit: Spark
    # re-runs it, the partition rewrites its dead letters in place, and the results stay the same.
    replayed = _batch_reaching(chk, 4)
    _forget_batches_from(chk, replayed)
    untouched, rewritten = ((dead / "bid" / p.name).stat().st_ino for p in bids[1:3])
    restarted = time.time()
    query = _windowed_counts(spark, source, dead, out, chk)
    _await(query, _closed)
    assert next(p["batchId"] for p in query.recentProgress if p["numInputRows"]) == replayed
    assert (out / f"batch-{replayed}.json").stat().st_mtime >= restarted - 1
    assert (dead / "bid" / bids[2].name).stat().st_ino != rewritten  # the replay did write again ...
    assert (dead / "bid" / bids[1].name).stat().st_ino == untouched  # ... only for the replayed files
    assert letters() == first
    assert dead_letter_summary(dead) == summary
    assert _results(out) == expected_counts  # the replayed batches replaced their own output
    assert sorted(os.listdir(dead / "bid")) == [bids[1].name, bids[2].name]  # no temporary leftovers


# ---------------------------------------------------------------------------------------------
# Routed reads: the VM's share of a file and the workers'


def _routed_reader(tmp_path: Path, route: str, files: int, format: str = "jsonl") -> FileStreamReader:
    from datetime import UTC, datetime, timedelta

    from core.file_schema import FileSchema
    from core.job import write_source_file

    at = datetime(2026, 11, 26, tzinfo=UTC)
    for part in range(files):
        rows = ({"n": part * 1000 + i, "at": at + timedelta(seconds=part * 100 + i)} for i in range(100))
        write_source_file(tmp_path / "in", "tick", part, rows, format=format)
    schema = FileSchema("tick", (("n", "int64"), ("at", "timestamp")), "at", format=format)
    options = {"path": str(tmp_path / "in"), "schema": schema.to_option(), "bounded": "false"}
    options |= {"route": route, "offload_dir": str(tmp_path / "offload")}
    return FileStreamReader(FileSourceOptions.parse(options))


def test_each_file_keeps_the_plan_it_was_first_routed_by(tmp_path: Path) -> None:
    """A replayed batch plans its files as the first attempt did; a new plan routes only new files."""
    from core.offload_plan import OffloadPlan
    from router.routing_log import write_current_plan

    reader = _routed_reader(tmp_path, "local", 3)
    half, most = OffloadPlan.of_share(1, 0.5, 2), OffloadPlan.of_share(2, 0.9, 2)
    write_current_plan(tmp_path / "offload", half)
    first = reader.partitions({"files": 0}, {"files": 2})
    write_current_plan(tmp_path / "offload", most)
    replayed = reader.partitions({"files": 0}, {"files": 2})
    later = reader.partitions({"files": 2}, {"files": 3})
    assert first == replayed
    assert [(p.index, [s.plan for s in p.segments]) for p in first + later] == [  # type: ignore[attr-defined]
        (0, [half]),
        (1, [half]),
        (2, [most]),
    ]


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_the_two_routes_of_a_file_split_its_records_by_their_numbers(tmp_path: Path, format: str) -> None:
    """The VM's read keeps exactly the records the plan's share leaves it (record `row` of file `i`
    numbered i << 32 | row), notes the file's counts, and ends with a heartbeat at its last event."""
    from datetime import UTC, datetime

    import numpy as np

    from core.offload_plan import OffloadPlan, record_units
    from router.routing_log import write_current_plan
    from router.source_router import HEARTBEAT

    reader = _routed_reader(tmp_path, "local", 2, format)
    plan = OffloadPlan.of_share(1, 0.5, 2)
    write_current_plan(tmp_path / "offload", plan)
    (_, partition) = reader.partitions({"files": 0}, {"files": 2})
    table = pa.Table.from_batches(list(reader.read(partition)))
    records = table.filter(pc.is_null(table[HEARTBEAT]))
    ids = (1 << 32) | np.arange(100, dtype=np.int64)
    sent = record_units(ids) < 0.5  # the plan's record share, the generator's hash
    assert 0 < sent.sum() < 100
    assert records["n"].to_pylist() == [1000 + i for i in range(100) if not sent[i]]
    beats = table.filter(pc.is_valid(table[HEARTBEAT]))
    last_us = int(datetime(2026, 11, 26, 0, 3, 19, tzinfo=UTC).timestamp()) * 1_000_000  # file 1's row 99
    assert beats["at"].cast(pa.int64()).to_pylist() == [last_us]
    assert routed_counts(tmp_path / "offload", ["tick"]) == (100, int(sent.sum()))
