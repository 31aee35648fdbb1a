"""The routing log: every source offset is routed by one plan, the same for every reader and replay."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import atomic_write
from core.errors import ConfigError, InputError
from core.offload_plan import OffloadPlan
from router import routing_log
from router.routing_log import (
    RoutingLog,
    Segment,
    covering,
    read_current_plan,
    routed_mask,
    write_current_plan,
)

LOCAL = OffloadPlan.local(0)
HALF = OffloadPlan(version=1, share=0.5, workers=2)
ALL = OffloadPlan(version=2, share=1.0, workers=2)
LOCAL3 = OffloadPlan.local(3)
RESERVE = 1_000_000  # the generated source's, in tests of the reservation


def test_a_plan_change_applies_from_the_first_offset_nobody_has_routed(tmp_path: Path) -> None:
    vm_share, workers_share = RoutingLog(tmp_path), RoutingLog(tmp_path)  # two processes
    assert vm_share.plan_range(0, 1000, HALF) == (Segment(0, HALF),)
    # The plan changes while the other reader still has [0, 1000) to read: it must see HALF there.
    assert workers_share.plan_range(0, 1000, ALL) == (Segment(0, HALF),)
    assert vm_share.plan_range(1000, 2000, ALL) == (Segment(1000, ALL),)
    assert workers_share.plan_range(1000, 2000, LOCAL) == (Segment(1000, ALL),)
    # A replay of an epoch gets what the first attempt got, whatever the current plan says.
    assert RoutingLog(tmp_path).plan_range(500, 1500, LOCAL) == (Segment(0, HALF), Segment(1000, ALL))
    assert RoutingLog(tmp_path).high_water_mark() == 2000


def test_every_stream_of_a_query_routes_an_offset_by_the_same_plan(tmp_path: Path) -> None:
    """The bid stream plans [0, 100) under HALF; the person stream, later and under another current
    plan, still gets HALF there: an auction and its bids see one plan at every offset."""
    bids, persons = RoutingLog(tmp_path), RoutingLog(tmp_path)
    assert bids.plan_range(0, 100, HALF) == (Segment(0, HALF),)
    assert persons.plan_range(0, 150, ALL) == (Segment(0, HALF), Segment(100, ALL))
    assert bids.plan_range(100, 150, LOCAL) == (Segment(100, ALL),)


class _Stream:
    """One routed stream's side of the agreement: it passes back the decision it took last."""

    def __init__(self, directory: Path) -> None:
        self.log, self.last = RoutingLog(directory), None

    def end(self, start: int, due: int) -> int:
        end, self.last = self.log.agreed_end(start, due, self.last)
        return end


def test_the_first_stream_asked_decides_an_epochs_end_and_every_other_takes_it(tmp_path: Path) -> None:
    """Spark asks the VM's stream and the workers' one after the other, while more offsets fall due:
    both end the epoch where the first said, whichever is first."""
    vm, workers = _Stream(tmp_path), _Stream(tmp_path)
    assert (vm.end(0, 400), workers.end(0, 450)) == (400, 400)
    assert (workers.end(400, 820), vm.end(400, 800)) == (820, 820)
    # A round that plans nothing (no batch runs), then the next round asks about the same start again.
    assert (vm.end(820, 820), workers.end(820, 830)) == (820, 820)
    assert (vm.end(820, 850), workers.end(820, 860)) == (850, 850)
    assert (vm.end(850, 850), workers.end(850, 850)) == (850, 850)  # twice empty, then a batch
    assert (vm.end(850, 850), workers.end(850, 850)) == (850, 850)
    assert (vm.end(850, 900), workers.end(850, 910)) == (900, 900)
    (tmp_path / "epoch.end").write_text("90")  # torn by a crash: the next stream asked decides afresh
    assert (vm.end(900, 990), workers.end(900, 999)) == (990, 990)


def test_streams_resumed_apart_are_aligned_by_the_next_decision(tmp_path: Path) -> None:
    vm, workers = _Stream(tmp_path), _Stream(tmp_path)
    assert (vm.end(1000, 1500), workers.end(1010, 1520)) == (1500, 1500)
    fresh_vm, fresh_workers = _Stream(tmp_path), _Stream(tmp_path)  # a restart: new readers, same record
    assert (fresh_workers.end(1500, 1500), fresh_vm.end(1500, 1600)) == (1500, 1500)
    assert (fresh_workers.end(1500, 1700), fresh_vm.end(1500, 1600)) == (1700, 1700)


