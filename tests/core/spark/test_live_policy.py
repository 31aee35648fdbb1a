"""The live policy's backlog, its status files and its summary, without Spark: real files in tmp_path,
progress dicts as Spark reports them, and a LivePolicy fed the loop's samples by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.kinesis import KinesisEndpoint, StreamTail
from core.nexmark.schedule import RateSchedule
from core.run_status import DECISIONS, HISTORY, LATEST, METRICS, POLICY_DIR, STATUS_DIR
from core.spark.live_policy import (
    FileBacklog,
    GeneratedBacklog,
    KinesisBacklog,
    LivePolicy,
    StatusFiles,
    count_lines,
    generated_epoch,
    prometheus_text,
    stream_epoch,
)
from policy.monitor import Observation
from policy.offload_policy import Decision
from tests.core.kinesis_stand_in import MemoryStream


def write(path: Path, lines: int, tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"n": {i}}}\n' for i in range(lines)) + tail)


def progress(*sources: tuple[str, int], batch: int = 0) -> dict:
    """A progress event whose sources ended at (source name, files) offsets."""
    return {
        "batchId": batch,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "durationMs": {"triggerExecution": 1500, "addBatch": 1000},
        "sources": [
            {"startOffset": None, "endOffset": json.dumps({"files": k, "source": name})}
            for name, k in sources
        ],
    }


def test_count_lines_counts_records_with_or_without_a_last_newline(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", 3)
    write(tmp_path / "b.jsonl", 2, tail='{"n": 9}')
    (tmp_path / "c.jsonl").write_bytes(b"")
    assert [count_lines(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl", "gone.jsonl")] == [
        3,
        3,
        0,
        0,
    ]


def test_file_backlog_counts_complete_files_as_they_appear_and_commits_by_offsets(tmp_path: Path) -> None:
    write(tmp_path / "view" / "001.jsonl", 10)
    write(tmp_path / "view" / ".002.jsonl.tmp", 99)  # being written: a hidden name
    write(tmp_path / "view" / "_ignored.jsonl", 99)
    write(tmp_path / "site" / "001.jsonl", 4)
    backlog = FileBacklog(tmp_path, ["view", "site"], follow=True)
    assert (backlog.released(), backlog.committed()) == (14, 0)

    os.rename(tmp_path / "view" / ".002.jsonl.tmp", tmp_path / "view" / "002.jsonl")  # now whole
    write(tmp_path / "view" / "003.jsonl", 5)
    assert backlog.released() == 10 + 99 + 5 + 4

    # A routed run reads each source twice over the same offsets; a stale stream reports less.
    backlog.on_progress(progress(("view", 2), ("view", 1), ("site", 1), ("site", 1)))
    assert backlog.committed() == 10 + 99 + 4
    backlog.on_progress(progress(("view", 1)))  # never backwards
    assert backlog.committed() == 10 + 99 + 4
    backlog.on_progress(progress(("view", 4), ("site", 2)))  # one past the last file: the punctuation
    assert backlog.committed() == backlog.released() == 118


def test_a_bounded_file_backlog_releases_only_the_files_its_source_started_with(tmp_path: Path) -> None:
    write(tmp_path / "view" / "001.jsonl", 3)
    backlog = FileBacklog(tmp_path, ["view"], follow=False)
    backlog.freeze()
    write(tmp_path / "view" / "002.jsonl", 7)  # the bounded source does not read it
    assert backlog.released() == 3


def test_file_backlog_ignores_offsets_of_other_sources_and_the_generator(tmp_path: Path) -> None:
    write(tmp_path / "view" / "001.jsonl", 3)
    backlog = FileBacklog(tmp_path, ["view"])
    event = {"startOffset": None, "endOffset": json.dumps({"event": 500})}
    backlog.on_progress({**progress(("other", 5)), "sources": [*progress(("other", 5))["sources"], event]})
    assert backlog.committed() == 0


def test_kinesis_backlog_releases_what_the_stream_holds_and_commits_the_slowest_sources_position() -> None:
    """Released: the records the shards hold now (read off the stream's tail, markers too); committed:
    per shard, the least any source's committed epochs reached (a NEXMark stream's sources all read
    every record of it)."""
    a, b = "shardId-000000000000", "shardId-000000000001"
    stream = MemoryStream({a: [b"{}"] * 7, b: [b"{}"] * 4})
    backlog = KinesisBacklog(StreamTail(KinesisEndpoint("s"), client=stream), ["bid", "auction"])
    assert (backlog.released(), backlog.committed()) == (11, 0)
    stream.put(b, [b"{}"] * 5)
    stream.expire()  # the tail takes a new iterator after its own expired, and counts nothing twice
    assert backlog.released() == 16

    def at(source: str, **n: int) -> dict:
        shards = {name: {"seq": "1", "time": 0, "ended": False, "n": v} for name, v in n.items()}
        return {"startOffset": None, "endOffset": json.dumps({"source": source, "shards": shards})}

    ends = [at("bid", **{a: 5, b: 9}), at("auction", **{a: 6, b: 2}), at("person", **{a: 7, b: 9})]
    backlog.on_progress({"sources": ends})
    assert backlog.committed() == 5 + 2  # person is no source of this run
    backlog.on_progress({"sources": [at("auction", **{a: 3, b: 8})]})  # a: never back; b: on to 8
    assert backlog.committed() == 5 + 8


def test_a_stream_epoch_counts_the_records_of_every_shard_and_takes_the_slowest_source() -> None:
    def offset(**n: int) -> str:
        shards = {name: {"seq": "1", "time": 0, "ended": False, "n": v} for name, v in n.items()}
        return json.dumps({"source": "bid", "shards": shards})

    p = {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "durationMs": {"triggerExecution": 2000},
        "sources": [
            {"startOffset": None, "endOffset": offset(a=5, b=7)},  # its first epoch: from nothing
            {"startOffset": offset(a=1, b=2), "endOffset": offset(a=4, b=6)},
        ],
    }
    epoch = stream_epoch(p)
    assert epoch is not None and (epoch.start, epoch.covered) == (0, 10)
    assert (
        stream_epoch({**p, "sources": [{"startOffset": None, "endOffset": json.dumps({"event": 9})}]}) is None
    )


def test_generated_backlog_follows_the_schedule_and_the_lowest_event_offset() -> None:
    backlog = GeneratedBacklog(RateSchedule.constant(1000), events=50)
    assert backlog.released() == 0  # not started
    backlog.origin = 0.0  # long ago: every event released, capped at the punctuation
    assert backlog.released() == 51
    p = {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "durationMs": {"triggerExecution": 2000},
        "sources": [
            {"startOffset": json.dumps({"event": 10}), "endOffset": json.dumps({"event": 40})},
            {"startOffset": json.dumps({"event": 12}), "endOffset": json.dumps({"event": 30})},
        ],
    }
    backlog.on_progress(p)
    assert backlog.committed() == 30
    epoch = generated_epoch(p)
    assert epoch is not None and (epoch.start, epoch.covered) == (10, 30)
    assert epoch.commit_t - epoch.started_t == pytest.approx(2.0)


def test_prometheus_text_is_gauges_with_escaped_labels_and_no_unknown_values() -> None:
    text = prometheus_text(
        {"backlog": 12, "cpu": None, "share": 0.5, "trigger": "queue-delay"}, {"run": 'a"b', "job": "q1"}
    )
    assert '# TYPE sponge_backlog_records gauge\nsponge_backlog_records{run="a\\"b",job="q1"} 12\n' in text
    assert 'sponge_offload_share{run="a\\"b",job="q1"} 0.5' in text
    assert "sponge_vm_cpu_ratio" not in text  # not measured yet: left out, not 0
    assert 'sponge_policy_trigger{run="a\\"b",job="q1",trigger="queue-delay"} 1' in text
    assert text.endswith("\n")


def test_status_files_replace_latest_and_bound_the_history(tmp_path: Path) -> None:
    files = StatusFiles(tmp_path, {"run": "x"}, history_lines=3)
    for t in range(7):
        files.write({"t": float(t), "backlog": t})
    status = tmp_path / STATUS_DIR
    assert json.loads((status / LATEST).read_text()) == {"t": 6.0, "backlog": 6}
    assert "sponge_backlog_records" in (status / METRICS).read_text()
    history = [json.loads(line)["t"] for line in (status / HISTORY).read_text().splitlines()]
    assert history[-1] == 6.0 and 3 <= len(history) < 6
    assert sorted(p.name for p in status.iterdir()) == [HISTORY, LATEST, METRICS]  # no temporary left

    again = StatusFiles(tmp_path, {"run": "x"}, history_lines=3)  # a resumed run carries on
    again.write({"t": 7.0})
    assert (status / HISTORY).read_text().splitlines()[-1] == '{"t": 7.0}'


def test_a_run_on_aws_also_writes_its_figures_as_cloudwatch_emf(tmp_path: Path) -> None:
    """One EMF document a second, in the workers' namespace, dimensioned by the run's labels: CloudWatch
    Logs makes metrics of it once the CloudWatch agent ships the file."""
    files = StatusFiles(tmp_path, {"run": "r1", "job": "views"}, history_lines=2, emf=True)
    for t in range(5):
        files.write({"t": float(t), "backlog": 10 * t, "share": 0.5, "cpu": None, "trigger": "hold"})
    docs = [json.loads(line) for line in (tmp_path / STATUS_DIR / "emf.jsonl").read_text().splitlines()]
    assert 2 <= len(docs) < 4 and docs[-1]["backlog"] == [40.0] and docs[-1]["share"] == [0.5]
    (directive,) = docs[-1]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Sponge" and directive["Dimensions"] == [["run", "job"]]
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {"backlog": "Count", "share": "None"}
    assert docs[-1]["run"] == "r1" and docs[-1]["job"] == "views" and "cpu" not in docs[-1]
    plain = StatusFiles(tmp_path / "local", {"run": "r2"})
    plain.write({"t": 0.0})
    assert not (tmp_path / "local" / STATUS_DIR / "emf.jsonl").exists()  # only where CloudWatch is


class FakeSession:
    """The offload session's surface the policy uses: publish a plan, the agent's gauges."""

    def __init__(self) -> None:
        self.published: list[tuple[float, int]] = []
        self.agent = self

    def latest(self) -> dict:
        return {"workers_connected": 2, "records_offloaded": 1234}

    def publish(self, share: float, workers: int):
        from core.offload_plan import OffloadPlan

        self.published.append((share, workers))
        return OffloadPlan.of_share(len(self.published), share, workers)


def observation(t: float, backlog: int = 0) -> Observation:
    return Observation(
        t=t,
        cpu=0.5,
        input_rate=1000.0,
        processed_rate=900.0,
        backlog=backlog,
        epoch_s=1.0,
        vm_cores=2,
        cost_ms=0.1,
    )


def decision(t: float, share: float, trigger: str) -> Decision:
    return Decision(
        t=t,
        share=share,
        workers=2 if share else 0,
        trigger=trigger,
        vm_capacity=1.0,
        required_rate=2.0,
        excess_events=0.0,
        per_core_rate=1.0,
    )


def test_live_policy_tallies_its_seconds_writes_the_status_and_summarises(tmp_path: Path) -> None:
    backlog = FileBacklog(tmp_path / "in", ["view"])
    live = LivePolicy(
        "sponge", tmp_path / "out", backlog, per_core_rate=1000, rho=5, max_workers=2, interval_s=1.0
    )
    default = LivePolicy("sponge", tmp_path / "o", backlog, per_core_rate=1, rho=1, max_workers=1)
    assert default.interval_s == default.config.period_s  # the policy's own monitoring period
    live.session = FakeSession()
    live.status = StatusFiles(live.output, live.labels)
    steps = [(0.0, 0.0, "hold"), (1.0, 0.6, "queue-delay"), (2.0, 0.6, "hold"), (3.0, 0.0, "release")]
    for t, share, trigger in steps:
        d = decision(t, share, trigger)
        if (share, d.workers) != live.plan:
            live._apply(d)
        live.on_sample(observation(t, backlog=5), d, {"workers_connected": 2, "records_offloaded": 1234})
    live.stopped()  # no loop was started: only the last figures are written, marked stopped

    assert live.session.published == [(0.6, 2), (0.0, 0)]
    latest = json.loads((tmp_path / "out" / STATUS_DIR / LATEST).read_text())
    assert latest["state"] == "stopped" and latest["trigger"] == "release" and latest["share"] == 0.0
    assert (latest["last_fired"], latest["last_fired_t"], latest["workers_connected"]) == ("release", 3.0, 2)
    summary = live.summary()
    assert summary["decisions"] == 4 and summary["plans_published"] == 2
    assert summary["max_share"] == 0.6 and summary["offloaded_s"] == 2.0
    assert summary["triggers"] == {"hold": 2, "queue-delay": 1, "release": 1}
    assert summary["decision_log"] == str(tmp_path / "out" / POLICY_DIR / DECISIONS)


def test_live_policy_touches_no_file_before_the_run_claims_its_output(tmp_path: Path) -> None:
    def live(policy: str) -> LivePolicy:
        backlog = GeneratedBacklog(RateSchedule.constant(10), 10)
        return LivePolicy(policy, tmp_path / "out", backlog, per_core_rate=1000, rho=5, max_workers=1)

    live("noscaling")
    assert not (tmp_path / "out").exists()  # run_output.claim refuses a directory it did not make
    with pytest.raises(ValueError, match="noscaling or sponge"):
        live("none")
