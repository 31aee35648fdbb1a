"""Tests of the drill matrix: its cells, resuming, the table people read and the heat-map.

The matrix's one collaborator that runs anything is core/drill/drill.py's run_drill; here it is replaced
by a fake that returns a report shaped like a real drill's (test_report.py's helpers), with peaks chosen
per cell, so the ratios and verdicts in the table can be checked against numbers computed here. The
reports are written by the real write_report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.drill import matrix as m
from core.drill.drill import DrillConfig
from core.errors import ConfigError, JvmDiedError
from core.nexmark.queries import QUERIES
from tests.core.drill.test_report import PNG_MAGIC, _report, _run

PEAKS = {"sponge": 850.0, "noscaling": 4000.0, "vmbase": 1930.0, "over": 700.0}


@dataclass
class FakeDrill:
    """run_drill's stand-in: records each cell it ran and returns a report shaped like a real drill's."""

    peaks: Mapping[str, float] = field(default_factory=lambda: dict(PEAKS))
    mismatch: set[str] = field(default_factory=set)  # "q1/noscaling": that run's output differs
    interrupt_at: str | None = None  # a cell's directory name: Ctrl-C arrives during its drill
    fail_at: str | None = None
    ran: list[str] = field(default_factory=list)
    calibrated: list[bool] = field(default_factory=list)  # a calibration was there when the cell started

    def __call__(self, config: DrillConfig, status: Callable[[str], None] = print) -> dict[str, Any]:
        name = config.report.name
        self.calibrated.append((config.report / f"calibration-{config.query}.json").exists())
        status("sponge: 1 s")
        if name == self.interrupt_at:
            raise KeyboardInterrupt
        if name == self.fail_at:
            raise JvmDiedError(
                "the sponge run failed: its JVM ran out of memory", hint="raise --driver-memory"
            )
        self.ran.append(name)
        (config.report / f"calibration-{config.query}.json").write_text("{}")
        runs = [
            _run(
                p,
                self.peaks[p],
                offloads=p == "sponge",
                cost_usd={"sponge": 0.0012, "noscaling": 0.0008, "vmbase": 0.0015, "over": 0.0016}[p],
                results_match_reference=f"{config.query}/{p}" not in self.mismatch,
            )
            for p in config.policies
        ]
        return _report(*runs, query=config.query, pattern=config.pattern, duration_s=config.duration_s)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDrill:
    drill = FakeDrill()
    monkeypatch.setattr("core.drill.drill.run_drill", drill)
    return drill


def _config(tmp_path: Path, **overrides: Any) -> m.MatrixConfig:
    settings: dict[str, Any] = {"queries": ("q1", "q5"), "patterns": ("sudden",), "out": tmp_path / "matrix"}
    settings.update(overrides)
    return m.MatrixConfig(**settings)


# ---------------------------------------------------------------------------------------------------
# The cells


def test_the_default_matrix_is_every_query_under_every_pattern_query_by_query() -> None:
    config = m.MatrixConfig()
    cells = config.cells()
    assert len(cells) == len(QUERIES) * 3 == 27
    assert [c.name for c in cells[:4]] == ["q0-sudden", "q0-sine", "q0-gradual", "q1-sudden"]
    assert cells[-1].name == "q8-gradual"
    assert {c.pattern for c in cells} == {"sudden:2x:30s", "sine:2x:30s", "gradual:2x:30s"}
    assert config.policies == ("sponge", "noscaling", "vmbase", "over")
    drill = config.drill_config(cells[4])
    assert (drill.query, drill.pattern, drill.report) == (
        "q1",
        "sine:2x:30s",
        Path("runs/drill-matrix/q1-sine"),
    )


def test_a_kind_bursts_for_half_the_time_after_the_lead_in_and_a_full_spec_is_kept(tmp_path: Path) -> None:
    config = _config(tmp_path, patterns=("sudden", "gradual:3x:10s"), duration_s=40, lead_s=15)
    assert [c.pattern for c in config.cells()] == ["sudden:2x:12s", "gradual:3x:10s"] * 2
    assert [c.name for c in config.cells()] == ["q1-sudden", "q1-gradual", "q5-sudden", "q5-gradual"]


def test_quick_drills_every_query_once_in_the_shortest_drill_that_fits() -> None:
    config = m.MatrixConfig.quick()
    cells = config.cells()
    assert [c.query for c in cells] == list(QUERIES)
    assert {c.pattern for c in cells} == {"sudden:2x:6s"}
    assert config.policies == ("sponge", "noscaling")
    assert (config.lead_s, config.duration_s) == (5.0, 13.0)
    with pytest.raises(ConfigError, match="does not fit"):  # one second less and the burst has no tail
        DrillConfig(pattern="sudden:2x:6s", lead_s=5.0, duration_s=11.0)
    assert m.MatrixConfig.quick(queries=("q3",)).cells() == [m.Cell("q3", "sudden:2x:6s")]


@pytest.mark.parametrize(
    ("settings", "needles"),
    [
        ({"queries": ("q1", "q42")}, ("unknown query 'q42'", "q0, q1, q2, q3, q4, q5, q6, q7, q8")),
        ({"patterns": ("spiky",)}, ("unknown burst pattern 'spiky'", "sudden, sine, gradual")),
        ({"patterns": ("sudden:1x:5s",)}, ("factor above 1x",)),
        ({"patterns": ("sudden", "sudden:2x:5s")}, ("two sudden bursts", "one pattern of each kind")),
        ({"patterns": ()}, ("no burst pattern",)),
        ({"queries": ()}, ("no query",)),
        ({"policies": ("sponge", "bogus")}, ("unknown policy 'bogus'", "noscaling")),
        ({"policies": ("noscaling", "over")}, ("compares sponge", "add sponge to --compare")),
        ({"policies": ()}, ("names no policy",)),
        ({"duration_s": 31.0}, ("no time for a burst", "--duration")),
        ({"patterns": ("sudden:2x:60s",)}, ("does not fit in 90 s", "--duration")),
        ({"target": "gcp"}, ("unknown target 'gcp'",)),
    ],
)
def test_bad_settings_are_refused_before_any_drill(
    settings: dict[str, Any], needles: tuple[str, ...], tmp_path: Path, fake: FakeDrill
) -> None:
    with pytest.raises(ConfigError) as raised:
        m.MatrixConfig(**{"out": tmp_path / "matrix", **settings})
    line = raised.value.one_line()
    for needle in needles:
        assert needle in line
    assert fake.ran == [] and not (tmp_path / "matrix").exists()


def test_a_comma_list_is_read_case_insensitively_each_once() -> None:
    assert m.parse_queries("Q1, q5,q1") == ("q1", "q5")
    assert m.parse_queries(None) == m.parse_queries("all") == tuple(QUERIES)
    assert m.parse_patterns("Sine,sudden:2x:6s,sine") == ("sine", "sudden:2x:6s")
    assert m.parse_patterns(None) == ("sudden", "sine", "gradual")
    assert m.parse_policies(None) == ("sponge", "noscaling", "vmbase", "over")
    assert m.parse_policies("sponge,Over") == ("sponge", "over")


# ---------------------------------------------------------------------------------------------------
# Running, resuming, interrupting


class Recorder(m.Silent):
    def __init__(self) -> None:
        self.cells: list[tuple[int, int, str, str]] = []
        self.ends: list[tuple[str, str]] = []
        self.lines: list[str] = []

    def start(self, number: int, total: int, cell: m.Cell, state: str) -> None:
        self.cells.append((number, total, cell.name, state))

    def end(self, cell: m.Cell, state: str, error: Exception | None = None) -> None:
        self.ends.append((cell.name, state))

    def status(self, text: str) -> None:
        self.lines.append(text)


def test_every_cell_runs_once_into_its_own_directory(tmp_path: Path, fake: FakeDrill) -> None:
    config = _config(tmp_path)
    progress = Recorder()
    table = m.run_matrix(config, progress)
    assert fake.ran == ["q1-sudden", "q5-sudden"]
    assert progress.cells == [(1, 2, "q1-sudden", "pending"), (2, 2, "q5-sudden", "pending")]
    assert progress.ends == [("q1-sudden", "done"), ("q5-sudden", "done")]
    assert progress.lines == ["sponge: 1 s"] * 2  # the drill's own status line
    for name in fake.ran:
        cell = tmp_path / "matrix" / name
        assert (cell / "report.md").exists() and (cell / "drill.png").exists()
        assert json.loads((cell / "report.json").read_text())["query"] == name.split("-")[0]
    assert table["complete"] and table["cells_done"] == 2 and table["exact"] is True


def test_a_completed_cell_is_not_run_again(tmp_path: Path, fake: FakeDrill) -> None:
    m.run_matrix(_config(tmp_path))
    progress = Recorder()
    table = m.run_matrix(_config(tmp_path), progress)
    assert fake.ran == ["q1-sudden", "q5-sudden"]  # from the first matrix only
    assert [state for *_, state in progress.cells] == ["done", "done"]
    assert table["cells_done"] == 2


def test_a_cell_run_with_other_settings_runs_again(tmp_path: Path, fake: FakeDrill) -> None:
    m.run_matrix(_config(tmp_path))
    marker = tmp_path / "matrix" / "q5-sudden" / m.CELL_FILE
    stale = json.loads(marker.read_text())
    stale["settings"]["seed"] = 7
    marker.write_text(json.dumps(stale))
    m.run_matrix(_config(tmp_path))
    assert fake.ran == ["q1-sudden", "q5-sudden", "q5-sudden"]

    m.run_matrix(_config(tmp_path, duration_s=80.0))  # a changed setting: every cell again
    assert fake.ran[3:] == ["q1-sudden", "q5-sudden"]
    assert json.loads(marker.read_text())["settings"]["duration_s"] == 80.0


def test_an_interrupted_matrix_keeps_its_completed_cells(tmp_path: Path, fake: FakeDrill) -> None:
    config = _config(tmp_path, queries=("q1", "q5", "q8"))
    fake.interrupt_at = "q5-sudden"
    with pytest.raises(KeyboardInterrupt):
        m.run_matrix(config)
    assert fake.ran == ["q1-sudden"]
    table = m.matrix_table(config)
    assert [c["state"] for c in table["cells"]] == ["done", "pending", "pending"]
    assert table["cells"][0]["peak_p99_ratio"]["noscaling"] == pytest.approx(850 / 4000)
    assert not table["complete"]

    fake.interrupt_at = None
    m.run_matrix(config)
    assert fake.ran == ["q1-sudden", "q5-sudden", "q8-sudden"]


def test_a_failed_cell_is_recorded_the_matrix_goes_on_and_the_cell_runs_again(
    tmp_path: Path, fake: FakeDrill
) -> None:
    fake.fail_at = "q1-sudden"
    progress = Recorder()
    table = m.run_matrix(_config(tmp_path), progress)
    assert progress.ends == [("q1-sudden", "failed"), ("q5-sudden", "done")]
    assert fake.ran == ["q5-sudden"]
    failed = table["cells"][0]
    assert failed["state"] == "failed" and "ran out of memory" in failed["error"]
    assert table["cells_failed"] == 1 and not table["complete"]
    md = m.write_matrix(table, tmp_path / "matrix")["markdown"].read_text()
    assert "| q1-sudden | sudden:2x:30s | failed |" in md
    assert "- q1-sudden: the sponge run failed: its JVM ran out of memory (raise --driver-memory)" in md

    fake.fail_at = None
    assert m.run_matrix(_config(tmp_path))["complete"]
    assert fake.ran == ["q5-sudden", "q1-sudden"]


def test_the_probes_run_once_per_query(tmp_path: Path, fake: FakeDrill) -> None:
    """The calibration a query's first cell cached is there when its next cell starts."""
    m.run_matrix(_config(tmp_path, queries=("q1",), patterns=("sudden", "sine", "gradual")))
    assert fake.calibrated == [False, True, True]


