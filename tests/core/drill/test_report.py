"""Tests of the drill report: the table, report.json, report.md and the plots people judge a drill by.

The report is what the acceptance of a drill is read from, so the ratios it prints are checked against
numbers computed here, and the awkward inputs a real drill produces (nulls, NaN, a run without some
series, a single policy, no sponge run, no burst) must all still give a complete, valid report.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from core.drill import report_numbers as numbers
from core.drill import report_tables as tables
from core.drill.report import write_json, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("latency", "vm_cpu", "workers", "offload_share", "drill")
DURATION = 90
BURST = (20, 50)


def _in_burst(s: int) -> bool:
    return BURST[0] <= s < BURST[1]


def _run(policy: str, peak: float, *, offloads: bool = False, **overrides: Any) -> dict[str, Any]:
    """A run shaped like the runner's: p99 rises to `peak` during the burst, workers only if it offloads."""
    p99 = [peak * (0.6 + 0.4 * (s - BURST[0]) / 29) if _in_burst(s) else 120.0 for s in range(DURATION)]
    run: dict[str, Any] = {
        "policy": policy,
        "peak_p99_ms": peak,
        "pre_burst_p99_ms": 120.0,
        "mean_p99_ms_during_burst": round(peak * 0.7, 1),
        "p99_ms_by_second": p99,
        "p50_ms_by_second": [v / 3 for v in p99],
        "reaction_s": 1.2 if offloads else None,
        "recovery_s": 8.0 if offloads else None,
        "lambda_worker_seconds": 41.5 if offloads else 0.0,
        "cost_usd": 0.0012 if offloads else 0.0,
        "results_match_reference": True,
        "vm_cpu_by_second": [0.97 if _in_burst(s) else 0.68 for s in range(DURATION)],
        "workers_by_second": [3 if offloads and _in_burst(s) else 0 for s in range(DURATION)],
        "offload_share_by_second": [0.45 if offloads and _in_burst(s) else 0.0 for s in range(DURATION)],
        "vm_cores_by_second": [2 if policy == "vmbase" and s >= 45 else 1 for s in range(DURATION)],
        "events": 4_200_000,
        "wall_s": 95.3,
        "notes": "new executor at 45.1 s" if policy == "vmbase" else "",
    }
    run.update(overrides)
    return run


def _report(*runs: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "query": "q5",
        "pattern": "sudden:2x:30s",
        "duration_s": DURATION,
        "target": "embedded",
        "stable_rate": 60000,
        "burst": [{"start_s": float(BURST[0]), "end_s": float(BURST[1])}],
        "rate_by_second": [120000 if _in_burst(s) else 60000 for s in range(DURATION)],
        "generated_at": "2026-11-21T12:00:00Z",
        "command": "sponge drill --query q5 --pattern sudden:2x:30s --compare sponge,noscaling,vmbase,over",
        "runs": list(runs),
    }
    report.update(overrides)
    return report


def _four_policies() -> dict[str, Any]:
    return _report(
        _run("sponge", 850.0, offloads=True),
        _run("noscaling", 4000.0),
        _run("vmbase", 1930.0),
        _run("over", 700.0, cost_usd=0.0024),
    )


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 10_000, f"{path} is only {len(data)} bytes"


def _assert_complete(paths: dict[str, Path], out: Path) -> None:
    assert set(paths) == {"json", "markdown", *PLOTS}
    for key in PLOTS:
        assert paths[key] == out / f"{key}.png"
        _assert_png(paths[key])
    assert paths["json"] == out / "report.json"
    assert paths["markdown"] == out / "report.md"
    json.loads(paths["json"].read_text(), parse_constant=_no_nan)


def _no_nan(token: str) -> None:
    raise AssertionError(f"report.json holds {token}, which is not JSON")


