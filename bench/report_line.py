"""How a bench ends: its table and method on stdout, then (with --json) one line of strict JSON.

Why one home: DECISIONS' bench convention is that `--json` makes the last stdout line one JSON object,
and every bench that follows it ends the same way.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any


def json_line(report: Mapping[str, Any]) -> str:
    """The report as one line of strict JSON (NaN and infinities become null)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, Mapping):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(report), separators=(",", ":"), allow_nan=False)


def finish(report: Mapping[str, Any], table: Any, method: str, as_json: bool) -> int:
    """Print the bench's table, its method and time (when it says), and the JSON line; 1 when a query
    of its `queries` failed."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    console.print(f"method: {method}", highlight=False)
    if "elapsed_s" in report:
        console.print(f"total bench time {report['elapsed_s']:.0f} s", highlight=False)
    sys.stdout.flush()
    if as_json:
        print(json_line(report), flush=True)
    return 1 if any(q.get("error") for q in report.get("queries", ())) else 0