# ---------------------------------------------------------------------------------------------------
# The table


def test_the_table_holds_sponges_ratios_costs_and_exactness(tmp_path: Path, fake: FakeDrill) -> None:
    fake.mismatch = {"q5/vmbase"}
    config = _config(tmp_path)
    table = m.run_matrix(config)
    q1, q5 = table["cells"]
    assert q1["peak_p99_ratio"] == pytest.approx(
        {"noscaling": 850 / 4000, "vmbase": 850 / 1930, "over": 850 / 700}
    )
    assert q1["meets_target"] == {"noscaling": True, "vmbase": True, "over": False}  # 1.21x > 1.2x
    assert q1["reaction_s"] == 1.2
    assert q1["cost_usd"] == {"sponge": 0.0012, "noscaling": 0.0008, "vmbase": 0.0015, "over": 0.0016}
    assert q1["cost_vs_over"] == pytest.approx(0.0012 / 0.0016)
    assert (q1["exact"], q5["exact"], table["exact"]) == (True, False, False)
    assert q1["fair_start"] is True  # every policy's pre-burst p99 is the same here
    assert table["targets"] == {"noscaling": 0.3, "vmbase": 0.5, "over": 1.2}
    assert table["settings"]["patterns"] == ["sudden:2x:30s"]

    header, rows, align = m.table_rows(table)
    assert len(header) == len(align) == len(rows[0])
    assert "sponge ÷ noscaling (≤ 0.3x)" in header and header[-2:] == ["fair start", "exact"]
    assert rows[0][:4] == ["q1-sudden", "sudden:2x:30s", "60,000", "850"]
    assert rows[0][4:7] == ["0.21x ✓", "0.44x ✓", "1.21x ✗"]
    assert header[7:9] == ["sponge peak ÷ pre-burst", "over peak ÷ pre-burst"]
    assert rows[0][7:9] == [f"{850 / 120:.2f}x", f"{700 / 120:.2f}x"]  # every policy started at 120 ms
    assert (rows[0][-3], rows[0][-2], rows[0][-1], rows[1][-1]) == ("0.75x", "✓", "✓", "✗")