def test_a_four_policy_drill_writes_every_file_with_the_right_ratios(tmp_path: Path) -> None:
    report = _four_policies()
    original = copy.deepcopy(report)
    console = Console(record=True, width=200)
    paths = write_report(report, tmp_path / "out", console=console)

    _assert_complete(paths, tmp_path / "out")
    assert report == original, "write_report must not change its input"
    assert json.loads(paths["json"].read_text()) == report

    md = paths["markdown"].read_text()
    assert md.startswith("# Burst drill: q5, sudden:2x:30s, 90 s (2026-11-21T12:00:00Z)")
    assert report["command"] in md
    assert "*measured on this machine*" in md
    for policy in ("sponge", "noscaling", "vmbase", "over"):
        assert f"| {policy} |" in md
    # The verdict's ratios are sponge's peak over each other policy's, rounded to two decimals.
    for other, peak in (("noscaling", 4000.0), ("vmbase", 1930.0), ("over", 700.0)):
        assert f"{850.0 / peak:.2f}x {other}'s" in md
    assert "0.21x noscaling's (target ≤ 0.3x: met)" in md
    assert "0.44x vmbase's (target ≤ 0.5x: met)" in md
    assert "1.21x over's (target ≤ 1.2x: missed)" in md
    assert "it cost 0.50x what over cost" in md
    assert "it first offloaded 1.2 s after the onset (target ≤ 2 s: met)" in md
    assert "all outputs matched the batch reference" in md
    # The table's ratio column is each policy's peak over sponge's.
    assert "| sponge | 850 | 120 | 595 | 1.2 | 8.0 | 41.5 | $0.0012 | ✓ | 1.00x |" in md
    assert "| noscaling | 4,000 | 120 | 2,800 | never | never | 0.0 | $0 | ✓ | 4.71x |" in md
    assert (
        "before the burst the policies' p99 lay between 120 and 120 ms (within 25% of each other: fair)" in md
    )
    assert "peak p99 vs sponge" in md
    # Three or more policies get the pairwise matrix: vmbase's row, noscaling's column = 1930 / 4000.
    assert "| vmbase | 2.27x | 0.48x | — | 2.76x |" in md
    for key in PLOTS:
        assert f"]({key}.png)" in md

    text = console.export_text()
    for policy in ("sponge", "noscaling", "vmbase", "over"):
        assert policy in text
    assert "peak p99 (ms)" in text and "4.71x" in text and "✓" in text
    assert "measured on this machine" in text


def test_nulls_nan_and_missing_series_are_tolerated(tmp_path: Path) -> None:
    gappy = _run("sponge", 850.0, offloads=True)
    gappy["p99_ms_by_second"][5] = None
    gappy["p99_ms_by_second"][6] = math.nan
    gappy["p99_ms_by_second"][-1] = None
    gappy["vm_cpu_by_second"] = [None if s % 7 == 0 else 0.7 for s in range(DURATION)]
    gappy["workers_by_second"] = gappy["workers_by_second"][:40]  # shorter than the trace
    bare = {"policy": "noscaling", "peak_p99_ms": math.nan, "results_match_reference": None}
    failed = _run("vmbase", 1930.0, results_match_reference=False, cost_usd=None)
    del failed["offload_share_by_second"], failed["vm_cores_by_second"]
    report = _report(gappy, bare, failed)

    paths = write_report(report, tmp_path, console=Console(record=True, width=200))

    _assert_complete(paths, tmp_path)
    written = json.loads(paths["json"].read_text())
    assert written["runs"][0]["p99_ms_by_second"][5] is None
    assert written["runs"][0]["p99_ms_by_second"][6] is None  # NaN is written as null
    assert written["runs"][1]["peak_p99_ms"] is None
    md = paths["markdown"].read_text()
    assert "| noscaling | n/a | n/a | n/a | never | never | n/a | n/a | — | n/a |" in md
    assert "n/a noscaling's" in md
    assert "0.44x vmbase's" in md
    assert "the outputs of vmbase did NOT match the batch reference" in md
    assert "noscaling was not checked against the batch reference" in md


def test_a_single_run_gives_a_complete_report(tmp_path: Path) -> None:
    report = _report(_run("sponge", 850.0, offloads=True))
    paths = write_report(report, tmp_path)

    _assert_complete(paths, tmp_path)
    md = paths["markdown"].read_text()
    assert "| sponge | 850 |" in md and "| 1.00x |" in md
    assert "row ÷ column" not in md
    assert "sponge's peak p99 was 850 ms; its mean p99 during the burst was 595 ms" in md
    assert "its output matched the batch reference" in md


