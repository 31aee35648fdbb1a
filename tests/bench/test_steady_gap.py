"""bench.steady_gap's figures, read from a drill's report as the drill writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.steady_gap import drill_figures, full_batch_epoch_s, ratios


def _epochs(durations: list[float], covered: list[int]) -> list[dict[str, float]]:
    t, start, out = 100.0, 0, []
    for d, c in zip(durations, covered, strict=True):
        out.append({"started_t": t, "commit_t": t + d, "start": start, "covered": c})
        t, start = t + d, c
    return out


def test_only_full_batches_before_the_onset_count_and_never_the_first_epoch() -> None:
    epochs = _epochs([9.0, 1.5, 1.7, 1.2, 1.6, 1.0], [200, 400, 600, 700, 900, 1100])
    result = {"origin": 100.0, "epochs": epochs}
    # Epoch 0 (planning) and the 100-event epoch are left out; the last starts after the onset.
    assert full_batch_epoch_s(result, 200, onset_s=14.0) == pytest.approx(1.6)
    assert full_batch_epoch_s(result, 200, onset_s=9.0) is None


def test_a_drills_figures_and_ratios(tmp_path: Path) -> None:
    runs = []
    for policy, p99, d in (("sponge", 2200.0, 1.5), ("noscaling", 2000.0, 1.2)):
        (tmp_path / policy).mkdir()
        result = {"origin": 100.0, "epochs": _epochs([4.0, d, d], [200, 400, 600])}
        (tmp_path / policy / "result.json").write_text(json.dumps(result))
        runs.append({"policy": policy, "pre_burst_p99_ms": p99, "deployment": {"batch_events": 200}})
    report = {"burst": [{"start_s": 30.0, "end_s": 40.0}], "runs": runs}
    (tmp_path / "report.json").write_text(json.dumps(report))
    figures = drill_figures(tmp_path)
    assert figures["sponge"] == {"pre_burst_p99_ms": 2200.0, "full_batch_epoch_s": 1.5}
    got = ratios(figures)
    assert round(got["pre_burst_p99_ms"], 3) == 1.1 and round(got["full_batch_epoch_s"], 3) == 1.25
    figures["noscaling"]["full_batch_epoch_s"] = None
    assert ratios(figures)["full_batch_epoch_s"] is None
