"""The drill matrix: every query under every burst pattern, one drill per cell, and one table of them all.

Why: one drill answers for one query and one burst; whether sponge keeps its lead over the baselines
is a question about all of them at once. So each cell (query × pattern) is an ordinary drill
(core/drill/drill.py's run_drill, with its own report.md, report.json and plots in
MATRIX_DIR/<query>-<kind>/), and the matrix only reads those reports back into one table: sponge's
peak p99 as a ratio of each other policy's (against the drill's own targets), its reaction, every
policy's cost and whether every output matched the batch reference.

Why resumable: a full matrix is hours of drills on a shared machine, and an hour lost to a Ctrl-C or a
crash is an hour measured again. A cell counts as done when its report.json is there together with
cell.json, written last, holding the settings the cell was run with; a cell whose settings differ from
the matrix's (another duration, seed, rate, policy list, ...) runs again, and so does one that failed.

Why a cell's burst length follows the duration: a pattern given as its kind alone ("sudden") bursts at
2x for half the time after the lead-in, which is the drill's own default (sudden:2x:30s in 90 s after
30 s) and still fits when --duration or --lead shrink it; a full spec (sudden:2x:6s) is taken as it is.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from core.drill import drill as drills
from core.drill.drill import DrillConfig, policies_from
from core.drill.report import write_report
from core.drill.report_numbers import (
    DEFAULT_LABEL,
    PEAK_P99_TARGETS,
    REFERENCE_POLICY,
    cost_vs_over,
    finite,
    fmt_ms,
    fmt_ratio,
    fmt_seconds,
    fmt_usd,
    peak_p99,
    peak_ratios,
    peak_vs_pre_burst,
    policy_labels,
    pre_burst,
    runs_of,
)
from core.drill.report_tables import md_table
from core.errors import ConfigError, MissingDependencyError, SpongeError
from core.nexmark.patterns import KINDS, BurstPattern
from core.nexmark.queries import QUERIES
from core.spark.session import MemoryConfig

DEFAULT_POLICIES = ("sponge", "noscaling", "vmbase", "over")
DEFAULT_DIR = Path("runs/drill-matrix")
BURST_FACTOR = 2.0  # a pattern given by its kind alone bursts to twice the stable rate
CELL_FILE = "cell.json"  # written after the cell's report: its presence with the same settings means done
MATRIX_JSON, MATRIX_MD, MATRIX_PNG = "matrix.json", "matrix.md", "matrix.png"
SETTINGS_VERSION = 1  # raise when a cell's report stops being comparable with older ones

# --quick: every query drills once, as briefly as a drill allows. The lead-in is the drill's shortest
# (`sponge drill --lead` >= 5 s: the query's first epoch falls in it), the burst make drill's, and the
# stable tail after it the window slide, the seconds after a burst its peak p99 is still looked for.
QUICK_PATTERN = "sudden:2x:6s"
QUICK_LEAD_S = 5.0
QUICK_TAIL_S = float(DrillConfig.window_slide_s)
QUICK_DURATION_S = QUICK_LEAD_S + BurstPattern.parse(QUICK_PATTERN).length_s + QUICK_TAIL_S
QUICK_POLICIES = ("sponge", "noscaling")

_PATTERN_HINT = f"name a kind ({', '.join(KINDS)}) or write KIND:FACTORx:SECONDSs, e.g. sudden:2x:30s"


@dataclass(frozen=True)
class Cell:
    """One drill of the matrix: a query under one burst pattern (its full text)."""

    query: str
    pattern: str

    @property
    def kind(self) -> str:
        return BurstPattern.parse(self.pattern).kind

    @property
    def name(self) -> str:
        """The cell's directory under the matrix's: <query>-<kind>."""
        return f"{self.query}-{self.kind}"


@dataclass(frozen=True)
class MatrixConfig:
    """The matrix's settings, checked before any drill runs (each cell's DrillConfig is built here)."""

    queries: tuple[str, ...] = tuple(QUERIES)
    patterns: tuple[str, ...] = KINDS  # kinds (the burst sized to the trace) or full pattern specs
    policies: tuple[str, ...] = DEFAULT_POLICIES
    duration_s: float = DrillConfig.duration_s  # a drill's own defaults, 90 s after 30 s of lead-in
    lead_s: float = DrillConfig.lead_s
    seed: int = 0
    stable_rate: float | None = None  # None: each query's drill probes its own (cached per query)
    max_workers: int = DrillConfig.max_workers
    target: str = "embedded"
    out: Path = DEFAULT_DIR
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    def __post_init__(self) -> None:
        if not self.queries:
            raise ConfigError(
                "no query to drill", hint=f"name some with --queries, from {', '.join(QUERIES)}"
            )
        for q in self.queries:
            if q not in QUERIES:
                raise ConfigError(f"unknown query {q!r}", hint=f"choose from {', '.join(QUERIES)}")
        if not self.patterns:
            raise ConfigError("no burst pattern to drill", hint=_PATTERN_HINT)
        if not self.policies:
            raise ConfigError(
                "--compare names no policy", hint=f"e.g. --compare {','.join(DEFAULT_POLICIES)}"
            )
        kinds: dict[str, str] = {}
        for cell in self.cells():
            previous = kinds.setdefault(cell.kind, cell.pattern)
            if previous != cell.pattern:
                raise ConfigError(
                    f"--patterns names two {cell.kind} bursts ({previous} and {cell.pattern}); a cell's "
                    f"directory is <query>-<kind>",
                    hint="drill one pattern of each kind per matrix, or give each its own --report",
                )
            self.drill_config(cell)  # DrillConfig checks policies, target, the burst's fit, memory
        if REFERENCE_POLICY not in self.policies:
            raise ConfigError(
                "the matrix compares sponge with the other policies, and --compare leaves it out",
                hint=f"add sponge to --compare, e.g. --compare {','.join(DEFAULT_POLICIES)}",
            )

    @classmethod
    def quick(cls, **settings: Any) -> MatrixConfig:
        """Each query once, as short as a drill goes: the check that every query drills at all."""
        return cls(
            patterns=(QUICK_PATTERN,),
            policies=QUICK_POLICIES,
            duration_s=QUICK_DURATION_S,
            lead_s=QUICK_LEAD_S,
            **settings,
        )

    def pattern_text(self, pattern: str) -> str:
        """A pattern's full spec: a kind alone bursts at 2x for half the time after the lead-in."""
        name = pattern.strip().lower()
        if name in KINDS:
            length = math.floor((self.duration_s - self.lead_s) / 2)
            if length < 1:
                raise ConfigError(
                    f"--duration {self.duration_s:g} leaves no time for a burst after --lead {self.lead_s:g}",
                    hint=f"pass a --duration of at least {self.lead_s + 2:g}, or a full pattern such as "
                    f"{name}:2x:6s",
                )
            return BurstPattern(name, BURST_FACTOR, float(length)).text()
        if ":" not in name:
            raise ConfigError(f"unknown burst pattern {pattern!r}", hint=_PATTERN_HINT)
        return BurstPattern.parse(name).text()

    def cells(self) -> list[Cell]:
        """Every (query, pattern) pair, query by query, each query's patterns in the order given."""
        return [Cell(q, self.pattern_text(p)) for q in self.queries for p in self.patterns]

    def drill_config(self, cell: Cell) -> DrillConfig:
        return DrillConfig(
            query=cell.query,
            pattern=cell.pattern,
            duration_s=self.duration_s,
            lead_s=self.lead_s,
            policies=self.policies,
            target=self.target,
            report=self.out / cell.name,
            seed=self.seed,
            stable_rate=self.stable_rate,
            max_workers=self.max_workers,
            memory=self.memory,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queries": list(self.queries),
            "patterns": [self.pattern_text(p) for p in self.patterns],
            "policies": list(self.policies),
            "duration_s": self.duration_s,
            "lead_s": self.lead_s,
            "seed": self.seed,
            "stable_rate": self.stable_rate,
            "max_workers": self.max_workers,
            "target": self.target,
        }