def test_without_sponge_the_first_run_is_the_reference(tmp_path: Path) -> None:
    report = _report(_run("noscaling", 4000.0), _run("vmbase", 1930.0))
    md = tables.write_markdown(report, tmp_path, plots=[]).read_text()

    assert "peak p99 vs noscaling" in md
    assert f"noscaling's peak p99 was 4,000 ms: {4000 / 1930:.2f}x vmbase's;" in md
    assert "| vmbase | 1,930 | 120 | 1,351 | never | never | 0.0 | $0 | ✓ | 0.48x |" in md
    assert "target ≤" not in md, "the acceptance targets are about sponge only"
    assert "it never offloaded a record" in md
    assert "row ÷ column" not in md  # two policies: the ratio column says it all


def test_missed_targets_are_called_missed() -> None:
    report = _report(
        _run("sponge", 1500.0, offloads=True, reaction_s=3.4),
        _run("noscaling", 3000.0),
    )
    text = numbers.verdict(report)
    assert "0.50x noscaling's (target ≤ 0.3x: missed)" in text
    assert "it first offloaded 3.4 s after the onset (target ≤ 2 s: missed)" in text


def test_a_target_missed_against_more_vm_cores_says_the_start_made_the_gap() -> None:
    """Sponge started 1.8x over's p99 on one VM core against two, and the burst raised it less than it
    raised over: the report names over's extra core before the burst, not the burst, as the gap."""

    def on(cores: int) -> dict[str, Any]:
        return {"spark": "standalone", "vm_cores": cores}

    sponge = _run("sponge", 2540.0, offloads=True, pre_burst_p99_ms=2150.0, deployment=on(1))
    over = _run("over", 1800.0, pre_burst_p99_ms=1188.0, deployment=on(2))
    text = numbers.verdict(_report(sponge, over))
    assert (
        "1.41x over's (target ≤ 1.2x: missed: it started 1.81x over's p99 on 1 VM core against 2, and the "
        "burst raised it 1.18x against over's 1.52x: the gap is over's extra VM core before the burst, not "
        "the burst)" in text
    )
    # A burst that raised sponge more than over: the start is not the whole story, and nothing is said.
    worse = numbers.verdict(_report({**sponge, "pre_burst_p99_ms": 1200.0}, over))
    assert "(target ≤ 1.2x: missed);" in worse and "the gap is" not in worse
    # Equal VM cores: nothing to say about cores.
    same = numbers.verdict(_report(sponge, {**over, "deployment": on(1)}))
    assert "(target ≤ 1.2x: missed);" in same


def test_no_runs_and_no_burst_still_write_every_file(tmp_path: Path) -> None:
    report = _report(burst=[], rate_by_second=None)
    paths = write_report(report, tmp_path, label="simulated")

    _assert_complete(paths, tmp_path)
    md = paths["markdown"].read_text()
    assert "*simulated*" in md and "no burst" in md
    assert "No runs were recorded." in md


def test_without_a_burst_reaction_and_recovery_read_as_not_applicable() -> None:
    report = _report(_run("sponge", 300.0), burst=[])
    row = tables._table_rows(report)[0]
    assert [text for text, _ in row[4:6]] == ["—", "—"]
    assert "offloaded" not in numbers.verdict(report)


def test_unequal_starts_idle_cores_and_early_offloading_are_called_out(tmp_path: Path) -> None:
    """What a skeptic checks first is stated in the verdict and in report.md's capacity table."""
    deployment = {"spark": "standalone", "vm_cores": 1, "shuffle_partitions": 2, "lambda_workers": 4}
    sponge = _run(
        "sponge",
        850.0,
        offloads=True,
        deployment=deployment,
        steady_s=14.0,
        before_onset={"max_share": 0.9, "worker_seconds": 12.0},
        in_burst={"admitted_events_per_s": 120_000.0, "vm_cpu": 0.8, "behind_with_idle_cores": False},
    )
    over = _run(
        "over",
        3000.0,
        pre_burst_p99_ms=160.0,
        steady_s=None,
        deployment={**deployment, "vm_cores": 2, "lambda_workers": 0},
        in_burst={"admitted_events_per_s": 90_000.0, "vm_cpu": 0.55, "behind_with_idle_cores": True},
    )
    report = _report(sponge, over)
    text = numbers.verdict(report)
    assert "over's was 160 ms on 2 VM cores (UNFAIR: over 25% above theirs)" in text
    assert "over fell behind in the burst with its VM cores only 55% busy" in text
    assert "sponge offloaded before the onset (share up to 90%, 12.0 worker-seconds)" in text
    assert "over did not reach a steady state before the onset (pass a longer --lead)" in text
    md = tables.write_markdown(report, tmp_path, plots=[]).read_text()
    row = "| sponge | standalone, 1 VM core + up to 4 Lambda workers | 14.0 | 7.08x | 120,000 | 80% | 90% "
    row += "| n/a |"
    assert row in md  # over's cost is 0 in this report: no ratio
    assert (
        "| over | standalone, 2 VM cores | never | 18.8x | 90,000 | 55% (behind with idle cores) | 0% | n/a |"
        in md
    )
    warm = _report({**sponge, "provisioned_environments": 2}, over)
    assert "up to 4 Lambda workers, 2 kept warm by provisioned concurrency (billed) |" in (
        tables.write_markdown(warm, tmp_path, plots=[]).read_text()
    )
    streamed = _report({**sponge, "stream_shards": 2}, over)
    assert "up to 4 Lambda workers, reading a Kinesis stream of 2 shards (shard-hours billed) |" in (
        tables.write_markdown(streamed, tmp_path, plots=[]).read_text()
    )
    fair = _report(_run("sponge", 850.0), _run("over", 700.0, pre_burst_p99_ms=100.0))
    assert "fair)" in numbers.verdict(fair) and "UNFAIR" not in numbers.verdict(fair)


