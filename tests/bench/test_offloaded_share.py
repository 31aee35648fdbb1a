"""Tests of bench/offloaded_share.py: the per-record slopes and the shares from them, the noise that
withholds a share, equal epochs at both sizes, where the workers' CPU comes from, the VM's CPU with
reaped children, the JSON line, and one small real run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bench.offloaded_share as share_bench
from bench.offloaded_share import (
    batch_cap,
    epoch_notes,
    median_figures,
    noise_floor_us,
    offloaded_cap,
    parse_args,
    repeat_figures,
    run_order,
    share_figures,
    slope_us,
    tree_cpu_seconds,
    worker_seconds,
)
from core.offload_plan import share_scale

ROOT = Path(__file__).resolve().parents[2]


def _runs(sources: tuple[float, float], plain: tuple[float, float], offloaded: tuple[float, float],
          worker: tuple[float | None, float | None] = (0.1, 0.4),
          records: tuple[int, int] = (1_000, 3_000)) -> dict[str, Any]:  # fmt: skip
    """A repeat's runs: each variant's VM CPU seconds at N1 and N2, the workers' CPU and records."""
    return {
        "sources": [{"cpu_s": sources[0]}, {"cpu_s": sources[1]}],
        "plain": [{"cpu_s": plain[0]}, {"cpu_s": plain[1]}],
        "offloaded": [
            {"cpu_s": offloaded[0], "worker_s": worker[0], "records_offloaded": records[0]},
            {"cpu_s": offloaded[1], "worker_s": worker[1], "records_offloaded": records[1]},
        ],
    }


def test_a_slope_is_microseconds_per_event_between_the_two_sizes() -> None:
    assert slope_us(2.0, 3.5, 10_000, 40_000) == pytest.approx(50.0)  # 1.5 s over 30,000 events
    assert slope_us(3.0, 2.5, 1_000, 2_000) == pytest.approx(-500.0)  # noise can make it negative


def test_fixed_costs_cancel_and_the_sources_slope_is_subtracted_from_both_others() -> None:
    # Every variant pays a large fixed cost (the same at both sizes) plus a per-event one: sources
    # 10 us/event, plain 30, offloaded 16; the workers 0.1 s fixed + 15 us/event.
    n1, n2 = 10_000, 30_000

    def cpu(fixed: float, us: float) -> tuple[float, float]:
        return fixed + n1 * us / 1e6, fixed + n2 * us / 1e6

    runs = _runs(cpu(3.0, 10), cpu(7.0, 30), cpu(9.0, 16), worker=cpu(0.1, 15), records=(2_000, 6_000))
    fig = repeat_figures(runs, n1, n2)
    assert fig["slopes_us_per_event"] == pytest.approx({"sources": 10.0, "plain": 30.0, "offloaded": 16.0})
    assert fig["v_plain_us_per_event"] == pytest.approx(20.0)
    assert fig["v_resid_us_per_event"] == pytest.approx(6.0)
    assert fig["w_us_per_event"] == pytest.approx(15.0)
    assert fig["w_us_per_offloaded_record"] == pytest.approx(0.3 / 4_000 * 1e6)  # per record, not event


def test_without_the_workers_cpu_at_either_size_there_is_no_w() -> None:
    fig = repeat_figures(_runs((1, 2), (1, 3), (1, 2), worker=(None, 0.5)), 1_000, 2_000)
    assert fig["w_us_per_event"] is None and fig["w_us_per_offloaded_record"] is None
    assert fig["v_plain_us_per_event"] == pytest.approx(1_000.0)


def test_share_is_w_over_w_plus_v_plain_and_vm_cpu_taken_is_what_the_vm_no_longer_spends() -> None:
    fig = share_figures(1.0, 3.0, 1.5)
    assert fig["share"] == pytest.approx(0.25)
    assert fig["vm_cpu_taken"] == pytest.approx(0.5)
    assert (fig["w_us_per_event"], fig["v_plain_us_per_event"], fig["v_resid_us_per_event"]) == (
        1.0,
        3.0,
        1.5,
    )
    assert fig["notes"] == []


def test_vm_cpu_taken_is_negative_when_offloading_costs_the_vm_more_than_the_operators_did() -> None:
    fig = share_figures(0.2, 4.0, 5.0, noise_v_plain=1.0, noise_v_resid=1.0)
    assert fig["vm_cpu_taken"] == pytest.approx(-0.25)
    assert 0.0 <= fig["share"] <= 1.0 and fig["notes"] == []