def test_without_over_there_is_no_cost_ratio_and_the_table_says_so(tmp_path: Path, fake: FakeDrill) -> None:
    table = m.run_matrix(_config(tmp_path, queries=("q1",), policies=("sponge", "noscaling")))
    (row,) = table["cells"]
    assert row["cost_vs_over"] is None and set(row["peak_p99_ratio"]) == {"noscaling"}
    header, _, _ = m.table_rows(table)
    assert not any("over" in h for h in header)


def test_the_files_are_written_json_markdown_and_a_real_png(tmp_path: Path, fake: FakeDrill) -> None:
    config = _config(tmp_path, queries=("q1", "q5", "q8"))
    fake.interrupt_at = "q8-sudden"
    with pytest.raises(KeyboardInterrupt):
        m.run_matrix(config)
    table = m.matrix_table(config)  # a partial matrix still draws: the pending cell is hatched
    paths = m.write_matrix(table, config.out)

    assert json.loads(paths["json"].read_text(), parse_constant=_no_nan) == table
    png = paths["png"].read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 10_000
    md = paths["markdown"].read_text()
    assert "| q1-sudden | sudden:2x:30s | 60,000 | 850 | 0.21x ✓ |" in md
    assert "| q8-sudden | sudden:2x:30s | pending |" in md
    assert "![peak p99 ratios](matrix.png)" in md and "[q5-sudden](q5-sudden/report.md)" in md
    assert "2 of 3 cells done" in md


def test_a_square_is_coloured_by_its_verdict_even_at_the_target() -> None:
    from core.drill.matrix_plot import square_score

    assert square_score(0.3, 0.3) < 0 < square_score(0.301, 0.3)  # at the target: met, green
    assert square_score(0.03, 0.3) == pytest.approx(-1.0)  # 10x better
    assert square_score(12.0, 1.2) == pytest.approx(1.0)  # 10x worse


def _no_nan(token: str) -> None:
    raise AssertionError(f"matrix.json holds {token}, which is not JSON")