def _started(policy: str, pre_ms: float, cores: int) -> dict:
    deployment = {"spark": "standalone", "vm_cores": cores, "shuffle_partitions": 2, "lambda_workers": 0}
    return _run(policy, 1000.0, pre_burst_p99_ms=pre_ms, deployment=deployment)


def test_the_pre_burst_spread_is_taken_among_policies_with_equal_vm_cores() -> None:
    """Over's extra core starts it lower, which only makes sponge's ratio to it stricter; a slower start
    than the one-core policies' would flatter sponge, and is called unfair."""
    lower = _report(
        _started("sponge", 2229.0, 1), _started("noscaling", 2081.0, 1), _started("over", 1172.0, 2)
    )
    start = numbers.pre_burst(lower)
    assert start is not None and start.fair
    assert (start.base_cores, start.low_ms, start.high_ms) == (1, 2081.0, 2229.0)
    assert start.spread == pytest.approx(2229 / 2081)
    text = numbers.verdict(lower)
    assert (
        "before the burst the 1-core policies' p99 lay between 2,081 and 2,229 ms (within 25% of each other: "
        "fair); over's was 1,172 ms on 2 VM cores (its extra cores' doing: a lower start only makes a ratio "
        "to it stricter)" in text
    )
    assert "UNFAIR" not in text

    apart = _report(
        _started("sponge", 2800.0, 1), _started("noscaling", 2081.0, 1), _started("over", 1172.0, 2)
    )
    assert not numbers.pre_burst(apart).fair
    assert "(UNFAIR: 1.35x apart, over the 25% allowed)" in numbers.verdict(apart)

    slow = _report(_started("sponge", 2229.0, 1), _started("over", 2900.0, 2))
    start = numbers.pre_burst(slow)
    assert start is not None and start.spread is None and not start.fair
    assert "p99 was 2,229 ms; over's was 2,900 ms on 2 VM cores (UNFAIR: over 25% above theirs)" in (
        numbers.verdict(slow)
    )

    unknown = _report(_run("sponge", 850.0, pre_burst_p99_ms=100.0), _started("over", 120.0, 2))
    assert numbers.pre_burst(unknown).spread == pytest.approx(1.2)  # no deployment: all runs compared


def test_a_baseline_without_sponges_operators_starts_beside_the_spread_not_in_it() -> None:
    sfbase = _started("sfbase", 2674.0, 1)
    sfbase["deployment"]["lacks"] = "router, transient and merge operators"
    report = _report(_started("sponge", 1803.0, 1), _started("noscaling", 1850.0, 1), sfbase)
    start = numbers.pre_burst(report)
    assert start is not None and start.fair and start.high_ms == 1850.0
    assert start.apart == ((2, "router, transient and merge operators", 2674.0),)
    assert numbers.deployment_text(sfbase).endswith(", without router, transient and merge operators")
    assert (
        "between 1,803 and 1,850 ms (within 25% of each other: fair); sfbase's was 2,674 ms (without "
        "router, transient and merge operators: another plan by design)" in numbers.verdict(report)
    )


