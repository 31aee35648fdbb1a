"""A Parquet source: its files read typed as the schema says, a bad row or a bad file to dead letters
(the same contract as JSON lines), listed and counted by the same rules; and one job streamed over
Parquet files on Spark, equal to the computation in plain Python."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.file_schema import FileSchema
from core.job import write_source_file
from core.spark.file_source import list_files
from core.spark.input_validation import dead_letter_file, dead_letter_summary, read_file
from core.spark.live_policy import FileBacklog, count_records

VIEW = FileSchema(
    "view", (("user", "int64"), ("page", "string"), ("at", "timestamp")), "at", format="parquet"
)
T0 = datetime(2026, 11, 26, tzinfo=UTC)


def _rows(n: int, start_s: float = 0.0) -> list[dict]:
    return [
        {"user": i, "page": f"/p{i % 5}", "at": T0 + timedelta(seconds=start_s + i * 0.25)} for i in range(n)
    ]


def _read(path: Path, dead_letters: Path, **kw: int) -> list[dict]:
    return [r for b in read_file(path, VIEW, dead_letters, **kw) for r in b.to_pylist()]


def _letters(dead_letters: Path, path: Path) -> list[dict]:
    return [
        json.loads(line) for line in dead_letter_file(dead_letters, "view", path).read_text().splitlines()
    ]


def test_a_good_file_reads_back_what_was_written_in_batches(tmp_path: Path) -> None:
    rows = _rows(10)
    path = write_source_file(tmp_path, "view", 0, rows, format="parquet")
    batches = list(read_file(path, VIEW, tmp_path / "dl", batch_rows=4))
    assert [b.num_rows for b in batches] == [4, 4, 2] and all(b.schema == VIEW.arrow for b in batches)
    assert [r for b in batches for r in b.to_pylist()] == rows
    assert not (tmp_path / "dl").exists()


def test_columns_are_taken_by_name_and_cast_safely_to_their_kinds(tmp_path: Path) -> None:
    """Other integer widths, a dictionary-encoded string, nanosecond times without a zone (taken as
    UTC, truncated to microseconds), in another order and with a column the schema lacks."""
    path = tmp_path / "view" / "a.parquet"
    path.parent.mkdir()
    table = pa.table(
        {
            "extra": [1.5, 2.5],
            "at": pa.array([1_000_000_001_999, 2_000_000_000_000], pa.timestamp("ns")),
            "page": pa.array(["/a", "/b"]).dictionary_encode(),
            "user": pa.array([7, None], pa.int32()),
        }
    )
    pq.write_table(table, path)
    assert _read(path, tmp_path / "dl") == [
        {"user": 7, "page": "/a", "at": datetime(1970, 1, 1, 0, 16, 40, 1, tzinfo=UTC)},
        {"user": None, "page": "/b", "at": datetime(1970, 1, 1, 0, 33, 20, tzinfo=UTC)},
    ]


def test_a_row_without_its_event_time_is_a_dead_letter_and_the_rest_is_read(tmp_path: Path) -> None:
    rows = _rows(5)
    bad = {**rows[2], "at": None}
    path = write_source_file(tmp_path, "view", 0, [*rows[:2], bad, *rows[3:]], format="parquet")
    assert _read(path, tmp_path / "dl") == rows[:2] + rows[3:]
    (letter,) = _letters(tmp_path / "dl", path)
    assert letter == {
        "file": str(path),
        "row": 3,
        "reason": "field 'at': must not be null",  # as a JSON line with a null event time is told
        "record": json.dumps({"user": 2, "page": "/p2", "at": None}),
    }
    # Replayed (the VM's read and the workers' read of the same file): the same letters, replaced.
    target = dead_letter_file(tmp_path / "dl", "view", path)
    before, inode = target.read_bytes(), target.stat().st_ino
    _read(path, tmp_path / "dl")
    assert target.read_bytes() == before and target.stat().st_ino != inode
    assert dead_letter_summary(tmp_path / "dl") == {"count": 1, "by_reason": {"field 'at'": 1}}


def test_a_strict_schema_refuses_negative_integers_and_late_event_times_row_by_row(tmp_path: Path) -> None:
    strict = FileSchema("tick", (("n", "int64"), ("at", "timestamp")), "at", strict=True, format="parquet")
    path = tmp_path / "t.parquet"
    ats = [T0, T0, datetime(2100, 1, 1, tzinfo=UTC), T0]
    pq.write_table(pa.table({"n": [1, -3, -4, None], "at": ats}), path)
    read = [r for b in read_file(path, strict, tmp_path / "dl") for r in b.to_pylist()]
    assert read == [{"n": 1, "at": T0}]
    reasons = [(d["row"], d["reason"]) for d in map(json.loads, (tmp_path / "dl/tick/t.jsonl").open())]
    assert reasons == [
        (2, "field 'n': must be >= 0, got -3"),
        (3, "field 'n': must be >= 0, got -4"),  # the first problem in column order
        (4, "field 'n': must not be null"),
    ]


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        (lambda p: p.write_text('{"user": 1}\n'), "not a readable parquet file: "),
        (
            lambda p: pq.write_table(pa.table({"user": [1], "at": [T0]}), p),
            "missing column 'page': the file has user, at",
        ),
        (
            lambda p: pq.write_table(pa.table({"user": ["1"], "page": ["/a"], "at": [T0]}), p),
            "column 'user': expected int64, got string",
        ),
        (
            lambda p: pq.write_table(
                pa.table({"user": pa.array([2**63], pa.uint64()), "page": ["/a"], "at": [T0]}), p
            ),
            "column 'user': cannot be read as int64: ",
        ),
    ],
    ids=["not-parquet", "missing-column", "wrong-type", "out-of-range"],
)
def test_a_file_that_cannot_be_read_as_the_schema_is_a_dead_letter_whole(
    tmp_path: Path, write, reason
) -> None:
    path = tmp_path / "view" / "part-00001.parquet"
    path.parent.mkdir()
    write(path)
    assert _read(path, tmp_path / "dl") == []
    (letter,) = _letters(tmp_path / "dl", path)
    assert letter["reason"].startswith(reason) and letter["file"] == str(path)
    assert letter["row"] is None and letter["record"] is None
    assert dead_letter_summary(tmp_path / "dl")["count"] == 1


def test_parquet_files_are_listed_by_the_jsonl_rules_and_counted_from_their_footers(tmp_path: Path) -> None:
    (tmp_path / "view").mkdir()
    for name, n in [
        ("b.parquet", 3),
        ("a.parquet", 2),
        ("_x.parquet", 9),
        (".c.parquet.tmp", 9),
        ("d.jsonl", 9),
    ]:
        pq.write_table(pa.Table.from_pylist(_rows(n)), tmp_path / "view" / name)
    files = list_files(tmp_path / "view", VIEW.suffix)
    assert [Path(f).name for f in files] == ["a.parquet", "b.parquet"]
    assert [count_records(Path(f), "parquet") for f in files] == [2, 3]
    (tmp_path / "view" / "e.parquet").write_text("not parquet")
    assert count_records(tmp_path / "view" / "e.parquet", "parquet") == 0  # dead-lettered whole: none
    assert count_records(tmp_path / "view" / "gone.parquet", "parquet") == 0

    backlog = FileBacklog(tmp_path, [VIEW, "site"], follow=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "a.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    backlog.freeze()
    assert backlog.sources == ("view", "site") and backlog.released() == 2 + 3 + 0 + 2


# ---------------------------------------------------------------------------------------------
# On Spark

JOB = """\
from core.job import Job, WindowSpec, agg

