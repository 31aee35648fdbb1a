"""`sponge drill-matrix`: every query under every burst pattern, one drill per cell, and one table.

The cells, resuming and the table live in core/drill/matrix.py and the heat-map in
core/drill/matrix_plot.py; this module turns flags into a MatrixConfig and shows the matrix's progress.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from core.cli.options import SeedOpt, memory_config
from core.console import err, out
from core.errors import ConfigError, SpongeError

if TYPE_CHECKING:
    from core.drill.matrix import Cell, MatrixConfig


def drill_matrix(
    queries: Annotated[
        str | None,
        typer.Option(help="Comma-separated NEXMark queries, e.g. q1,q5 (default: all, q0..q8)."),
    ] = None,
    patterns: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated burst patterns: a kind (sudden, sine, gradual: 2x for half the time "
            "after the lead-in, sudden:2x:30s by default) or a full KIND:FACTORx:SECONDSs, one per kind "
            "(default: sudden,sine,gradual)."
        ),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            help="Policies each cell runs one after another; sponge must be one of them (its peak p99 "
            "is divided by each other's). Default: sponge,noscaling,vmbase,over."
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Each query once, as briefly as a drill goes: sudden:2x:6s in 13 s after a 5 s lead-in, "
            "sponge and noscaling. The check that every query drills.",
        ),
    ] = False,
    duration: Annotated[
        float | None, typer.Option(min=10, help="Seconds of trace per policy (default 90).")
    ] = None,
    lead: Annotated[
        float | None, typer.Option(min=5, help="Stable seconds before the burst (default 30).")
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Stable events/s of every cell, skipping the probes (default: each query's first cell "
            "probes its own rate, and the query's other cells reuse it).",
        ),
    ] = None,
    seed: SeedOpt = 0,
    report: Annotated[
        Path,
        typer.Option(
            "--report",
            "--out",
            file_okay=False,
            help="Directory for matrix.md, matrix.json, matrix.png and a drill report per cell in "
            "<query>-<kind>/.",
        ),
    ] = Path("runs/drill-matrix"),
    workers: Annotated[
        int | None, typer.Option(min=1, help="Most Lambda workers the sponge policy uses (default 4).")
    ] = None,
    target: Annotated[
        str, typer.Option(help="Where Lambda workers run: embedded, or localstack|aws after sponge deploy.")
    ] = "embedded",
    as_json: Annotated[bool, typer.Option("--json", help="End with matrix.json as one JSON line.")] = False,
) -> None:
    """The whole picture: a burst drill for every query under every burst pattern, in one table.

    Each cell (query × pattern) is an ordinary `sponge drill` of the --compare policies, with its own
    report.md, report.json and plots in REPORT/<query>-<kind>/. The matrix writes one table of them
    all, REPORT/matrix.md and REPORT/matrix.json: per cell sponge's peak p99 divided by each other
    policy's (marked ✓ where it meets the drill's target: ≤ 0.3x noscaling, ≤ 0.5x vmbase, ≤ 1.2x over),
    sponge's reaction, each policy's cost, sponge's cost over Over's, and whether every output matched
    the batch reference; and REPORT/matrix.png, a heat-map of those ratios against their targets.

    The full matrix is 27 drills of four policies each: hours. It resumes: run the same command again
    after a Ctrl-C or a failure and the cells already done (their report.json there, run with the
    same settings) are kept; a cell run with other settings (--duration, --seed, --rate, --compare, ...)
    runs again. A cell that fails is recorded and the matrix goes on. --quick drills every query once,
    briefly. Exit status 1 when a cell failed or an output differed from the reference.
    """
    from core.drill import matrix
    from core.drill.drill import EXECUTORS
    from core.drill.matrix import MatrixConfig, parse_patterns, parse_policies, parse_queries

    if quick:
        flags = (("--patterns", patterns), ("--compare", compare), ("--duration", duration), ("--lead", lead))
        given = [flag for flag, value in flags if value is not None]
        if given:
            raise ConfigError(
                f"--quick sets {given[0]} itself ({matrix.QUICK_PATTERN} in {matrix.QUICK_DURATION_S:g} s, "
                f"{' and '.join(matrix.QUICK_POLICIES)})",
                hint=f"drop {given[0]}, or drop --quick",
            )
    settings: dict[str, Any] = {
        "queries": parse_queries(queries),
        "seed": seed,
        "stable_rate": rate,
        "target": target,
        "out": report,
        "memory": memory_config(None, None, None, None, executors=EXECUTORS, no_executors=""),
    }
    if workers is not None:
        settings["max_workers"] = workers
    if quick:
        config = MatrixConfig.quick(**settings)
    else:
        settings["patterns"] = parse_patterns(patterns)
        settings["policies"] = parse_policies(compare)
        settings.update({"duration_s": duration} if duration is not None else {})
        settings.update({"lead_s": lead} if lead is not None else {})
        config = MatrixConfig(**settings)
    _run(config, as_json)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the drill in flight as Ctrl-C does (its child and VMs too)


def _run(config: MatrixConfig, as_json: bool) -> None:
    from core.drill.matrix import matrix_table, run_matrix, write_matrix

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with _Shown() as shown:
            table = run_matrix(config, shown)
    except KeyboardInterrupt:
        table = matrix_table(config)
        write_matrix(table, config.out)
        err.print(
            f"interrupted: {table['cells_done']} of {table['cells_total']} cells done, kept in {config.out} "
            "(the same command continues where it stopped)",
            markup=False,
        )
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    paths = write_matrix(table, config.out)
    rendered, width = _render(table)
    out.print(rendered, width=max(out.width, width))  # wider than the terminal rather than cut figures
    out.print(f"matrix: {paths['markdown']}, {paths['json'].name}, {paths['png'].name}", markup=False)
    if as_json:
        print(json.dumps(table, separators=(",", ":"), allow_nan=False, ensure_ascii=False), flush=True)
    failed = [c["cell"] for c in table["cells"] if c["state"] == "failed"]
    differ = [c["cell"] for c in table["cells"] if c.get("exact") is False]
    if failed:
        err.print(f"error: the drill failed in {', '.join(failed)} (see matrix.md)", markup=False)
    if differ:
        err.print(f"error: output differs from the batch reference in {', '.join(differ)}", markup=False)
    if failed or differ:
        raise typer.Exit(1)


def _render(table: dict[str, Any]) -> tuple[Table, int]:
    """The table for the terminal, and the width it needs for every figure to show whole (headings
    wrap, figures do not)."""
    from core.drill.matrix import table_rows

    header, rows, align = table_rows(table)
    shown = Table(title="Drill matrix", caption=table["label"], caption_style="dim italic")
    widths = []
    for i, (name, justify) in enumerate(zip(header, align, strict=True)):
        widest = max((len(row[i]) for row in rows if len(row) == len(header) and row[i]), default=0)
        widths.append(max(widest, *(len(word) for word in name.split())))
        shown.add_column(name, justify=justify, min_width=widths[-1])  # type: ignore[arg-type]
    for row in rows:
        shown.add_row(*(Text(cell) for cell in row))
    return shown, sum(widths) + 3 * len(widths) + 1


class _Shown:
    """The matrix's progress on stderr: which cell of how many, the time since the matrix started, and
    the running drill's own status line; a line per cell once it is done, kept or failed."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}", markup=False),
            console=err,
        )
        self.task: Any = None
        self.started, self.kept = time.monotonic(), False

    def __enter__(self) -> _Shown:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)  # type: ignore[arg-type]

    def start(self, number: int, total: int, cell: Cell, state: str) -> None:
        if self.task is None:
            self.task = self.bar.add_task("", total=total, status="")
        self.kept = state == "done"
        what = "kept" if self.kept else "running"
        self.bar.update(
            self.task,
            description=f"cell {number} of {total}: {cell.name} ({cell.pattern}), {what}",
            status="",
        )
        self.started = time.monotonic()

    def status(self, text: str) -> None:
        self.bar.update(self.task, status=text)

    def end(self, cell: Cell, state: str, error: SpongeError | None = None) -> None:
        self.bar.advance(self.task)
        took = time.monotonic() - self.started
        if error is not None:
            line = f"✗ {cell.name}: {error.one_line()}"
        elif self.kept:
            line = f"· {cell.name}: done before, kept"
        else:
            line = f"✓ {cell.name} ({took:.0f} s)"
        self.bar.console.print(line, markup=False, highlight=False)
        task = self.bar.tasks[0]
        if task.finished:
            self.bar.update(
                self.task,
                description=f"{task.completed:.0f} cell{'s' if task.completed != 1 else ''}",
                status="",
            )


def register(app: typer.Typer) -> None:
    """Add `sponge drill-matrix` to the app."""
    app.command()(drill_matrix)
