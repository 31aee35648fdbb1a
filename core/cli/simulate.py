"""`sponge simulate`: the paper-scale simulator (policy/sim) on the command line, every figure "simulated".

Why a module of its own, registered by `register(app)`: the simulator shares nothing with the streaming
commands but the app and the error conventions.
Per query it prints the drill's table (core/drill/report.print_summary, label "simulated"); then a
summary of Sponge against VMBase, SFBase and Over for the queries run, next to the paper's figures.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from core.errors import ConfigError

QUERY_HELP = "q1..q8, or all (Q1-Q8)."
COST_CURVE_JSON = "cost_curve.json"
COST_CURVE_PNG = "cost_curve.png"
DEFAULT_CURVE_DIR = Path("runs/simulate")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.0f} %"


def _reduction(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def summary_table(rows: list[dict[str, Any]], pattern: str) -> tuple[Table, list[list[str]]]:
    """Sponge's peak p99 reduction vs VMBase and SFBase and its cost vs Over, per query, with the
    mean and the paper's figures; returns the rich table and the same rows as text (for markdown)."""
    from policy.sim.experiment import PAPER, mean_of

    header = [
        "query",
        "sponge p99 (ms)",
        "vmbase",
        "sfbase",
        "over",
        "p99 cut vs VMBase",
        "p99 cut vs SFBase",
        "cost vs Over",
    ]
    table = Table(
        title=f"Sponge vs the baselines at paper scale, {pattern} (simulated)",
        caption="simulated: 5 VMs x 4 cores, up to 200 Lambdas; costs from policy/cost_model.py",
        caption_style="dim italic",
    )
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    text: list[list[str]] = []
    for r in rows:
        peaks = r["peak_p99_ms"]
        text.append(
            [
                r["query"],
                _ms(peaks.get("sponge")),
                _ms(peaks.get("vmbase")),
                _ms(peaks.get("sfbase")),
                _ms(peaks.get("over")),
                _reduction(r["p99_vs_vmbase"]),
                _reduction(r["p99_vs_sfbase"]),
                _pct(r["cost_vs_over"]),
            ]
        )
    text.append(
        [
            "mean (simulated)",
            "",
            "",
            "",
            "",
            _reduction(mean_of(rows, "p99_vs_vmbase")),
            _reduction(mean_of(rows, "p99_vs_sfbase")),
            _pct(mean_of(rows, "cost_vs_over")),
        ]
    )
    text.append(
        [
            "paper (measured on AWS)",
            "",
            "",
            "",
            "",
            _reduction(PAPER["p99_vs_vmbase"]),
            _reduction(PAPER["p99_vs_sfbase"]),
            _pct(PAPER["cost_vs_over"]),
        ]
    )
    for row in text:
        table.add_row(*row)
    return table, [header, *text]


def _markdown(rows: list[list[str]]) -> str:
    header, body = rows[0], rows[1:]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def write_cost_curve(out_dir: Path) -> dict[str, Path]:
    """Fig. 15(b) as cost_curve.json and cost_curve.png (titled "simulated")."""
    from matplotlib.figure import Figure

    from policy.sim.experiment import cost_curve

    curve = cost_curve()
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / COST_CURVE_JSON
    json_path.write_text(json.dumps(curve, indent=2, default=str) + "\n", encoding="utf-8")
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    xs = [100 * f for f in curve["burst_fraction"]]
    ax.plot(
        xs, curve["sponge_usd_per_day"], label="Sponge (5 VMs + 200 Lambdas while bursting)", color="#1f77b4"
    )
    for n, ys in curve["static_usd_per_day"].items():
        ax.plot(xs, ys, label=f"{n} VMs (static)", linestyle="--")
        cross = curve["crossover_fraction"][n]
        if 0 < cross < 1:
            ax.axvline(100 * cross, color="grey", linewidth=0.6, linestyle=":")
            ax.annotate(
                f"{100 * cross:.1f} %",
                (100 * cross, 0),
                textcoords="offset points",
                xytext=(3, 5),
                fontsize="small",
                color="grey",
            )
    ax.set_xlim(0, 50)
    ax.set_xlabel("share of the day spent bursting (%)")
    ax.set_ylabel("USD per day")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle("Cost per day against burst duration, Fig. 15(b) (simulated)")
    png_path = out_dir / COST_CURVE_PNG
    fig.savefig(png_path, dpi=110)
    return {"json": json_path, "png": png_path}