def test_a_v_plain_within_noise_or_not_positive_gives_no_ratio_and_says_why() -> None:
    for v_plain, word in ((1.5, "within noise"), (0.0, "not positive"), (-3.0, "not positive")):
        fig = share_figures(1.0, v_plain, 0.5, noise_v_plain=2.0, noise_v_resid=2.0)
        assert fig["share"] is None and fig["vm_cpu_taken"] is None
        assert fig["v_plain_us_per_event"] == v_plain  # the figure itself is still shown
        (note,) = fig["notes"]
        assert note.startswith("V_plain") and word in note and "no shares" in note


def test_a_w_within_noise_gives_no_share_but_vm_cpu_taken_stands() -> None:
    for w in (0.0, -0.2, 0.3):
        fig = share_figures(w, 10.0, 5.0, noise_w=0.5)
        assert fig["share"] is None and fig["vm_cpu_taken"] == pytest.approx(0.5)
        assert len(fig["notes"]) == 1 and fig["notes"][0].startswith("W ")
    assert share_figures(None, 10.0, 5.0)["share"] is None  # not measured: the caller reports an error


def test_a_v_resid_near_or_below_zero_keeps_vm_cpu_taken_with_a_note() -> None:
    near = share_figures(1.0, 10.0, -0.5, noise_v_resid=1.0)
    assert near["vm_cpu_taken"] == pytest.approx(1.05)
    assert "within noise of 0" in near["notes"][0] and "within 0.10" in near["notes"][0]
    below = share_figures(1.0, 10.0, -3.0, noise_v_resid=1.0)
    assert below["vm_cpu_taken"] == pytest.approx(1.3) and "below 0 beyond noise" in below["notes"][0]


def test_the_noise_floor_is_four_runs_of_noise_over_the_size_difference() -> None:
    assert noise_floor_us(0.25, 60_000, 180_000) == pytest.approx(2 * 0.25 / 120_000 * 1e6)


def test_medians_are_of_each_repeat_s_slopes_and_the_shares_follow_from_them() -> None:
    repeats = [
        {**share_figures(1.0, 6.0, 3.0), "w_us_per_offloaded_record": 10.0,
         "slopes_us_per_event": {"sources": 1.0, "plain": 7.0, "offloaded": 4.0}},
        {**share_figures(3.0, 2.0, 1.0), "w_us_per_offloaded_record": 30.0,
         "slopes_us_per_event": {"sources": 2.0, "plain": 4.0, "offloaded": 3.0}},
        {**share_figures(2.0, 4.0, 5.0), "w_us_per_offloaded_record": 20.0,
         "slopes_us_per_event": {"sources": 3.0, "plain": 7.0, "offloaded": 8.0}},
    ]  # fmt: skip
    fig = median_figures(repeats, floor_us=0.5)
    assert (fig["w_us_per_event"], fig["v_plain_us_per_event"], fig["v_resid_us_per_event"]) == (
        2.0,
        4.0,
        3.0,
    )
    assert fig["share"] == pytest.approx(2.0 / 6.0, abs=1e-4)  # from the medians, not a median of shares
    assert fig["vm_cpu_taken"] == pytest.approx(0.25)
    assert fig["w_us_per_offloaded_record"] == 20.0
    assert fig["slopes_us_per_event"] == {"sources": 2.0, "plain": 7.0, "offloaded": 4.0}
    # The repeats' spread is the noise where it exceeds the floor: half the range of V_plain's 2..6.
    assert fig["noise_us_per_event"] == {"w": 1.0, "v_plain": 2.0, "v_resid": 2.0}


def test_a_spread_of_repeats_wider_than_v_plain_withholds_the_shares() -> None:
    repeats = [
        {**share_figures(1.0, v, 1.0), "w_us_per_offloaded_record": 1.0,
         "slopes_us_per_event": {"sources": 1.0, "plain": 1.0, "offloaded": 1.0}}
        for v in (-4.0, 1.0, 6.0)
    ]  # fmt: skip
    fig = median_figures(repeats, floor_us=0.1)
    assert fig["v_plain_us_per_event"] == 1.0 and fig["share"] is None and fig["vm_cpu_taken"] is None
    assert "within noise (noise 5.000)" in fig["notes"][0]
    one = median_figures([{**repeats[1], "w_us_per_event": None}], floor_us=0.1)
    assert one["w_us_per_event"] is None and one["share"] is None  # a repeat without W: no median W