def test_the_current_plan_file_round_trips(tmp_path: Path) -> None:
    write_current_plan(tmp_path, HALF)
    assert read_current_plan(tmp_path) == HALF


def test_covering_picks_the_segments_that_route_some_offset() -> None:
    segs = [Segment(0, LOCAL), Segment(100, HALF), Segment(200, ALL)]
    assert covering(segs, 0, 100) == (segs[0],)
    assert covering(segs, 99, 101) == (segs[0], segs[1])
    assert covering(segs, 250, 300) == (segs[2],)


@settings(max_examples=50, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 5000), min_size=1, max_size=5, unique=True),
    shares=st.lists(st.sampled_from([0.0, 0.3, 1.0]), min_size=6, max_size=6),
)
def test_the_two_shares_partition_the_records(cuts: list[int], shares: list[float]) -> None:
    starts = sorted(set(cuts) | {0})
    segs = [Segment(s, OffloadPlan(version=i, share=shares[i], workers=1)) for i, s in enumerate(starts)]
    ids = np.arange(0, 6000, dtype=np.int64)
    mask = routed_mask(segs, ids)
    again = routed_mask(segs, ids[::-1])[::-1]
    assert np.array_equal(mask, again)  # a pure function of the record, not of its position
    for i, seg in enumerate(segs):
        stop = segs[i + 1].start if i + 1 < len(segs) else 6000
        part = mask[seg.start : stop]
        if seg.plan.share == 0.0:
            assert not part.any()
        elif seg.plan.share == 1.0:
            assert part.all()


# ---- several processes, crashes and damaged files ---------------------------------------------------
#
# The children below run in fresh interpreters (multiprocessing's "spawn"), so the lock they share is
# the real flock between processes, and a SIGKILL stops one exactly where a crash would.

WRITERS = 4
EPOCH = 100
EPOCHS = 30
SPAWN = multiprocessing.get_context("spawn")


def _plan(version: int) -> OffloadPlan:
    return OffloadPlan(version=version, share=(0.0, 0.25, 0.5, 1.0)[version % 4], workers=2)


def _ranges(writer: int) -> list[tuple[int, int]]:
    """What each process reads: two read the same epochs (the VM's and the workers' stream), one reads
    ranges that straddle them, one reads tasks inside them."""
    ranges = {
        0: [(k * EPOCH, (k + 1) * EPOCH) for k in range(EPOCHS)],
        1: [(k * EPOCH, (k + 1) * EPOCH) for k in range(EPOCHS)],
        2: [(k * EPOCH + 50, k * EPOCH + 170) for k in range(EPOCHS)],
        3: [(k * EPOCH + 25, k * EPOCH + 75) for k in range(EPOCHS)],
    }
    return ranges[writer]


def _route_concurrently(directory: str, writer: int, start: Any, out: str) -> None:
    """One reader process: route its ranges with whatever plan is current, publishing a new plan now
    and then, so the plan changes under the other processes' feet."""
    root = Path(directory)
    log = RoutingLog(root)
    start.wait(timeout=60)
    got = []
    for k, (lo, hi) in enumerate(_ranges(writer)):
        if k % WRITERS == writer:
            write_current_plan(root, _plan(writer * 1000 + k))
        segments = log.plan_range(lo, hi, read_current_plan(root))
        got.append([lo, hi, [[s.start, s.plan.dumps()] for s in segments]])
    Path(out).write_text(json.dumps(got))