def simulate(
    query: Annotated[str, typer.Option("--query", "-q", help=QUERY_HELP)] = "all",
    pattern: Annotated[str, typer.Option("--pattern", "-p", help="Burst pattern, e.g. sudden:5x:60s.")] = (
        "sudden:5x:60s"
    ),
    duration: Annotated[float, typer.Option("--duration", min=20, help="Trace length in seconds.")] = 240.0,
    compare: Annotated[
        str, typer.Option("--compare", help="Policies, comma-separated (sponge always runs).")
    ] = "sponge,noscaling,vmbase,sfbase,vminit,over",
    report: Annotated[
        Path | None,
        typer.Option(
            "--report", file_okay=False, help="Write report.json, plots and report.md per query here."
        ),
    ] = None,
    cost_curve: Annotated[
        bool, typer.Option("--cost-curve", help="Also write Fig. 15(b) (cost per day vs burst share).")
    ] = False,
    rho: Annotated[
        float | None,
        typer.Option("--rho", min=0.01, help="Override the measured rho (1.0: a Lambda core = a VM core)."),
    ] = None,
) -> None:
    """Replay the paper's experiments at paper scale in a simulator driven by the real policy code."""
    from core.console import out
    from core.drill.report import print_summary, write_report
    from core.nexmark.patterns import BurstPattern
    from policy.sim.costs import QUERIES, query_profile
    from policy.sim.experiment import LABEL, POLICIES, SimConfig, simulate_query, summary_row

    started = time.perf_counter()
    queries = list(QUERIES) if query.lower() == "all" else [q.strip().lower() for q in query.split(",")]
    policies = [p.strip().lower() for p in compare.split(",") if p.strip()]
    if unknown := [p for p in policies if p not in POLICIES]:
        raise ConfigError(f"unknown policies {', '.join(unknown)}", hint=f"choose from {', '.join(POLICIES)}")
    if not policies:
        raise ConfigError("--compare names no policy", hint=f"choose from {', '.join(POLICIES)}")
    config = SimConfig(pattern=pattern, duration_s=duration, rho=rho)
    for q in queries:  # all checked before the first is simulated, so a typo in the last costs nothing
        profile = query_profile(q, rho=rho)
        BurstPattern.parse(config.pattern).trace(profile.stable_rate, config.duration_s, config.lead_s)
    rows = []
    for q in queries:
        runs = simulate_query(q, policies, config)
        if report is not None:
            write_report(runs.report, report / runs.profile.query, console=out, label=LABEL)
        else:
            print_summary(runs.report, out, label=LABEL)
        rows.append(summary_row(runs.report))
    table, text = summary_table(rows, config.pattern)
    out.print(table)
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        (report / "summary.json").write_text(
            json.dumps({"label": LABEL, "pattern": config.pattern, "rows": rows}, indent=2) + "\n",
            encoding="utf-8",
        )
        (report / "summary.md").write_text(
            f"# Sponge at paper scale, {config.pattern} ({LABEL})\n\n" + _markdown(text), encoding="utf-8"
        )
    if cost_curve:
        paths = write_cost_curve(report or DEFAULT_CURVE_DIR)
        out.print(f"cost curve ({LABEL}): {paths['png']} and {paths['json']}")
    out.print(
        f"[dim]{len(queries)} queries x {len(policies)} policies simulated in "
        f"{time.perf_counter() - started:.1f} s[/dim]"
    )


def register(app: typer.Typer) -> None:
    """Add `sponge simulate` to the app."""
    app.command(name="simulate")(simulate)
