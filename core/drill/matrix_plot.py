"""The drill matrix's heat-map: sponge's peak p99 over each baseline's, every cell, the targets marked.

Why a heat-map of ratio ÷ target rather than of the ratio: the targets differ per baseline (0.3x
noscaling, 0.5x vmbase, 1.2x over), so a colour must mean the same verdict in every column: green where
sponge met the target, red where it missed, and the deeper the further off. Each square also says its
ratio and ✓ or ✗, so the verdict survives a grey-scale print; a cell without a figure (not run, or no
peak) is hatched grey.

matplotlib is imported inside the function, as in core/drill/report_plots.py, so importing this module
stays cheap, and the figure is a plain ``matplotlib.figure.Figure`` (no pyplot, no display backend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.drill.report_numbers import PEAK_P99_TARGETS, REFERENCE_POLICY, fmt_ratio

_DPI = 110
_SPAN = 1.0  # colours saturate at 10x better or worse than the target (log10 of ratio ÷ target)
_EDGE = 0.02  # how far from the target's line a met or missed square is drawn, at least


def heatmap_columns(matrix: Mapping[str, Any]) -> list[str]:
    """The baselines with a target that the matrix ran, in the order of --compare."""
    policies = matrix["settings"]["policies"]
    return [p for p in policies if p != REFERENCE_POLICY and p in PEAK_P99_TARGETS]


def square_score(ratio: float, target: float) -> float:
    """Where a square sits on the colour scale: log10(ratio ÷ target), below zero (green) when the ratio
    meets the target and above (red) when it misses, even for a ratio exactly at its target."""
    score = math.log10(ratio / target)
    return min(score, -_EDGE) if ratio <= target else max(score, _EDGE)


def write_heatmap(matrix: Mapping[str, Any], path: Path) -> Path:
    """Write the heat-map PNG at `path`: one row per cell, one column per targeted baseline."""
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    columns = heatmap_columns(matrix)
    rows = matrix["cells"]
    fig = Figure(
        figsize=(2.2 + 1.9 * max(len(columns), 1), 1.6 + 0.42 * max(len(rows), 1)), layout="constrained"
    )
    ax = fig.subplots()
    norm = Normalize(-_SPAN, _SPAN)
    cmap = _colormap()
    image = [[math.nan] * len(columns) for _ in rows]
    for i, row in enumerate(rows):
        for j, policy in enumerate(columns):
            ratio = (row.get("peak_p99_ratio") or {}).get(policy)
            if ratio is None or ratio <= 0:
                ax.add_patch(_missing(j, i))
                ax.text(j, i, "n/a" if row["state"] == "done" else row["state"], ha="center", va="center",
                        color="#555555", fontsize="small")  # fmt: skip
                continue
            met = ratio <= PEAK_P99_TARGETS[policy]
            score = image[i][j] = square_score(ratio, PEAK_P99_TARGETS[policy])
            shade = cmap(norm(score))
            dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
            ax.text(j, i, f"{fmt_ratio(ratio)} {'✓' if met else '✗'}", ha="center", va="center",
                    color="white" if dark else "black", fontsize="small",
                    fontweight="normal" if met else "bold")  # fmt: skip
    shown = ax.imshow(image or [[math.nan]], cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"sponge ÷ {p}\n(target ≤ {PEAK_P99_TARGETS[p]:g}x)" for p in columns])
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['cell']}  ({r['pattern']})" for r in rows])
    ax.set_xticks([j + 0.5 for j in range(len(columns) - 1)], minor=True)
    ax.set_yticks([i + 0.5 for i in range(len(rows) - 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    ax.set_xlim(-0.5, len(columns) - 0.5 if columns else 0.5)
    ax.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)
    if not columns:
        ax.text(0, 0, "no baseline with a target was compared", ha="center", va="center", color="grey")
    bar = fig.colorbar(shown, ax=ax, shrink=0.8, ticks=[-_SPAN, -0.5, 0, 0.5, _SPAN])
    bar.ax.set_yticklabels(["10x better", "3x better", "at target", "3x worse", "10x worse"])
    bar.set_label("sponge's ratio ÷ the target")
    fig.suptitle(f"Drill matrix: sponge's peak p99 ÷ each baseline's ({matrix.get('label', '')})")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def _colormap() -> Any:
    """Green below the target, red above it, and no colour that could be read either way at it."""
    from matplotlib.colors import LinearSegmentedColormap

    return LinearSegmentedColormap.from_list(
        "target", [(0.0, "#1a7f37"), (0.499, "#a5d6a7"), (0.501, "#ef9a9a"), (1.0, "#b71c1c")]
    )


def _missing(x: int, y: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle(
        (x - 0.5, y - 0.5), 1, 1, facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="//", linewidth=0
    )