def _route_then_die(directory: str, start: int, end: int, plan: str) -> None:
    """Route a range, but die (SIGKILL: no cleanup, no flush) after the log line is on disk and before
    the high-water mark moves: the mark is the routing log's only `atomic_write.write_text`."""

    def killed(target: Path, text: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    atomic_write.write_text = killed
    RoutingLog(Path(directory)).plan_range(start, end, OffloadPlan.loads(plan))


def _run(target: Any, *args: Any) -> int | None:
    child = SPAWN.Process(target=target, args=args)
    child.start()
    child.join(120)
    if child.is_alive():
        child.kill()
        child.join()
        raise AssertionError(f"{target.__name__} did not finish in 120 s")
    return child.exitcode


def _lines(tmp_path: Path) -> list[dict[str, Any]]:
    """The log's lines, each of which must be a whole JSON object."""
    text = (tmp_path / "routing.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _line(start: int, plan: OffloadPlan) -> bytes:
    return (json.dumps({"from": start, "plan": plan.to_json()}) + "\n").encode()


def test_processes_routing_at_once_agree_on_the_plan_of_every_offset(tmp_path: Path) -> None:
    write_current_plan(tmp_path, _plan(0))
    start = SPAWN.Barrier(WRITERS)
    children = [
        SPAWN.Process(target=_route_concurrently, args=(str(tmp_path), w, start, str(tmp_path / f"{w}.json")))
        for w in range(WRITERS)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(180)
    for child in children:
        if child.is_alive():
            child.kill()
            child.join()
    assert [c.exitcode for c in children] == [0] * WRITERS

    # The log parses, and its starts strictly increase from 0: each offset below the mark is routed
    # by exactly one segment (no two processes appended for the same offsets).
    log = RoutingLog(tmp_path)
    starts = [line["from"] for line in _lines(tmp_path)]
    assert starts[0] == 0 and starts == sorted(set(starts))
    segments = log.segments()
    assert [s.start for s in segments] == starts
    assert log.high_water_mark() == max(hi for w in range(WRITERS) for _, hi in _ranges(w))
    assert len({s.plan for s in segments}) > 1  # the plan did change while they routed

    # Every answer any process got is what the final log says: they all agree, on every offset.
    answers = [row for w in range(WRITERS) for row in json.loads((tmp_path / f"{w}.json").read_text())]
    for lo, hi, got in answers:
        assert got == [[s.start, s.plan.dumps()] for s in covering(segments, lo, hi)], (lo, hi)
    # A replay of any range, whatever the plan now, gets the same segments and writes nothing.
    before = (tmp_path / "routing.jsonl").read_bytes()
    for lo, hi, got in answers:
        replayed = RoutingLog(tmp_path).plan_range(lo, hi, _plan(99))
        assert [[s.start, s.plan.dumps()] for s in replayed] == got
    assert (tmp_path / "routing.jsonl").read_bytes() == before


@pytest.mark.parametrize("next_plan", [LOCAL3, ALL, HALF], ids=["new-plan", "killed-plan", "same-plan"])
def test_a_writer_killed_between_its_line_and_its_mark_routed_nothing(
    tmp_path: Path, next_plan: OffloadPlan
) -> None:
    log = RoutingLog(tmp_path)
    assert log.plan_range(0, 1000, HALF) == (Segment(0, HALF),)
    ids = np.arange(0, 1000, dtype=np.int64)
    first = routed_mask(log.segments(), ids)

    assert _run(_route_then_die, str(tmp_path), 1000, 2000, ALL.dumps()) == -signal.SIGKILL
    assert [line["from"] for line in _lines(tmp_path)] == [0, 1000]  # the line is there ...
    assert log.high_water_mark() == 1000  # ... the mark is not: nobody was handed offset 1000

    # Readers see what was handed out, and a replayed epoch routes every record as the first time.
    assert log.segments() == [Segment(0, HALF)]
    assert log.plan_range(0, 1000, next_plan) == (Segment(0, HALF),)
    assert np.array_equal(routed_mask(log.segments(), ids), first)
    # The next writer routes the new offsets by the plan now current, and drops the dead line.
    expected = (Segment(0, HALF),) if next_plan == HALF else (Segment(1000, next_plan),)
    assert log.plan_range(1000, 2000, next_plan) == expected
    assert [line["from"] for line in _lines(tmp_path)] == [s.start for s in log.segments()]
    assert log.plan_range(500, 1500, LOCAL) == covering(log.segments(), 500, 1500)
    assert log.high_water_mark() == 2000


def test_a_writer_killed_in_its_first_call_leaves_a_log_that_starts_afresh(tmp_path: Path) -> None:
    assert _run(_route_then_die, str(tmp_path), 0, 500, ALL.dumps()) == -signal.SIGKILL
    log = RoutingLog(tmp_path)
    assert (log.segments(), log.high_water_mark()) == ([], 0)
    assert log.plan_range(0, 500, HALF) == (Segment(0, HALF),)
    assert _lines(tmp_path) == [{"from": 0, "plan": HALF.to_json()}]


@pytest.mark.parametrize(
    "torn",
    [b'{"from": 1000, "pl', _line(1000, ALL)[:-1], b"\x00\x00\x00\x00"],
    ids=["half-a-line", "all-but-the-newline", "zeros"],
)
def test_a_torn_last_line_is_ignored_and_cut_by_the_next_writer(tmp_path: Path, torn: bytes) -> None:
    """A line without its newline is a write that never finished: its writer died before moving the
    mark, so nobody was handed those offsets and nothing is lost by dropping it."""
    log = RoutingLog(tmp_path)
    log.plan_range(0, 1000, HALF)
    with open(tmp_path / "routing.jsonl", "ab") as f:
        f.write(torn)
    assert log.segments() == [Segment(0, HALF)]
    assert log.plan_range(0, 1000, ALL) == (Segment(0, HALF),)
    assert log.plan_range(1000, 2000, LOCAL3) == (Segment(1000, LOCAL3),)
    assert _lines(tmp_path) == [{"from": 0, "plan": HALF.to_json()}, {"from": 1000, "plan": LOCAL3.to_json()}]


BAD_LINES = {
    "not-json": b"garbage",
    "no-plan": b'{"from": 500}',
    "bad-plan": _line(500, HALF)[:-1].replace(b'"share": 0.5', b'"share": 2.0'),
    "negative-offset": _line(-1, HALF)[:-1],
    "not-utf8": b"\xff\xfe",
    "starts-before-the-line-above": _line(50, ALL)[:-1],
}


@pytest.mark.parametrize("bad", list(BAD_LINES.values()), ids=list(BAD_LINES))
def test_a_malformed_line_before_the_last_is_an_error_naming_the_file_and_line(
    tmp_path: Path, bad: bytes
) -> None:
    """A whole line that does not parse is not a torn write: which plan routed those offsets is lost,
    and guessing would re-route records a committed epoch already counted."""
    path = tmp_path / "routing.jsonl"
    path.write_bytes(_line(0, HALF) + _line(100, LOCAL3) + bad + b"\n" + _line(1000, ALL))
    (tmp_path / "routing.hwm").write_text("2000")
    before = path.read_bytes()
    log = RoutingLog(tmp_path)
    for attempt in (
        log.segments,
        lambda: log.plan_range(0, 100, LOCAL),
        lambda: log.plan_range(2000, 3000, LOCAL),
    ):
        with pytest.raises(InputError, match=re.escape(f"{path}:3:")) as info:
            attempt()
        assert "fresh checkpoint" in info.value.hint
    assert path.read_bytes() == before  # nothing was "repaired"
    assert log.high_water_mark() == 2000


def test_a_malformed_whole_last_line_is_corruption_too(tmp_path: Path) -> None:
    """The writer puts a line and its newline in one write: a last line with its newline is whole."""
    path = tmp_path / "routing.jsonl"
    path.write_bytes(_line(0, HALF) + b'{"from": 1000, "plan": null}\n')
    with pytest.raises(InputError, match=re.escape(f"{path}:2:")):
        RoutingLog(tmp_path).plan_range(1000, 2000, ALL)


def test_a_damaged_mark_or_a_lost_log_is_an_error(tmp_path: Path) -> None:
    log = RoutingLog(tmp_path)
    (tmp_path / "routing.hwm").write_text("12x")
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "routing.hwm"))):
        log.plan_range(0, 100, HALF)
    (tmp_path / "routing.hwm").write_text("2000")  # the mark says offsets were handed out ...
    with pytest.raises(InputError, match="no plan for offset 0"):  # ... but the log has no plan for them
        log.segments()


