"""Turn a burst drill's report.json into what people read: a terminal table, PNG plots and report.md.

The input is the plain report dict (exactly what report.json holds), so the same code serves a drill
measured on this machine and the paper-scale simulator, which passes ``label="simulated"`` so no figure
can be mistaken for a measurement. Drills are messy: a policy may never react, a second may see no
committed event, a run may lack a series altogether. Everything here therefore tolerates missing keys,
``None`` and NaN, and says "never" or "n/a" rather than failing or printing "nan".

matplotlib is imported inside the plotting functions, so importing this module (the CLI does, on every
start) stays cheap, and figures are built with ``matplotlib.figure.Figure`` rather than pyplot: no
global figure registry, no display backend, nothing to close.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

DEFAULT_LABEL = "measured on this machine"
REFERENCE_POLICY = "sponge"

# Issue 4's acceptance: sponge's peak p99 at most this multiple of the other policy's. The verdict
# states whether each was met, so a reader need not redo the division.
PEAK_P99_TARGETS: Mapping[str, float] = {"noscaling": 0.3, "vmbase": 0.5, "over": 1.5}
REACTION_TARGET_S = 2.0
VM_SCALING = ("vmbase", "vminit")  # their reaction_s: the burst onset to the added VM's executor usable

LATENCY_PNG = "latency.png"
VM_CPU_PNG = "vm_cpu.png"
WORKERS_PNG = "workers.png"
OFFLOAD_SHARE_PNG = "offload_share.png"
COMBINED_PNG = "drill.png"

# Fixed colours per known policy, so a policy looks the same in every plot and every drill.
POLICY_COLOURS: Mapping[str, str] = {
    "sponge": "#1f77b4",
    "noscaling": "#d62728",
    "vmbase": "#ff7f0e",
    "sfbase": "#9467bd",
    "vminit": "#8c564b",
    "over": "#2ca02c",
}
_SPARE_COLOURS = ("#17becf", "#e377c2", "#bcbd22", "#7f7f7f", "#000000")

# report.json key order: the contract's fields first, per-second series last, anything else sorted
# in between. Stable output makes two drills' reports diffable.
_TOP_KEYS = (
    "query",
    "pattern",
    "duration_s",
    "target",
    "stable_rate",
    "burst",
    "generated_at",
    "command",
    "runs",
    "rate_by_second",
)
_RUN_KEYS = (
    "policy",
    "peak_p99_ms",
    "mean_p99_ms_during_burst",
    "reaction_s",
    "recovery_s",
    "lambda_worker_seconds",
    "cost_usd",
    "results_match_reference",
    "events",
    "wall_s",
    "notes",
)

# Key order inside nested objects, by the key that holds them.
_NESTED_KEYS: Mapping[str, Sequence[str]] = {"runs": _RUN_KEYS, "burst": ("start_s", "end_s")}

_BURST_SHADE = {"color": "#888888", "alpha": 0.15, "linewidth": 0}
_DPI = 110


# ---------------------------------------------------------------------------------------------------
# Reading the report defensively


def _num(value: Any) -> float | None:
    """A finite float, or None for anything a drill may leave in its place (None, NaN, inf, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _series(run: Mapping[str, Any], key: str) -> list[float | None] | None:
    """A per-second series with every missing value as None, or None when the run lacks it."""
    values = run.get(key)
    if not isinstance(values, Sequence) or isinstance(values, str):
        return None
    return [_num(v) for v in values]


def _runs(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    runs = report.get("runs") or []
    return [r for r in runs if isinstance(r, Mapping)]


def _bursts(report: Mapping[str, Any]) -> list[tuple[float, float]]:
    """Burst windows as (start_s, end_s); malformed windows are skipped rather than failing the report."""
    out = []
    for w in report.get("burst") or []:
        if isinstance(w, Mapping):
            start, end = _num(w.get("start_s")), _num(w.get("end_s"))
            if start is not None and end is not None and end >= start:
                out.append((start, end))
    return out


def policy_labels(report: Mapping[str, Any]) -> list[str]:
    """One unique label per run: its policy, with "#2", "#3" appended when a policy ran more than once."""
    labels: list[str] = []
    for i, run in enumerate(_runs(report)):
        base = str(run.get("policy") or f"run {i + 1}")
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base} #{n}"
        labels.append(label)
    return labels


def peak_p99(run: Mapping[str, Any]) -> float | None:
    """The run's peak p99; falls back to the maximum of its per-second p99 when the field is missing."""
    peak = _num(run.get("peak_p99_ms"))
    if peak is None:
        values = [v for v in _series(run, "p99_ms_by_second") or [] if v is not None]
        peak = max(values) if values else None
    return peak


def mean_p99_during_burst(run: Mapping[str, Any], bursts: Sequence[tuple[float, float]]) -> float | None:
    """The run's mean p99 during bursts; computed from the per-second p99 when the field is missing.

    Second i covers [i, i + 1) and counts as in a burst when it overlaps a window.
    """
    mean = _num(run.get("mean_p99_ms_during_burst"))
    if mean is not None or not bursts:
        return mean
    values = [
        v
        for i, v in enumerate(_series(run, "p99_ms_by_second") or [])
        if v is not None and any(i < end and i + 1 > start for start, end in bursts)
    ]
    return sum(values) / len(values) if values else None


def reference_index(report: Mapping[str, Any]) -> int | None:
    """Which run the others are compared against: sponge when it ran, else the first run."""
    runs = _runs(report)
    for i, run in enumerate(runs):
        if run.get("policy") == REFERENCE_POLICY:
            return i
    return 0 if runs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None and b > 0 else None


def peak_ratios(report: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """Peak p99 of every run divided by every other run's: ``ratios[a][b] = peak(a) / peak(b)``.

    Keys are the labels of ``policy_labels``; a ratio is None when either peak is unknown or zero.
    """
    labels = policy_labels(report)
    peaks = [peak_p99(r) for r in _runs(report)]
    return {
        a: {b: _ratio(pa, pb) for b, pb in zip(labels, peaks, strict=True) if b != a}
        for a, pa in zip(labels, peaks, strict=True)
    }


# ---------------------------------------------------------------------------------------------------
# Formatting numbers for humans


def fmt_ms(value: float | None) -> str:
    """Milliseconds: one decimal below 10 ms, whole numbers with thousands separators above."""
    if value is None:
        return "n/a"
    return f"{value:.1f}" if abs(value) < 10 else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    """A ratio with two significant decimals where it matters (0.21x, 4.76x, 12.3x, 150x)."""
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.0f}x"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def fmt_seconds(value: float | None, *, burst: bool = True) -> str:
    """Seconds with one decimal; "never" when the event did not happen although there was a burst."""
    if value is None:
        return "never" if burst else "—"
    return f"{value:.1f}"


def fmt_usd(value: float | None) -> str:
    """Dollars with two significant digits for sub-cent costs (a drill's Lambda bill is tiny)."""
    if value is None:
        return "n/a"
    if value == 0:
        return "$0"
    if abs(value) >= 0.01:
        return f"${value:,.2f}"
    decimals = -math.floor(math.log10(abs(value))) + 1
    return f"${value:.{decimals}f}"


def _fmt_number(value: float | None, decimals: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{decimals}f}"


def _fmt_match(value: Any) -> tuple[str, str]:
    """Text and rich style of results_match_reference: a check, a cross, or a dash when not checked."""
    if value is True:
        return "✓", "bold green"
    if value is False:
        return "✗", "bold red"
    return "—", "dim"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------------------------------------
# The table (terminal and markdown share its rows)


def _reference_label(report: Mapping[str, Any]) -> str | None:
    ref = reference_index(report)
    return None if ref is None else policy_labels(report)[ref]


def _table_header(report: Mapping[str, Any]) -> list[str]:
    ref = _reference_label(report)
    return [
        "policy",
        "peak p99 (ms)",
        "mean p99 in burst (ms)",
        "reaction (s)",
        "recovery (s)",
        "Lambda (worker·s)",
        "cost (USD)",
        "matches reference",
        f"peak p99 vs {ref}",
    ]


# Alignment of the table's columns: names left, numbers right, the check mark centred.
_ALIGN = ("left", "right", "right", "right", "right", "right", "right", "center", "right")


def _table_rows(report: Mapping[str, Any]) -> list[list[tuple[str, str]]]:
    """Rows of (text, rich style) cells, one per run, in run order."""
    runs, labels, bursts = _runs(report), policy_labels(report), _bursts(report)
    ref = reference_index(report)
    ref_peak = peak_p99(runs[ref]) if ref is not None else None
    rows = []
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        peak = peak_p99(run)
        rows.append(
            [
                (label, "bold" if i == ref else ""),
                (fmt_ms(peak), ""),
                (fmt_ms(mean_p99_during_burst(run, bursts)), ""),
                (fmt_seconds(_num(run.get("reaction_s")), burst=bool(bursts)), ""),
                (fmt_seconds(_num(run.get("recovery_s")), burst=bool(bursts)), ""),
                (_fmt_number(_num(run.get("lambda_worker_seconds"))), ""),
                (fmt_usd(_num(run.get("cost_usd"))), ""),
                _fmt_match(run.get("results_match_reference")),
                (fmt_ratio(_ratio(peak, ref_peak)), "dim" if i == ref else ""),
            ]
        )
    return rows


def _title(report: Mapping[str, Any]) -> str:
    duration = _num(report.get("duration_s"))
    parts = [str(report.get("query", "?")), str(report.get("pattern", "?"))]
    if duration is not None:
        parts.append(f"{duration:g} s")
    return "Burst drill: " + ", ".join(parts)


def render_table(report: Mapping[str, Any], label: str = DEFAULT_LABEL) -> Table:
    """One row per policy with the figures the drill is judged on, numbers right-aligned."""
    table = Table(title=_title(report), caption=label, caption_style="dim italic")
    for name, justify in zip(_table_header(report), _ALIGN, strict=True):
        table.add_column(name, justify=justify, no_wrap=justify == "left")
    for row in _table_rows(report):
        table.add_row(*(Text(text, style=style) for text, style in row))
    return table


def render_ratio_matrix(report: Mapping[str, Any]) -> Table | None:
    """Peak p99 of each policy (row) divided by each other's (column); None below three runs, where the
    main table's single ratio column already says everything."""
    labels = policy_labels(report)
    if len(labels) < 3:
        return None
    ratios = peak_ratios(report)
    table = Table(title="peak p99 ratios (row ÷ column)", title_style="dim")
    table.add_column("")
    for b in labels:
        table.add_column(b, justify="right")
    for a in labels:
        table.add_row(a, *("—" if a == b else fmt_ratio(ratios[a][b]) for b in labels))
    return table


def verdict(report: Mapping[str, Any]) -> str:
    """One paragraph that states, from the numbers alone, how the reference policy fared against the rest.

    Example: "sponge's peak p99 was 850 ms: 0.21x noscaling's (target ≤ 0.3x: met) and 0.44x vmbase's
    (target ≤ 0.5x: met); it first offloaded 1.2 s after the onset; ...; all outputs matched the batch
    reference."
    """
    runs, labels, bursts = _runs(report), policy_labels(report), _bursts(report)
    ref = reference_index(report)
    if ref is None:
        return "No runs were recorded."
    run, name = runs[ref], labels[ref]
    peak = peak_p99(run)
    is_sponge = run.get("policy") == REFERENCE_POLICY

    comparisons = []
    for i, other in enumerate(runs):
        if i == ref:
            continue
        text = f"{fmt_ratio(_ratio(peak, peak_p99(other)))} {labels[i]}'s"
        target = PEAK_P99_TARGETS.get(str(other.get("policy"))) if is_sponge else None
        ratio = _ratio(peak, peak_p99(other))
        if target is not None and ratio is not None:
            text += f" (target ≤ {target:g}x: {'met' if ratio <= target else 'missed'})"
        comparisons.append(text)
    head = f"{name}'s peak p99 was {fmt_ms(peak)} ms"
    if comparisons:
        head += ": " + _join(comparisons)
    mean = mean_p99_during_burst(run, bursts)
    if mean is not None:
        head += f"; its mean p99 during the burst{'s' if len(bursts) > 1 else ''} was {fmt_ms(mean)} ms"
    clauses = [head]

    if bursts:
        reaction = _num(run.get("reaction_s"))
        if run.get("policy") in VM_SCALING:  # their reaction is a VM's executor becoming usable
            clauses.append(
                "no VM it added became usable after the onset"
                if reaction is None
                else f"the VM it added was usable {reaction:.1f} s after the onset"
            )
        elif reaction is None:
            clauses.append("it never offloaded a record")
        else:
            text = f"it first offloaded {reaction:.1f} s after the onset"
            if is_sponge:
                met = "met" if reaction <= REACTION_TARGET_S else "missed"
                text += f" (target ≤ {REACTION_TARGET_S:g} s: {met})"
            clauses.append(text)
        recovery = _num(run.get("recovery_s"))
        clauses.append(
            "its p99 did not fall back under 1.5x the pre-burst level before the trace ended"
            if recovery is None
            else f"its p99 was back under 1.5x the pre-burst level {recovery:.1f} s after the burst ended"
        )
    worker_s, cost = _num(run.get("lambda_worker_seconds")), _num(run.get("cost_usd"))
    if worker_s:
        clauses.append(f"it used {worker_s:,.1f} Lambda worker-seconds ({fmt_usd(cost)})")

    matches = [r.get("results_match_reference") for r in runs]
    failed = [labels[i] for i, m in enumerate(matches) if m is False]
    unchecked = [labels[i] for i, m in enumerate(matches) if m is not True and m is not False]
    if failed:
        clauses.append(f"the outputs of {_join(failed)} did NOT match the batch reference")
    elif not unchecked:
        clauses.append(
            "all outputs matched the batch reference"
            if len(runs) > 1
            else "its output matched the batch reference"
        )
    if unchecked:
        clauses.append(
            f"{_join(unchecked)} {'was' if len(unchecked) == 1 else 'were'} not checked "
            "against the batch reference"
        )
    return "; ".join(clauses) + "."


def print_summary(report: Mapping[str, Any], console: Console, label: str = DEFAULT_LABEL) -> None:
    """Print the table, the pairwise ratios (three or more policies) and the verdict."""
    console.print(render_table(report, label))
    matrix = render_ratio_matrix(report)
    if matrix is not None:
        console.print(matrix)
    console.print(Text(verdict(report)))


# ---------------------------------------------------------------------------------------------------
# Plots


def _colours(labels: Sequence[str], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    spare = iter(_SPARE_COLOURS * (len(labels) // len(_SPARE_COLOURS) + 1))
    used: set[str] = set()
    out = []
    for run in runs:
        colour = POLICY_COLOURS.get(str(run.get("policy")))
        if colour is None or colour in used:
            colour = next(c for c in spare if c not in used)
        used.add(colour)
        out.append(colour)
    return out


def _xy(values: Sequence[float | None], scale: float = 1.0) -> tuple[list[float], list[float]]:
    """Second i is plotted at its middle (i + 0.5); missing values become NaN, which leaves a gap."""
    xs = [i + 0.5 for i in range(len(values))]
    ys = [math.nan if v is None else v * scale for v in values]
    return xs, ys


def _shade_bursts(ax: Any, bursts: Sequence[tuple[float, float]], legend: bool) -> None:
    for i, (start, end) in enumerate(bursts):
        ax.axvspan(start, end, label="burst" if legend and i == 0 else None, **_BURST_SHADE)


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data recorded", transform=ax.transAxes, ha="center", va="center", color="grey")


def _plot_per_run(
    ax: Any,
    report: Mapping[str, Any],
    key: str,
    *,
    scale: float = 1.0,
    drawstyle: str = "default",
    legend: str | None = "upper right",
) -> bool:
    """One line per run of a per-second series, with a legend at ``legend`` (None: no legend, as in the
    lower panels of the combined figure, which share the top panel's). Returns whether anything was drawn."""
    runs, labels = _runs(report), policy_labels(report)
    drawn = False
    for run, label, colour in zip(runs, labels, _colours(labels, runs), strict=True):
        values = _series(run, key)
        if not values or all(v is None for v in values):
            continue
        xs, ys = _xy(values, scale)
        ax.plot(xs, ys, label=label, color=colour, linewidth=1.4, drawstyle=drawstyle)
        drawn = True
    _shade_bursts(ax, _bursts(report), legend=drawn)
    if not drawn:
        _no_data(ax)
    elif legend is not None:
        ax.legend(loc=legend, fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)
    return drawn


def _log_ms_axis(ax: Any) -> None:
    """Log y axis labelled in plain milliseconds (50, 100, 200, 500, 1,000) rather than 10^k."""
    from matplotlib.ticker import FuncFormatter

    def major(value: float, _pos: int) -> str:
        return f"{value:,.0f}" if value >= 1 else f"{value:g}"

    def minor(value: float, pos: int) -> str:
        leading = round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
        return major(value, pos) if leading in (2, 5) else ""

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(major))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _draw_latency(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    _plot_per_run(ax, report, "p99_ms_by_second", legend="upper right" if legend else None)
    positive = any(
        v is not None and v > 0 for r in _runs(report) for v in _series(r, "p99_ms_by_second") or []
    )
    if positive:  # a log axis with nothing positive on it would fail to draw
        _log_ms_axis(ax)
    ax.set_ylabel("p99 latency (ms, log)" if positive else "p99 latency (ms)")


def _draw_rate(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    del legend  # one black line needs no legend; the parameter keeps every panel drawer alike
    rates = [_num(v) for v in report.get("rate_by_second") or []]
    if any(v is not None for v in rates):
        xs, ys = _xy(rates, 1e-3)
        ax.plot(xs, ys, color="black", linewidth=1.2, drawstyle="steps-mid")
        ax.set_ylim(bottom=0)
    else:
        _no_data(ax)
    _shade_bursts(ax, _bursts(report), legend=False)
    ax.set_ylabel("input\n(k events/s)")
    ax.grid(True, alpha=0.3)


def _draw_vm_cpu(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    # The policy's 60-80 % band, so one sees whether the VM side sat inside it.
    ax.axhspan(60, 80, color="#2ca02c", alpha=0.07, linewidth=0)
    ax.axhline(70, color="#2ca02c", linewidth=0.8, linestyle=":")
    _plot_per_run(ax, report, "vm_cpu_by_second", scale=100.0, legend="lower right" if legend else None)
    ax.set_ylim(0, 105)
    ax.set_ylabel("VM CPU (% of usable cores)")
    runs, labels = _runs(report), policy_labels(report)
    cores = [(_series(r, "vm_cores_by_second"), c) for r, c in zip(runs, _colours(labels, runs), strict=True)]
    if any(s and any(v is not None for v in s) for s, _ in cores):
        twin = ax.twinx()
        for values, colour in cores:
            if values:
                xs, ys = _xy(values)
                twin.plot(xs, ys, color=colour, linewidth=1.0, linestyle="--", drawstyle="steps-mid")
        twin.set_ylim(bottom=0)
        twin.set_ylabel("usable cores (dashed)")
        twin.yaxis.get_major_locator().set_params(integer=True)


def _draw_workers(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    loc = "upper right" if legend else None
    _plot_per_run(ax, report, "workers_by_second", drawstyle="steps-mid", legend=loc)
    ax.set_ylim(bottom=0)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("Lambda workers\n(busy or warm)")


def _draw_offload_share(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    loc = "upper right" if legend else None
    _plot_per_run(ax, report, "offload_share_by_second", scale=100.0, legend=loc)
    ax.set_ylim(0, 100)
    ax.set_ylabel("offloaded share (%)")


def _figure_title(report: Mapping[str, Any], what: str, label: str) -> str:
    return f"{what} — {report.get('query', '?')}, {report.get('pattern', '?')} ({label})"


def _x_limits(report: Mapping[str, Any]) -> tuple[float, float]:
    """The whole trace, so every plot of one drill shares its x range."""
    lengths = [len(report.get("rate_by_second") or [])]
    for run in _runs(report):
        lengths += [len(v) for k, v in run.items() if k.endswith("_by_second") and isinstance(v, list)]
    duration = _num(report.get("duration_s")) or 0.0
    return 0.0, max(duration, *lengths, *(end for _, end in _bursts(report)), 1.0)


def write_plots(report: Mapping[str, Any], out_dir: Path | str, label: str = DEFAULT_LABEL) -> list[Path]:
    """Write latency.png, vm_cpu.png, workers.png, offload_share.png and the combined drill.png.

    Every file is written even when its series is missing from all runs (it then says "no data
    recorded"), so the set of files a drill leaves behind does not depend on what it measured.
    Returns the paths in that order.
    """
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    xlim = _x_limits(report)
    paths = []

    def save(fig: Any, bottom: Any, name: str) -> None:
        for ax in fig.axes:
            ax.set_xlim(*xlim)
        bottom.set_xlabel("seconds since the trace started")
        path = out / name
        fig.savefig(path, dpi=_DPI)
        paths.append(path)

    fig = Figure(figsize=(9, 5.5), layout="constrained")
    rate_ax, lat_ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 3])
    _draw_rate(rate_ax, report)
    _draw_latency(lat_ax, report)
    fig.suptitle(_figure_title(report, "p99 latency per second", label))
    save(fig, lat_ax, LATENCY_PNG)

    for name, what, draw in (
        (VM_CPU_PNG, "VM CPU utilisation", _draw_vm_cpu),
        (WORKERS_PNG, "Lambda workers", _draw_workers),
        (OFFLOAD_SHARE_PNG, "offloaded share of the input", _draw_offload_share),
    ):
        fig = Figure(figsize=(9, 4), layout="constrained")
        ax = fig.subplots()
        draw(ax, report)
        fig.suptitle(_figure_title(report, what, label))
        save(fig, ax, name)

    fig = Figure(figsize=(9, 12), layout="constrained")
    axes = fig.subplots(5, 1, sharex=True, height_ratios=[1, 3, 2, 2, 2])
    for ax, draw in zip(
        axes, (_draw_rate, _draw_latency, _draw_vm_cpu, _draw_workers, _draw_offload_share), strict=True
    ):
        draw(ax, report, legend=draw is _draw_latency)
    fig.suptitle(_figure_title(report, "burst drill", label))
    save(fig, axes[-1], COMBINED_PNG)
    return paths


# ---------------------------------------------------------------------------------------------------
# report.md and report.json


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(_md_escape(h) for h in header) + " |"]
    rules = {"left": "---", "right": "---:", "center": ":---:"}
    lines.append("|" + "|".join(rules[a] for a in align) + "|")
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return lines


def write_markdown(
    report: Mapping[str, Any],
    out_dir: Path | str,
    plots: Sequence[Path | str],
    label: str = DEFAULT_LABEL,
) -> Path:
    """Write report.md: heading, command, the table, the verdict and the plots by relative path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heading = _title(report)
    if report.get("generated_at"):
        heading += f" ({report['generated_at']})"
    facts = [f"*{label}*"]
    if report.get("target"):
        facts.append(f"target {report['target']}")
    stable = _num(report.get("stable_rate"))
    if stable is not None:
        facts.append(f"stable rate {stable:,.0f} events/s")
    bursts = _bursts(report)
    facts.append("bursts " + ", ".join(f"{s:g}-{e:g} s" for s, e in bursts) if bursts else "no burst")
    lines = [f"# {heading}", "", " · ".join(facts), ""]
    if report.get("command"):
        lines += ["```", str(report["command"]), "```", ""]

    header = _table_header(report)
    rows = [[text for text, _ in row] for row in _table_rows(report)]
    if rows:
        lines += [*_md_table(header, rows, _ALIGN), ""]
    labels = policy_labels(report)
    if len(labels) >= 3:
        ratios = peak_ratios(report)
        lines += ["Peak p99 ratios (row ÷ column):", ""]
        lines += _md_table(
            ["", *labels],
            [[a, *("—" if a == b else fmt_ratio(ratios[a][b]) for b in labels)] for a in labels],
            ["left"] + ["right"] * len(labels),
        )
        lines.append("")
    lines += [verdict(report), ""]
    for plot in plots:
        path = Path(plot)
        rel = os.path.relpath(path if path.is_absolute() else out / path, out)
        lines += [f"![{path.stem.replace('_', ' ')}]({Path(rel).as_posix()})", ""]
    md = out / "report.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    return md


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become null (json would write invalid NaN tokens)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _ordered(d: Mapping[str, Any], first: Sequence[str]) -> list[str]:
    keys = [k for k in first if k in d]
    rest = [k for k in d if k not in first]
    return (
        keys
        + sorted(k for k in rest if not k.endswith("_by_second"))
        + sorted(k for k in rest if k.endswith("_by_second"))
    )


def _dump(value: Any, indent: int, key_order: Sequence[str] = ()) -> str:
    """Pretty JSON that keeps per-second series on one line each (a 180 s drill would otherwise take
    thousands of lines), with the contract's keys first in a fixed order."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [
            f"{inner}{json.dumps(k)}: {_dump(value[k], indent + 2, _NESTED_KEYS.get(k, ()))}"
            for k in _ordered(value, key_order)
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if all(not isinstance(v, Mapping | list) for v in value):
            return json.dumps(value, allow_nan=False, ensure_ascii=False)
        items = [inner + _dump(v, indent + 2, key_order) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, allow_nan=False, ensure_ascii=False)


def write_json(report: Mapping[str, Any], out_dir: Path | str) -> Path:
    """Write report.json: pretty, keys in a stable order, NaN as null, series one line each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(_dump(_clean(report), 0, _TOP_KEYS) + "\n", encoding="utf-8")
    return path


def write_report(
    report: Mapping[str, Any],
    out_dir: Path | str,
    console: Console | None = None,
    label: str = DEFAULT_LABEL,
) -> dict[str, Path]:
    """Write report.json, the plots and report.md into out_dir; print the summary when given a console.

    Returns the paths keyed "json", "markdown" and the plots' stems ("latency", "vm_cpu", "workers",
    "offload_share", "drill").
    """
    paths: dict[str, Path] = {"json": write_json(report, out_dir)}
    plots = write_plots(report, out_dir, label=label)
    paths.update({p.stem: p for p in plots})
    paths["markdown"] = write_markdown(report, out_dir, plots, label=label)
    if console is not None:
        print_summary(report, console, label=label)
    return paths
