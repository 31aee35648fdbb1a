"""A user's own job: defined in a file, found by `FILE.py:NAME`, refused before Spark when it is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError, PlanError
from core.job import Job, load, write_source_file
from core.nexmark.queries import QUERIES
from core.offload_chains import offload_chains
from core.plan_codec import plan_to_json
from tests.core.test_cli import assert_one_line_error, sponge

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "page_views.py"

GOOD = """\
from core.job import Job, WindowSpec, agg, col

job = Job("clicks")
clicks = job.source("click", {"user": "int64", "url": "string", "at": "timestamp"}, event_time="at")
clicks.key_by("url").window_aggregate(WindowSpec(10, 2, on="at"), n=agg("count")).sink()
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(text)
    return path


def test_a_job_file_is_found_by_file_and_name_and_compiles(tmp_path: Path) -> None:
    job = load(f"{_file(tmp_path, GOOD)}:job")
    assert job.name == "clicks" and set(job.sources) == {"click"}
    assert job.sources["click"].event_time == "at" and dict(job.sources["click"].columns)["url"] == "string"
    (chain,) = offload_chains(job.plan())
    assert chain.entity == "click" and chain.node_ids == ("key_by1", "window_aggregate2")
    assert load(str(_file(tmp_path, GOOD))).name == "clicks"  # NAME defaults to job


def test_the_example_job_compiles_and_its_top_k_goes_to_workers() -> None:
    plan = load(f"{EXAMPLE}:job").plan()
    assert [n.op.kind for n in plan.nodes][-2:] == ["top_k", "sink"]
    assert offload_chains(plan)


@pytest.mark.parametrize("path", sorted(EXAMPLE.parent.glob("*.py")), ids=lambda p: p.stem)
def test_every_example_is_a_job_that_is_not_nexmark(path: Path) -> None:
    job = load(f"{path}:job")
    assert job.sources and not set(job.sources) & {"person", "auction", "bid"}
    assert offload_chains(job.plan())


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_nexmark_queries_are_built_in_jobs(name: str) -> None:
    job = load(name)
    assert plan_to_json(job.plan()) == plan_to_json(QUERIES[name].plan())
    assert job.sources and all(s.event_time == "date_time" for s in job.sources.values())


@pytest.mark.parametrize(
    ("edit", "error", "needles"),
    [
        (('key_by("url")', 'key_by("uri")'), PlanError, ["job.py:5:", "'uri'", "columns: user, url, at"]),
        (
            (".window_aggregate(", ".windowed_aggregate("),
            PlanError,
            ["job.py:5:", "'windowed_aggregate'", "top_k"],
        ),
        (('agg("count")', 'agg("median")'), PlanError, ["job.py:5:", "'median'", "count"]),
        (('"user": "int64"', '"user": "long"'), PlanError, ["job.py:4:", "'long'", "int64"]),
        (('event_time="at"', 'event_time="url"'), PlanError, ["job.py:4:", "'url'", "timestamp columns: at"]),
        (
            ('event_time="at"', 'event_time="at", format="csv"'),
            ConfigError,
            ["job.py:4:", "'csv'", "jsonl, parquet"],
        ),
        ((".sink()", ""), PlanError, ["'clicks' has no sink"]),
        (("job = Job", "job = (Job"), ConfigError, ["job.py:"]),
        (("from core.job", "import nothing_here\nfrom core.job"), ConfigError, ["job.py:1:", "nothing_here"]),
    ],
)
def test_a_wrong_job_fails_before_spark_saying_where_and_what_exists(
    tmp_path: Path, edit: tuple[str, str], error: type[Exception], needles: list[str]
) -> None:
    path = _file(tmp_path, GOOD.replace(*edit))
    with pytest.raises(error) as raised:
        load(f"{path}:job")
    text = raised.value.one_line()  # type: ignore[attr-defined]
    assert all(n in text for n in needles), text


def test_a_reference_to_no_file_no_job_or_no_query_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no Job named 'clicks'"):
        load(f"{_file(tmp_path, GOOD)}:clicks")
    with pytest.raises(ConfigError, match="no job file"):
        load(f"{tmp_path / 'nope.py'}:job")
    with pytest.raises(ConfigError, match="unknown query"):
        load("q9")


def test_hasattr_on_a_stream_still_answers() -> None:
    stream = Job("j").source("s", {"at": "timestamp"}, event_time="at")
    assert not hasattr(stream, "udf") and hasattr(stream, "key_by")


def test_sponge_compile_takes_a_job_file(tmp_path: Path) -> None:
    p = sponge("compile", f"{EXAMPLE}:job", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["query"] == "page_views" and doc["offload_chains"][0]["entity"] == "view"
    bad = _file(tmp_path, GOOD.replace('key_by("url")', 'key_by("uri")'))
    assert_one_line_error(sponge("compile", f"{bad}:job"), "job.py:5:", "'uri'")


def test_the_readmes_own_job_compiles(tmp_path: Path) -> None:
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    snippet = readme.split("### Your own job", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert len(snippet.strip().splitlines()) <= 10  # the tour promises a job in under ten lines
    path = tmp_path / "busy_pages.py"
    path.write_text(snippet)
    job = load(f"{path}:job")
    assert job.name == "busy_pages" and offload_chains(job.plan())


def test_a_job_file_is_the_same_job_however_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run compares its job by this: relative or absolute, with or without `:job`."""
    from core.job import canonical_ref

    (tmp_path / "mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    same = {canonical_ref(r) for r in ("mine.py", "mine.py:job", f"{tmp_path}/mine.py", "./mine.py:job")}
    assert same == {f"{tmp_path.resolve()}/mine.py:job"}
    assert canonical_ref("mine.py:other") != canonical_ref("mine.py") and canonical_ref("q5") == "q5"


def _in_format(format: str) -> str:
    return GOOD.replace('event_time="at"', f'event_time="at", format="{format}"')


def test_a_source_may_be_parquet_files(tmp_path: Path) -> None:
    job = load(f"{_file(tmp_path, _in_format('parquet'))}:job")
    assert job.sources["click"].format == "parquet" and job.sources["click"].suffix == ".parquet"
    assert load(f"{_file(tmp_path, GOOD)}:job").sources["click"].format == "jsonl"


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_write_source_file_writes_a_whole_file_a_reader_reads_back(tmp_path: Path, format: str) -> None:
    from datetime import UTC, datetime

    from core.spark.input_validation import read_file

    at = datetime(2026, 11, 26, 0, 0, 0, 7000, tzinfo=UTC)
    rows = [{"user": 1, "url": "/a", "at": at}, {"user": None, "url": "/b", "at": at}]
    path = write_source_file(tmp_path / "in", "click", 3, rows, format=format)
    assert path == tmp_path / "in" / "click" / f"part-00003.{format}"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    source = load(f"{_file(tmp_path, _in_format(format))}:job").sources["click"]
    read = [r for b in read_file(path, source, tmp_path / "dl") for r in b.to_pylist()]
    assert read == rows and not (tmp_path / "dl").exists()
    with pytest.raises(ConfigError, match="'csv'"):
        write_source_file(tmp_path / "in", "click", 4, rows, format="csv")