def test_segments_that_share_a_start_route_by_the_later_one(tmp_path: Path) -> None:
    """A log written before dead lines were dropped may hold one; the first routes nothing, as before."""
    (tmp_path / "routing.jsonl").write_bytes(_line(0, HALF) + _line(1000, ALL) + _line(1000, LOCAL3))
    (tmp_path / "routing.hwm").write_text("2000")
    log = RoutingLog(tmp_path)
    assert log.segments() == [Segment(0, HALF), Segment(1000, LOCAL3)]
    assert log.plan_range(500, 2500, ALL) == (Segment(0, HALF), Segment(1000, LOCAL3), Segment(2000, ALL))


@pytest.mark.parametrize(
    "text",
    [b"", b"{not json", b'{"format": 1}', b"[1, 2]", b'{"format": 9, "version": 1}', b"\xff\xfe"],
    ids=["empty", "not-json", "missing-fields", "not-an-object", "unknown-fields", "not-utf8"],
)
def test_a_malformed_plan_file_is_an_error_naming_it(tmp_path: Path, text: bytes) -> None:
    (tmp_path / "plan.json").write_bytes(text)
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "plan.json"))) as info:
        read_current_plan(tmp_path)
    assert "write_current_plan" in info.value.hint


def test_a_missing_plan_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "plan.json"))):
        read_current_plan(tmp_path)