def test_missing_summary_figures_are_computed_from_the_series() -> None:
    run = _run("sponge", 850.0)
    del run["peak_p99_ms"], run["mean_p99_ms_during_burst"]
    p99 = run["p99_ms_by_second"]
    assert numbers.peak_p99(run) == max(p99)
    bursts = [(20.0, 50.0)]
    assert numbers.mean_p99_during_burst(run, bursts) == pytest.approx(sum(p99[20:50]) / 30)


def test_peak_ratios_hold_every_pair_and_duplicate_policies_get_distinct_labels() -> None:
    report = _report(_run("sponge", 800.0), _run("sponge", 400.0), _run("over", 0.0))
    assert numbers.policy_labels(report) == ["sponge", "sponge #2", "over"]
    ratios = numbers.peak_ratios(report)
    assert ratios["sponge"]["sponge #2"] == pytest.approx(2.0)
    assert ratios["sponge #2"]["sponge"] == pytest.approx(0.5)
    assert ratios["sponge"]["over"] is None  # a zero peak gives no ratio, not a division error
    assert ratios["over"]["sponge"] == 0.0


def test_report_json_keeps_the_contract_keys_first_and_series_on_one_line(tmp_path: Path) -> None:
    report = _four_policies()
    report["runs"][0] = dict(reversed(list(report["runs"][0].items())))
    report = dict(reversed(list(report.items())))
    text = write_json(report, tmp_path).read_text()

    assert list(json.loads(text)) == [
        "query", "pattern", "duration_s", "target", "stable_rate", "burst", "generated_at", "command",
        "runs", "rate_by_second",
    ]  # fmt: skip
    assert list(json.loads(text)["runs"][0])[:3] == ["policy", "peak_p99_ms", "mean_p99_ms_during_burst"]
    assert text.count("\n") < 150, "per-second series must not take a line per value"
    assert text == write_json(report, tmp_path).read_text()


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "n/a"), (4.25, "4.2"), (850.0, "850"), (12345.6, "12,346")],
)
def test_fmt_ms(value: float | None, text: str) -> None:
    assert numbers.fmt_ms(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "n/a"), (0.2125, "0.21x"), (4.705, "4.71x"), (12.34, "12.3x"), (150.2, "150x")],
)
def test_fmt_ratio(value: float | None, text: str) -> None:
    assert numbers.fmt_ratio(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "n/a"), (0.0, "$0"), (0.0012, "$0.0012"), (0.000012345, "$0.000012"), (3.456, "$3.46")],
)
def test_fmt_usd(value: float | None, text: str) -> None:
    assert numbers.fmt_usd(value) == text


def test_importing_the_report_module_does_not_import_matplotlib() -> None:
    code = "import sys, core.drill.report; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])


def test_a_policy_held_by_its_sources_cap_is_told_so_with_how_far_offloading_raised_it() -> None:
    """Fell behind with idle cores while its epochs were full at the cap: the verdict names the cap, and
    for sponge how far its offloaded share raised it."""
    deployment = {"spark": "standalone", "vm_cores": 1, "shuffle_partitions": 2, "batch_events": 200_000}

    def behind(policy: str, at_cap: dict | None, offloads: bool) -> dict[str, Any]:
        burst = {"admitted_events_per_s": 238_000.0, "vm_cpu": 0.72, "behind_with_idle_cores": True}
        return _run(
            policy, 8_900.0, offloads=offloads, deployment=deployment, in_burst={**burst, "at_cap": at_cap}
        )

    sponge = behind("sponge", {"share": 1.0, "cap_events": 241_446.0}, True)
    noscaling = behind("noscaling", {"share": 0.9, "cap_events": 200_000.0}, False)
    over = behind("over", {"share": 0.06, "cap_events": 400_000.0}, False)
    text = numbers.verdict(_report(sponge, noscaling, over))
    assert (
        "sponge fell behind in the burst with its VM cores only 72% busy: its source's cap held it (100% of "
        "its epochs there were full at 241,446 events: its offloaded share raised it 1.2x)"
    ) in text
    assert (
        "noscaling fell behind in the burst with its VM cores only 72% busy: its source's cap held it (90% "
        "of its epochs there were full at 200,000 events);"
    ) in text
    assert "over fell behind in the burst with its VM cores only 72% busy;" in text  # not the cap
    assert "its source's cap" not in numbers.verdict(_report(behind("sponge", None, True)))
