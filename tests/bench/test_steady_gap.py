"""bench.steady_gap's figures, read from a drill's report as the drill writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.steady_gap import drill_figures, phase_gap, ratios, settled, steady_epochs


def _epochs(durations: list[float], covered: list[int]) -> list[dict[str, float]]:
    t, start, out = 100.0, 0, []
    for d, c in zip(durations, covered, strict=True):
        out.append({"started_t": t, "commit_t": t + d, "start": start, "covered": c})
        t, start = t + d, c
    return out


def test_steady_epochs_are_those_started_in_the_ten_seconds_before_the_onset() -> None:
    epochs = _epochs([9.0, 1.5, 1.7, 1.2, 1.6, 1.0], [200, 400, 600, 700, 900, 1100])
    result = {"origin": 100.0, "epochs": epochs}
    # They start at 0, 9, 10.5, 12.2, 13.4 and 15 s: an onset at 14 s keeps those from 4 s to 14 s.
    assert steady_epochs(result, onset_s=14.0) == {
        "steady_epoch_s": pytest.approx(1.55),
        "steady_epoch_events": 200,
    }
    assert steady_epochs(result, onset_s=0.0) == {"steady_epoch_s": None, "steady_epoch_events": None}


def test_a_drills_figures_and_ratios(tmp_path: Path) -> None:
    runs = []
    for policy, p99, d in (("sponge", 2200.0, 1.5), ("noscaling", 2000.0, 1.2)):
        (tmp_path / policy).mkdir()
        phases = [{"addBatch": 3000, "queryPlanning": 90}] + [
            {"addBatch": int(d * 900), "queryPlanning": 90}
        ] * 2
        result = {"origin": 100.0, "epochs": _epochs([4.0, d, d], [200, 400, 600]), "phases": phases}
        (tmp_path / policy / "result.json").write_text(json.dumps(result))
        runs.append({"policy": policy, "pre_burst_p99_ms": p99})
    report = {"burst": [{"start_s": 10.0, "end_s": 20.0}], "runs": runs}
    (tmp_path / "report.json").write_text(json.dumps(report))
    figures, phases = drill_figures(tmp_path)
    assert phases["sponge"] == {"addBatch": 1350.0, "queryPlanning": 90.0}  # the two steady epochs'
    assert phase_gap(phases) == {"addBatch": 270.0, "queryPlanning": 0.0}
    assert figures["sponge"] == {
        "pre_burst_p99_ms": 2200.0,
        "steady_epoch_s": 1.5,
        "steady_epoch_events": 200,
    }
    got = ratios(figures)
    assert round(got["pre_burst_p99_ms"], 3) == 1.1 and round(got["steady_epoch_s"], 3) == 1.25
    assert got["steady_epoch_events"] == 1.0
    figures["noscaling"]["steady_epoch_s"] = None
    assert ratios(figures)["steady_epoch_s"] is None


def test_a_drill_is_settled_only_if_every_policy_was_steady_before_the_onset(tmp_path: Path) -> None:
    def report(*steady: float | None) -> Path:
        runs = [{"policy": p, "steady_s": s} for p, s in zip(("sponge", "noscaling"), steady, strict=True)]
        (tmp_path / "report.json").write_text(json.dumps({"burst": [{"start_s": 30.0}], "runs": runs}))
        return tmp_path

    assert settled(report(8.0, 12.5))
    assert not settled(report(8.0, None))  # never steady: its backlog grew through the lead
    assert not settled(report(31.0, 12.5))  # steady only after the onset
