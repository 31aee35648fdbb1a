"""The drill's table, for the terminal (rich) and for report.md (markdown), from the same rows.

Both show one row per policy with the figures of core/drill/report_numbers.py, so what the terminal
prints and what report.md keeps cannot disagree; report.md adds the heading, the command, the verdict
and links to the plots.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from core.drill.report_numbers import (
    DEFAULT_LABEL,
    burst_windows,
    cost_vs_over,
    deployment_text,
    finite,
    fmt_ms,
    fmt_ratio,
    fmt_seconds,
    fmt_usd,
    mean_p99_during_burst,
    peak_p99,
    peak_ratios,
    peak_vs_pre_burst,
    policy_labels,
    ratio_of,
    reference_index,
    runs_of,
    verdict,
)

# ---------------------------------------------------------------------------------------------------
# The table (terminal and markdown share its rows)


def _fmt_number(value: float | None, decimals: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{decimals}f}"


def _fmt_match(value: Any) -> tuple[str, str]:
    """Text and rich style of results_match_reference: a check, a cross, or a dash when not checked."""
    if value is True:
        return "✓", "bold green"
    if value is False:
        return "✗", "bold red"
    return "—", "dim"


def _reference_label(report: Mapping[str, Any]) -> str | None:
    ref = reference_index(report)
    return None if ref is None else policy_labels(report)[ref]


def _table_header(report: Mapping[str, Any]) -> list[str]:
    ref = _reference_label(report)
    return [
        "policy",
        "peak p99 (ms)",
        "pre-burst p99 (ms)",
        "mean p99 in burst (ms)",
        "reaction (s)",
        "recovery (s)",
        "Lambda (worker·s)",
        "cost (USD)",
        "matches reference",
        f"peak p99 vs {ref}",
    ]


# Alignment of the table's columns: names left, numbers right, the check mark centred.
_ALIGN = ("left", "right", "right", "right", "right", "right", "right", "right", "center", "right")


def _table_rows(report: Mapping[str, Any]) -> list[list[tuple[str, str]]]:
    """Rows of (text, rich style) cells, one per run, in run order."""
    runs, labels, bursts = runs_of(report), policy_labels(report), burst_windows(report)
    ref = reference_index(report)
    ref_peak = peak_p99(runs[ref]) if ref is not None else None
    rows = []
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        peak = peak_p99(run)
        rows.append(
            [
                (label, "bold" if i == ref else ""),
                (fmt_ms(peak), ""),
                (fmt_ms(finite(run.get("pre_burst_p99_ms"))), ""),
                (fmt_ms(mean_p99_during_burst(run, bursts)), ""),
                (fmt_seconds(finite(run.get("reaction_s")), burst=bool(bursts)), ""),
                (fmt_seconds(finite(run.get("recovery_s")), burst=bool(bursts)), ""),
                (_fmt_number(finite(run.get("lambda_worker_seconds"))), ""),
                (fmt_usd(finite(run.get("cost_usd"))), ""),
                _fmt_match(run.get("results_match_reference")),
                (fmt_ratio(ratio_of(peak, ref_peak)), "dim" if i == ref else ""),
            ]
        )
    return rows


def _title(report: Mapping[str, Any]) -> str:
    duration = finite(report.get("duration_s"))
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


# ---------------------------------------------------------------------------------------------------
# report.md


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(_md_escape(h) for h in header) + " |"]
    rules = {"left": "---", "right": "---:", "center": ":---:"}
    lines.append("|" + "|".join(rules[a] for a in align) + "|")
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return lines


_CAPACITY_HEADER = (
    "policy",
    "deployment",
    "steady at (s)",
    "peak ÷ pre-burst p99",
    "admitted in burst (events/s)",
    "VM CPU in burst",
    "share before onset",
    "cost vs over",
)


def _capacity_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """Where each policy ran and what it did with its capacity (empty for reports without these fields)."""
    rows = []
    for run, label in zip(runs_of(report), policy_labels(report), strict=True):
        if "deployment" not in run:
            continue
        burst = run.get("in_burst") if isinstance(run.get("in_burst"), Mapping) else {}
        early = run.get("before_onset") if isinstance(run.get("before_onset"), Mapping) else {}
        cpu = finite(burst.get("vm_cpu"))
        flag = " (behind with idle cores)" if burst.get("behind_with_idle_cores") else ""
        rows.append(
            [
                label,
                deployment_text(run),
                fmt_seconds(finite(run.get("steady_s"))),
                fmt_ratio(peak_vs_pre_burst(run)),
                _fmt_number(finite(burst.get("admitted_events_per_s")), 0),
                ("n/a" if cpu is None else f"{cpu:.0%}") + flag,
                f"{finite(early.get('max_share')) or 0:.0%}",
                fmt_ratio(cost_vs_over(report, run)),
            ]
        )
    return rows


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
    stable = finite(report.get("stable_rate"))
    if stable is not None:
        facts.append(f"stable rate {stable:,.0f} events/s")
    bursts = burst_windows(report)
    facts.append("bursts " + ", ".join(f"{s:g}-{e:g} s" for s, e in bursts) if bursts else "no burst")
    lines = [f"# {heading}", "", " · ".join(facts), ""]
    if report.get("command"):
        lines += ["```", str(report["command"]), "```", ""]

    header = _table_header(report)
    rows = [[text for text, _ in row] for row in _table_rows(report)]
    if rows:
        lines += [*md_table(header, rows, _ALIGN), ""]
    labels = policy_labels(report)
    if len(labels) >= 3:
        ratios = peak_ratios(report)
        lines += ["Peak p99 ratios (row ÷ column):", ""]
        lines += md_table(
            ["", *labels],
            [[a, *("—" if a == b else fmt_ratio(ratios[a][b]) for b in labels)] for a in labels],
            ["left"] + ["right"] * len(labels),
        )
        lines.append("")
    lines += [verdict(report), ""]
    capacity = _capacity_rows(report)
    if capacity:
        lines += ["Deployment and capacity per policy:", ""]
        lines += md_table(
            _CAPACITY_HEADER, capacity, ("left", "left", *["right"] * (len(_CAPACITY_HEADER) - 2))
        )
        lines.append("")
    for plot in plots:
        path = Path(plot)
        rel = os.path.relpath(path if path.is_absolute() else out / path, out)
        lines += [f"![{path.stem.replace('_', ' ')}]({Path(rel).as_posix()})", ""]
    md = out / "report.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    return md
