"""Turn a burst drill's report dict into what people read: report.json, report.md, PNG plots, a table.

The same code serves a drill measured on this machine and the paper-scale simulator, which passes
``label="simulated"`` so no figure can be mistaken for a measurement. The figures come from
core/drill/report_numbers.py, the table and report.md from core/drill/report_tables.py, the plots
from core/drill/report_plots.py; this module writes report.json and puts the files together.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from core.drill.report_numbers import DEFAULT_LABEL, verdict
from core.drill.report_plots import write_plots
from core.drill.report_tables import render_ratio_matrix, render_table, write_markdown

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


def print_summary(report: Mapping[str, Any], console: Console, label: str = DEFAULT_LABEL) -> None:
    """Print the table, the pairwise ratios (three or more policies) and the verdict."""
    console.print(render_table(report, label))
    matrix = render_ratio_matrix(report)
    if matrix is not None:
        console.print(matrix)
    console.print(Text(verdict(report)))


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
