"""The drill's PNG plots: p99 latency with the input rate, VM CPU, Lambda workers, offloaded share.

matplotlib is imported inside the plotting functions, so importing this module (core/drill/report.py
does, and the CLI imports that) stays cheap, and figures are built with ``matplotlib.figure.Figure``
rather than pyplot: no global figure registry, no display backend, nothing to close.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.drill.report_numbers import DEFAULT_LABEL, burst_windows, finite, policy_labels, runs_of, series

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

_BURST_SHADE = {"color": "#888888", "alpha": 0.15, "linewidth": 0}
_DPI = 110


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
    runs, labels = runs_of(report), policy_labels(report)
    drawn = False
    for run, label, colour in zip(runs, labels, _colours(labels, runs), strict=True):
        values = series(run, key)
        if not values or all(v is None for v in values):
            continue
        xs, ys = _xy(values, scale)
        ax.plot(xs, ys, label=label, color=colour, linewidth=1.4, drawstyle=drawstyle)
        drawn = True
    _shade_bursts(ax, burst_windows(report), legend=drawn)
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
        v is not None and v > 0 for r in runs_of(report) for v in series(r, "p99_ms_by_second") or []
    )
    if positive:  # a log axis with nothing positive on it would fail to draw
        _log_ms_axis(ax)
    ax.set_ylabel("p99 latency (ms, log)" if positive else "p99 latency (ms)")


def _draw_rate(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    del legend  # one black line needs no legend; the parameter keeps every panel drawer alike
    rates = [finite(v) for v in report.get("rate_by_second") or []]
    if any(v is not None for v in rates):
        xs, ys = _xy(rates, 1e-3)
        ax.plot(xs, ys, color="black", linewidth=1.2, drawstyle="steps-mid")
        ax.set_ylim(bottom=0)
    else:
        _no_data(ax)
    _shade_bursts(ax, burst_windows(report), legend=False)
    ax.set_ylabel("input\n(k events/s)")
    ax.grid(True, alpha=0.3)


def _draw_vm_cpu(ax: Any, report: Mapping[str, Any], legend: bool = True) -> None:
    # The policy's 60-80 % band, so one sees whether the VM side sat inside it.
    ax.axhspan(60, 80, color="#2ca02c", alpha=0.07, linewidth=0)
    ax.axhline(70, color="#2ca02c", linewidth=0.8, linestyle=":")
    _plot_per_run(ax, report, "vm_cpu_by_second", scale=100.0, legend="lower right" if legend else None)
    ax.set_ylim(0, 105)
    ax.set_ylabel("VM CPU (% of usable cores)")
    runs, labels = runs_of(report), policy_labels(report)
    cores = [(series(r, "vm_cores_by_second"), c) for r, c in zip(runs, _colours(labels, runs), strict=True)]
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
    for run in runs_of(report):
        lengths += [len(v) for k, v in run.items() if k.endswith("_by_second") and isinstance(v, list)]
    duration = finite(report.get("duration_s")) or 0.0
    return 0.0, max(duration, *lengths, *(end for _, end in burst_windows(report)), 1.0)


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