def parse_queries(text: str | None) -> tuple[str, ...]:
    """Comma-separated queries, case-insensitive, each once (None or "all": every query)."""
    if text is None or text.strip().lower() == "all":
        return tuple(QUERIES)
    return tuple(dict.fromkeys(q.strip().lower() for q in text.split(",") if q.strip()))


def parse_patterns(text: str | None) -> tuple[str, ...]:
    """Comma-separated kinds or pattern specs, each once (None: every kind)."""
    if text is None:
        return KINDS
    return tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))


def parse_policies(text: str | None) -> tuple[str, ...]:
    return DEFAULT_POLICIES if text is None else policies_from(text)


def cell_settings(config: DrillConfig) -> dict[str, Any]:
    """What a cell's report depends on and the matrix sets; a cell run with other values runs again.

    The memory is left out: it is sized from the memory free when the command starts, which would rerun
    every cell for a few megabytes either way.
    """
    return {
        "version": SETTINGS_VERSION,
        "query": config.query,
        "pattern": config.pattern,
        "duration_s": config.duration_s,
        "lead_s": config.lead_s,
        "policies": list(config.policies),
        "seed": config.seed,
        "stable_rate": config.stable_rate,
        "max_workers": config.max_workers,
        "target": config.target,
        "window": [config.window_size_s, config.window_slide_s],
        "vm_launch_delay_s": config.vm_launch_delay_s,
        "vm_cpus": list(config.vm_cpus),
        "worker_cpus": list(config.worker_cpus),
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cell_state(config: DrillConfig) -> str:
    """done (report.json and cell.json with these settings), failed (with these settings) or pending."""
    marker = _read_json(config.report / CELL_FILE)
    if not isinstance(marker, Mapping) or marker.get("settings") != cell_settings(config):
        return "pending"
    if marker.get("error"):
        return "failed"
    return "done" if (config.report / "report.json").exists() else "pending"


class Progress(Protocol):
    """What the matrix says as it goes (the CLI draws it with rich); `Silent` says nothing."""

    def start(self, number: int, total: int, cell: Cell, state: str) -> None:
        """Cell `number` of `total` begins: it runs (state "pending" or "failed") or is kept ("done")."""

    def status(self, text: str) -> None:
        """The running drill's own status line (run_drill's `status` callback)."""

    def end(self, cell: Cell, state: str, error: SpongeError | None = None) -> None:
        """The cell is done (run now or kept) or failed (the matrix goes on with the next cell)."""


class Silent:
    def start(self, number: int, total: int, cell: Cell, state: str) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def end(self, cell: Cell, state: str, error: SpongeError | None = None) -> None:
        pass


def run_matrix(config: MatrixConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run every cell not done yet, one drill each, then return the table (`matrix_table`).

    A drill that fails is recorded in its cell.json and the matrix goes on (the cell runs again next
    time), except for errors every cell would hit alike (a bad setting, a missing tool). An interrupt
    propagates at once; every cell finished before it keeps its report.
    """
    progress = progress or Silent()
    cells = config.cells()
    for number, cell in enumerate(cells, start=1):
        drill = config.drill_config(cell)
        state = cell_state(drill)
        progress.start(number, len(cells), cell, state)
        if state == "done":
            progress.end(cell, state)
            continue
        try:
            run_cell(
                drill, progress.status, siblings=[config.out / c.name for c in cells if c.query == cell.query]
            )
        except (ConfigError, MissingDependencyError):
            raise
        except SpongeError as e:
            _write_marker(drill, error=e.one_line())
            progress.end(cell, "failed", e)
        else:
            progress.end(cell, "done")
    return matrix_table(config)


def run_cell(drill: DrillConfig, status: Callable[[str], None], siblings: Sequence[Path] = ()) -> None:
    """One drill and its report; cell.json last, so a cell interrupted anywhere before it runs again."""
    drill.report.mkdir(parents=True, exist_ok=True)
    (drill.report / CELL_FILE).unlink(missing_ok=True)
    _share_calibration(drill.report, siblings)
    report = drills.run_drill(drill, status=status)
    write_report(report, drill.report)
    _write_marker(drill)


def _share_calibration(directory: Path, siblings: Sequence[Path]) -> None:
    """Copy the query's calibration from a sibling cell, so its probes run once per query, not per
    pattern: the cache is keyed by query, window and memory, never by the burst, and run_drill checks
    its key before it uses it."""
    for sibling in siblings:
        if sibling == directory:
            continue
        for cached in sibling.glob("calibration-*.json"):
            if not (directory / cached.name).exists():
                shutil.copyfile(cached, directory / cached.name)


def _write_marker(drill: DrillConfig, error: str | None = None) -> None:
    marker: dict[str, Any] = {
        "settings": cell_settings(drill),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if error:
        marker["error"] = error
    drill.report.mkdir(parents=True, exist_ok=True)
    (drill.report / CELL_FILE).write_text(json.dumps(marker, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------
# The table


def exactness(report: Mapping[str, Any]) -> bool | None:
    """True when every run's output matched the batch reference, False when one did not, else None."""
    matches = [r.get("results_match_reference") for r in runs_of(report)]
    if not matches or any(m is False for m in matches):
        return False if matches else None
    return True if all(m is True for m in matches) else None


def cell_row(
    cell: Cell, report: Mapping[str, Any] | None, state: str, error: str | None = None
) -> dict[str, Any]:
    """One cell's figures from its drill report (None while the cell is pending or failed)."""
    row: dict[str, Any] = {"cell": cell.name, "query": cell.query, "pattern": cell.pattern, "state": state}
    if error:
        row["error"] = error
    if report is None:
        return row
    labels = policy_labels(report)
    runs = dict(zip(labels, runs_of(report), strict=True))
    sponge = runs.get(REFERENCE_POLICY)
    ratios = peak_ratios(report).get(REFERENCE_POLICY, {})
    others = [p for p in labels if p != REFERENCE_POLICY]
    costs = {p: finite(r.get("cost_usd")) for p, r in runs.items()}
    row.update(
        {
            "report": f"{cell.name}/report.md",
            "stable_rate": finite(report.get("stable_rate")),
            "peak_p99_ms": {p: peak_p99(r) for p, r in runs.items()},
            "peak_p99_ratio": {p: ratios.get(p) for p in others},
            "peak_vs_pre_burst": {p: peak_vs_pre_burst(r) for p, r in runs.items()},
            "meets_target": {
                p: (None if ratios.get(p) is None else ratios[p] <= PEAK_P99_TARGETS[p])
                for p in others
                if p in PEAK_P99_TARGETS
            },
            "reaction_s": None if sponge is None else finite(sponge.get("reaction_s")),
            "cost_usd": costs,
            "cost_vs_over": None if sponge is None else cost_vs_over(report, sponge),
            "fair_start": None if (start := pre_burst(report)) is None else start.fair,
            "exact": exactness(report),
        }
    )
    return row


def matrix_table(config: MatrixConfig) -> dict[str, Any]:
    """The matrix as matrix.json holds it, read from the cells' reports on disk (so a matrix resumed,
    or interrupted, reports every cell finished so far)."""
    rows = []
    for cell in config.cells():
        drill = config.drill_config(cell)
        state = cell_state(drill)
        report = _read_json(drill.report / "report.json") if state == "done" else None
        marker = _read_json(drill.report / CELL_FILE) if state == "failed" else None
        rows.append(cell_row(cell, report, state, error=(marker or {}).get("error")))
    done = [r for r in rows if r["state"] == "done"]
    checks = [r["exact"] for r in done]
    return {
        "label": DEFAULT_LABEL,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": config.to_json(),
        "targets": dict(PEAK_P99_TARGETS),
        "cells_total": len(rows),
        "cells_done": len(done),
        "cells_failed": sum(r["state"] == "failed" for r in rows),
        "complete": len(done) == len(rows),
        "exact": False if False in checks else (True if checks and all(checks) else None),
        "cells": rows,
    }


def _ratio_text(row: Mapping[str, Any], policy: str) -> str:
    ratio = row.get("peak_p99_ratio", {}).get(policy)
    met = row.get("meets_target", {}).get(policy)
    mark = "" if met is None else " ✓" if met else " ✗"
    return fmt_ratio(ratio) + mark


def _check_text(value: Any) -> str:
    return "✓" if value is True else "✗" if value is False else "—"


def table_rows(matrix: Mapping[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """The table's header, rows and column alignment, as text (the terminal and matrix.md share them)."""
    policies = list(matrix["settings"]["policies"])
    others = [p for p in policies if p != REFERENCE_POLICY]
    targets = matrix["targets"]
    header = ["cell", "pattern", "stable rate (events/s)", "sponge peak p99 (ms)"]
    header += [f"sponge ÷ {p}" + (f" (≤ {targets[p]:g}x)" if p in targets else "") for p in others]
    inflation = [p for p in (REFERENCE_POLICY, "over") if p in policies]
    header += [f"{p} peak ÷ pre-burst" for p in inflation]
    header += ["sponge reaction (s)", *(f"{p} cost" for p in policies)]
    header += ["sponge cost ÷ over's"] if "over" in others else []
    header += ["fair start", "exact"]
    rows = []
    for row in matrix["cells"]:
        if row["state"] != "done":
            rows.append([row["cell"], row["pattern"], row["state"], *[""] * (len(header) - 3)])
            continue
        rate = row.get("stable_rate")
        text = [
            row["cell"],
            row["pattern"],
            "n/a" if rate is None else f"{rate:,.0f}",
            fmt_ms(row["peak_p99_ms"].get(REFERENCE_POLICY)),
            *(_ratio_text(row, p) for p in others),
            *(fmt_ratio(row.get("peak_vs_pre_burst", {}).get(p)) for p in inflation),
            fmt_seconds(row.get("reaction_s")),
            *(fmt_usd(row["cost_usd"].get(p)) for p in policies),
        ]
        text += [fmt_ratio(row.get("cost_vs_over"))] if "over" in others else []
        rows.append([*text, _check_text(row.get("fair_start")), _check_text(row.get("exact"))])
    align = ["left", "left", *["right"] * (len(header) - 4), "center", "center"]
    return header, rows, align


def write_markdown(matrix: Mapping[str, Any], out: Path, heatmap: Path | None) -> Path:
    """matrix.md: what ran, the table, the heat-map, and each cell's own report by relative path."""
    s = matrix["settings"]
    rate = "probed per query" if s["stable_rate"] is None else f"{s['stable_rate']:,.0f} events/s"
    lines = [
        f"# Drill matrix ({matrix['generated_at']})",
        "",
        f"*{matrix['label']}* · {s['duration_s']:g} s per drill after {s['lead_s']:g} s of lead-in · "
        f"stable rate {rate} · seed {s['seed']} · target {s['target']} · "
        f"{matrix['cells_done']} of {matrix['cells_total']} cells done",
        "",
        "sponge ÷ X: sponge's peak p99 over X's, ✓ where it meets the drill's target, ✗ where it misses. "
        "peak ÷ pre-burst: a policy's peak p99 over its own p99 before the burst. "
        "fair start: the policies' p99 before the burst agreed (report.md says how; over's extra "
        "cores may start it lower). exact: every policy's output matched the batch reference.",
        "",
        *md_table(*table_rows(matrix)),
        "",
    ]
    failed = [r for r in matrix["cells"] if r["state"] == "failed"]
    if failed:
        lines += ["Failed cells (they run again next time):", ""]
        lines += [f"- {r['cell']}: {r.get('error', 'no error recorded')}" for r in failed] + [""]
    if heatmap is not None:
        lines += [f"![peak p99 ratios]({heatmap.name})", ""]
    done = [r for r in matrix["cells"] if r["state"] == "done"]
    if done:
        lines += ["Each cell's drill: " + ", ".join(f"[{r['cell']}]({r['report']})" for r in done), ""]
    path = out / MATRIX_MD
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_matrix(matrix: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Write matrix.json (the contract), the heat-map and matrix.md into `out`; returns their paths."""
    from core.drill.matrix_plot import write_heatmap

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / MATRIX_JSON}
    paths["json"].write_text(json.dumps(matrix, indent=2, allow_nan=False, ensure_ascii=False) + "\n")
    paths["png"] = write_heatmap(matrix, out / MATRIX_PNG)
    paths["markdown"] = write_markdown(matrix, out, paths["png"])
    return paths