def test_every_size_cuts_the_same_number_of_epochs() -> None:
    for events in (1, 999, 3_000, 9_000, 60_000, 180_000, 1_234_567):
        for epochs in (1, 3, 6):
            if epochs > events:
                continue
            cap = batch_cap(events, epochs)
            assert math.ceil((events + 1) / cap) == epochs  # the punctuation's offset included


def test_the_offloaded_run_s_stretched_cap_cuts_the_same_epochs() -> None:
    # The routed source stretches its cap by share_scale(1.0) (core/spark/source.py `_batch_cap`).
    for events in (3_000, 9_000, 60_000, 180_000, 1_234_567):
        cap = batch_cap(events, 6)
        stretched = int(offloaded_cap(cap) * share_scale(1.0))
        assert stretched >= cap and math.ceil((events + 1) / stretched) == 6


def test_an_epoch_mismatch_across_sizes_is_a_note() -> None:
    assert epoch_notes({"sources": [6, 6], "plain": [7, 7], "offloaded": [6, 6]}) == []
    (note,) = epoch_notes({"sources": [6, 6], "plain": [6, 7], "offloaded": [6, 6]})
    assert note.startswith("plain cut 6 epochs at N1 but 7 at N2")


def test_sizes_alternate_between_repeats() -> None:
    assert [run_order(i) for i in range(4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_w_comes_from_the_summary_else_the_agent_s_totals_and_a_missing_one_is_not_zero() -> None:
    assert worker_seconds({"worker_cpu_s": 1.5, "records_offloaded": 10}, {"worker_cpu_us": 9}) == (
        1.5,
        "summary worker_cpu_s",
    )
    assert worker_seconds({"records_offloaded": 10}, {"worker_cpu_us": 250_000}) == (
        0.25,
        "agent worker_cpu_us",
    )
    # A summary written from an agent without the counter says 0: the agent's totals decide.
    assert (
        worker_seconds({"worker_cpu_s": 0.0, "records_offloaded": 10}, {"worker_cpu_us": 500_000})[0] == 0.5
    )
    assert worker_seconds({"records_offloaded": 10}, {})[0] is None  # an agent without the counter
    assert worker_seconds({"records_offloaded": 10}, {"worker_compute_us": 7})[0] is None  # not CPU time
    # Workers ran records but no CPU came back: not a share of 0.
    assert worker_seconds({"worker_cpu_s": 0.0, "records_offloaded": 10}, {"worker_cpu_us": 0})[0] is None
    assert worker_seconds({"worker_cpu_s": 0.0, "records_offloaded": 0}, {})[0] == 0.0
    assert worker_seconds({"records_offloaded": 0}, {"worker_cpu_us": 0})[0] == 0.0


@pytest.mark.timeout(60)
def test_the_vm_s_cpu_includes_children_that_have_exited_and_been_reaped() -> None:
    before = tree_cpu_seconds(os.getpid())
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)  # a CPU burner we wait for
    assert tree_cpu_seconds(os.getpid()) - before >= 0.35


def test_arguments_are_checked() -> None:
    args = parse_args(["--queries", "Q8, q4", "--events", "1000"])
    assert args.queries == ["q8", "q4"] and args.warmup_events == 1000
    assert (args.events, args.events_large, args.epochs) == (1000, 3000, 6)
    assert parse_args([]).queries == ["q3", "q4", "q6", "q8"]
    assert parse_args(["--warmup-events", "0"]).warmup_events == 0
    assert parse_args(["--events", "10", "--events-large", "50", "--epochs", "2"]).events_large == 50
    for bad in (
        ["--queries", "q9"],
        ["--repeats", "0"],
        ["--events", "0"],
        ["--warmup-events", "-1"],
        ["--epochs", "0"],
        ["--events", "5", "--epochs", "6"],
        ["--events", "100", "--events-large", "100"],
        ["--noise-cpu-s", "-1"],
        ["--noise-cpu-s", "nan"],
    ):
        with pytest.raises(SystemExit):
            parse_args(bad)


def _query(name: str, **kw: Any) -> dict[str, Any]:
    return {
        "query": name,
        **share_figures(0.5, 4.0, 6.0),
        "w_us_per_offloaded_record": 6.0,
        "epochs": {"sources": [6, 6], "plain": [7, 7], "offloaded": [7, 7]},
        "operators_offloaded": {"map1": 10, "key_by2": 10},
        "records_offloaded": [10, 30],
        "records_run_locally_by_agent": 0,
        "repeats": [],
        **kw,
    }


def test_json_mode_ends_stdout_with_one_json_object(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    report = {
        "method": "m",
        "events_small": 1_000,
        "events_large": 3_000,
        "epochs": 6,
        "seed": 1,
        "workers": 2,
        "repeats": 1,
        "elapsed_s": 1.0,
        "queries": [_query("q8"), _query("q4", share=float("nan"), notes=["V_plain is within noise"])],
    }
    monkeypatch.setattr(share_bench, "run_bench", lambda args: report)
    assert share_bench.main(["--json", "--queries", "q8,q4"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out.strip().splitlines()[-1])
    assert [q["query"] for q in data["queries"]] == ["q8", "q4"]
    assert data["queries"][0]["share"] == pytest.approx(0.5 / 4.5, abs=1e-4)
    assert data["queries"][1]["share"] is None  # strict JSON: no NaN
    assert "V_plain is within noise" in out and "s 6/6 p 7/7 o 7/7" in out
    assert "per record" in out  # the method line says the figures are per record
    monkeypatch.setattr(
        share_bench, "run_bench", lambda args: {**report, "queries": [_query("q8", error="x")]}
    )
    assert share_bench.main(["--queries", "q8"]) == 1


@pytest.mark.spark
@pytest.mark.slow  # ~50 s: a JVM, the agent and two workers, six runs of Q8 on a few thousand events
def test_a_small_real_run_of_q8_reports_finite_per_record_figures_at_equal_epochs(tmp_path: Path) -> None:
    # A subprocess: the bench owns (and stops) its own Spark session. Sizes this small are all noise
    # (even the workers' CPU, a few ms of per-chunk cost, may not grow between them): the test checks
    # the figures' shape, that a withheld share says why, and the epochs, not the figures' values, so
    # it skips the warm-up runs (a third of its time).
    cmd = [sys.executable, "-m", "bench.offloaded_share", "--queries", "q8", "--events", "3000",
           "--events-large", "9000", "--epochs", "2", "--warmup-events", "0", "--json",
           "--work", str(tmp_path / "work")]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["events_small"], report["events_large"], report["epochs"]) == (3_000, 9_000, 2)
    (q8,) = report["queries"]
    assert q8["query"] == "q8" and "error" not in q8
    for key in (
        "w_us_per_event",
        "v_plain_us_per_event",
        "v_resid_us_per_event",
        "w_us_per_offloaded_record",
    ):
        assert math.isfinite(q8[key]), key
    assert all(math.isfinite(v) for v in q8["slopes_us_per_event"].values())
    # A share is either withheld with a note saying why, or a share consistent with the figures.
    if q8["share"] is None:
        assert any(n.startswith(("V_plain", "W ")) for n in q8["notes"])
    else:
        w, v = q8["w_us_per_event"], q8["v_plain_us_per_event"]
        assert q8["share"] == pytest.approx(w / (w + v), abs=1e-3) and 0 < q8["share"] < 1
    if q8["vm_cpu_taken"] is not None:
        taken = 1 - q8["v_resid_us_per_event"] / q8["v_plain_us_per_event"]
        assert q8["vm_cpu_taken"] == pytest.approx(taken, abs=1e-3)
    # Both sizes cut the same epochs, variant by variant; the sources-only run cuts the asked count.
    assert set(q8["epochs"]) == {"sources", "plain", "offloaded"}
    for kind, (small, large) in q8["epochs"].items():
        assert small == large and small >= 2, (kind, q8["epochs"])
    assert q8["epochs"]["sources"] == [2, 2]
    assert not any("epochs at N1" in n for n in q8["notes"])
    # Every record of Q8's two chains went to a worker, through every node of its chain, three times
    # as many at N2.
    small, large = q8["records_offloaded"]
    assert small > 0 and large == pytest.approx(3 * small, rel=0.05)
    assert q8["records_run_locally_by_agent"] == 0
    assert q8["operators_offloaded"]["window_join6"] == large
    assert q8["worker_cpu_from"] in (["summary worker_cpu_s"], ["agent worker_cpu_us"])
    (rnd,) = q8["repeats"]
    assert set(rnd["runs"]) == {"sources", "plain", "offloaded"}
    assert all(r["cpu_s"] > 0 for runs in rnd["runs"].values() for r in runs)
    assert [r["events"] for r in rnd["runs"]["plain"]] == [3_000, 9_000]
    assert "q8 repeat 1/1: offloaded on 9,000 events" in done.stderr and "q8: end" in done.stderr
    (work,) = (tmp_path / "work").iterdir()  # the bench's own directory inside the one it was given
    assert (work / "q8-r1-offloaded-9000" / "summary.json").exists()