job = Job("page_counts")
views = job.source(
    "view", {"user": "int64", "page": "string", "at": "timestamp"}, event_time="at", format="parquet"
)
views.key_by("page").window_aggregate(WindowSpec(10, 5, on="at"), views=agg("count")).sink()
"""


def _windowed_counts(rows: list[dict]) -> pa.Table:
    """Views per page and 10 s window sliding by 5 s, in plain Python."""
    size, slide = 10_000_000, 5_000_000
    counts: Counter[tuple[int, str]] = Counter()
    for r in rows:
        if r["at"] is None:
            continue
        us = (r["at"] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        for start in range(us - us % slide, us - size, -slide):
            counts[(start, r["page"])] += 1
    keys = sorted(counts)
    ts = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "window_start": pa.array([k[0] for k in keys], ts),
            "window_end": pa.array([k[0] + size for k in keys], ts),
            "page": [k[1] for k in keys],
            "views": pa.array([counts[k] for k in keys], pa.int64()),
        }
    )


@pytest.mark.spark
def test_a_job_over_parquet_files_equals_the_computation_in_python_and_counts_its_bad_row(
    spark, tmp_path: Path
) -> None:
    from core.nexmark.generator import GeneratorConfig
    from core.results import diff_results, read_results
    from core.spark.runner import RunConfig, run_query

    job_file = tmp_path / "page_counts.py"
    job_file.write_text(JOB)
    written: list[dict] = []
    for part in range(4):
        rows = _rows(120, start_s=part * 30.0)
        if part == 1:
            rows[7]["at"] = None  # one bad row: a dead letter, the rest of its file read
        write_source_file(tmp_path / "in", "view", part, rows, format="parquet")
        written += rows
    summary = run_query(
        RunConfig(
            query=f"{job_file}:job",
            generator=GeneratorConfig(seed=0, events=0),
            output=tmp_path / "out",
            input=tmp_path / "in",
            max_files_per_batch=2,
        )
    )
    expected = _windowed_counts(written)
    actual = read_results(tmp_path / "out")
    assert expected.num_rows > 0 and summary["records_in"] >= 4 * 120 - 1
    assert summary["dead_letter"] == {"count": 1, "by_reason": {"field 'at'": 1}}
    assert diff_results(actual.select(expected.column_names), expected) is None, diff_results(
        actual, expected
    )