def test_a_keyed_stream_routes_by_the_plans_key_groups_and_any_other_by_its_share() -> None:
    import numpy as np

    from core.offload_plan import record_units
    from router.routing_log import routed_mask

    plan = OffloadPlan.of_share(1, 0.25, 2)  # the first 32 of 128 groups, and a quarter of records
    ids = np.arange(1000, 1300)
    groups = (ids * 7) % 128
    assert routed_mask((Segment(0, plan),), ids, groups).tolist() == [g < 32 for g in groups]
    assert np.array_equal(routed_mask((Segment(0, plan),), ids), record_units(ids) < 0.25)
    assert not routed_mask((Segment(0, LOCAL), Segment(2000, plan)), ids, groups).any()


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths fsync'ed from now on."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_routed_range_is_on_disk_before_it_is_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's line, the high-water mark and the directory entry of the mark are flushed to disk
    before `plan_range` returns: a machine that loses power never forgets an offset it routed."""
    synced = _synced(monkeypatch)
    RoutingLog(tmp_path).plan_range(0, 1000, HALF)
    assert any(p.endswith("routing.jsonl") for p in synced), synced
    mark = [i for i, p in enumerate(synced) if re.search(r"routing\.hwm", p)]
    assert mark and str(tmp_path) in synced[mark[-1] + 1 :], synced  # the mark, then its directory


def test_an_epoch_under_an_unchanged_plan_flushes_nothing_until_the_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark on disk runs RESERVE offsets ahead: the epochs that stay within it move only this boot's
    exact mark, and a plan change still starts at the first offset nobody was handed."""
    monkeypatch.setattr(routing_log, "_boot_id", lambda: "boot-1")
    log = RoutingLog(tmp_path, RESERVE)
    log.plan_range(0, 1000, HALF)
    synced = _synced(monkeypatch)
    for lo in range(1000, 10_000, 1000):
        assert log.plan_range(lo, lo + 1000, HALF) == (Segment(0, HALF),)
    assert synced == []
    assert log.high_water_mark() == 10_000
    assert log.plan_range(10_000, 11_000, ALL) == (Segment(10_000, ALL),)
    assert any(p.endswith("routing.jsonl") for p in synced) and any("routing.hwm" in p for p in synced)
    synced.clear()
    past = 11_000 + RESERVE
    assert log.plan_range(11_000, past + 1, ALL) == (Segment(10_000, ALL),)  # beyond the reservation
    assert any("routing.hwm" in p for p in synced)


def test_after_a_power_loss_the_reservation_stands_in_for_the_lost_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine that lost power comes back in another boot: this boot's marks are gone or ignored, and
    a new plan starts at the reservation, past every offset handed out, which keep their plans."""
    monkeypatch.setattr(routing_log, "_boot_id", lambda: "boot-1")
    log = RoutingLog(tmp_path, RESERVE)
    log.plan_range(0, 1000, HALF)
    log.plan_range(1000, 5000, HALF)
    monkeypatch.setattr(routing_log, "_boot_id", lambda: "boot-2")
    assert log.high_water_mark() == 1000 + RESERVE
    assert log.plan_range(1000, 5000, ALL) == (Segment(0, HALF),)  # a replayed epoch routes as before
    assert log.plan_range(5000, 6000, ALL) == (Segment(0, HALF),)  # within the reservation: unchanged
    assert log.plan_range(6000, 2 * RESERVE, ALL) == (Segment(0, HALF), Segment(1000 + RESERVE, ALL))
    assert log.high_water_mark() == 2 * RESERVE


@pytest.mark.parametrize(
    ("boot", "reserve"), [(None, RESERVE), ("boot-1", 0)], ids=["no-boot-id", "no-reserve"]
)
def test_without_a_boot_id_or_a_reserve_every_mark_is_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str | None, reserve: int
) -> None:
    """Not on Linux, and in a log whose writer keeps no reserve (a source's files: few and coarse)."""
    monkeypatch.setattr(routing_log, "_boot_id", lambda: boot)
    log = RoutingLog(tmp_path, reserve)
    log.plan_range(0, 1000, HALF)
    synced = _synced(monkeypatch)
    log.plan_range(1000, 2000, HALF)
    assert any("routing.hwm" in p for p in synced)
    assert log.high_water_mark() == 2000
    assert (tmp_path / "routing.hwm").read_text() == "2000"
