"""Sponge's steady state against noscaling's, over repeated drills: is the gap real or this machine's noise?

Method. Runs `sponge drill --compare noscaling,sponge` --repeats times on one trace (the real drill:
standalone cluster, warm-up, steady start, paced trace), swapping the two policies' order every other
time so drift on a shared machine falls on both. The stable rate is the first drill's calibration, or
--rate. Per drill it reads three figures from the 10 s before the onset, the window the drill's verdict
uses: each policy's pre-burst p99 (the median p99 of those seconds), and the median duration and size
(events) of its epochs that started in them. Both policies keep up there, so an epoch holds what
arrived during the last one: a fixed cost per epoch shows as longer and bigger epochs, a cost per
event as longer epochs of the same size. Printed: every drill's figures and sponge/noscaling ratios,
and the ratios' medians; then where the steady epochs' time went, Spark's phases (durationMs: planning,
the sources' offsets, the batch itself, the logs' commits) as sponge's median minus noscaling's, so a gap
shows in the phase that makes it. A drill in which either policy never reached a steady state before the
onset is shown but left out of the medians. A fair drill wants the pre-burst ratio within 1.10.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report_line import finish
from core.drill.steady import PRE_BURST_S

METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()
POLICIES = ("noscaling", "sponge")
FIGURES = ("pre_burst_p99_ms", "steady_epoch_s", "steady_epoch_events")
SPONGE = Path(sys.executable).with_name("sponge")  # the CLI `make setup` installs beside this Python


def _steady(result: Mapping[str, Any], onset_s: float) -> list[int]:
    """Indices of a run's epochs started in the PRE_BURST_S before the onset."""
    origin = result["origin"]
    return [
        i
        for i, e in enumerate(result["epochs"])
        if onset_s - PRE_BURST_S <= e["started_t"] - origin < onset_s
    ]


def steady_epochs(result: Mapping[str, Any], onset_s: float) -> dict[str, float | None]:
    """Median duration (s) and size (events) of a run's epochs started in the PRE_BURST_S before the onset."""
    epochs = [result["epochs"][i] for i in _steady(result, onset_s)]
    if not epochs:
        return {"steady_epoch_s": None, "steady_epoch_events": None}
    return {
        "steady_epoch_s": statistics.median(e["commit_t"] - e["started_t"] for e in epochs),
        "steady_epoch_events": statistics.median(e["covered"] - e["start"] for e in epochs),
    }


def steady_phases(result: Mapping[str, Any], onset_s: float) -> dict[str, float]:
    """Median ms of each Spark phase (durationMs) over the same epochs (none from a run that did not
    record them)."""
    phases = result.get("phases") or []
    rows = [phases[i] for i in _steady(result, onset_s) if i < len(phases)]
    names = sorted({k for r in rows for k in r})
    return {k: float(statistics.median(r.get(k, 0) for r in rows)) for k in names}


def drill_figures(report_dir: Path) -> tuple[dict[str, dict[str, float | None]], dict[str, dict[str, float]]]:
    """Per policy of one drill: its pre-burst p99 and its steady epochs; and their phases."""
    report = json.loads((report_dir / "report.json").read_text())
    onset = report["burst"][0]["start_s"]
    out: dict[str, dict[str, float | None]] = {}
    phases: dict[str, dict[str, float]] = {}
    for run in report["runs"]:
        result = json.loads((report_dir / run["policy"] / "result.json").read_text())
        out[run["policy"]] = {"pre_burst_p99_ms": run["pre_burst_p99_ms"], **steady_epochs(result, onset)}
        phases[run["policy"]] = steady_phases(result, onset)
    return out, phases


def settled(report_dir: Path) -> bool:
    """Whether every policy of one drill reached a steady state before the onset. A drill whose policy
    never did (the machine could not keep up with the rate: epochs at the batch cap, a growing backlog)
    compares backlogs, not steady states, so its ratios are left out of the medians."""
    report = json.loads((report_dir / "report.json").read_text())
    onset = report["burst"][0]["start_s"]
    return all(isinstance(r.get("steady_s"), (int, float)) and r["steady_s"] < onset for r in report["runs"])


def phase_gap(phases: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Sponge's median ms of each phase minus noscaling's."""
    a, b = phases["sponge"], phases["noscaling"]
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in sorted({*a, *b})}


def ratios(figures: Mapping[str, Mapping[str, float | None]]) -> dict[str, float | None]:
    """sponge over noscaling, per figure (None where either is missing)."""
    out: dict[str, float | None] = {}
    for name in FIGURES:
        a, b = figures["sponge"][name], figures["noscaling"][name]
        out[name] = a / b if a is not None and b else None
    return out


def _drill(args: argparse.Namespace, order: Sequence[str], rate: float | None, report: Path) -> None:
    cmd = [
        str(SPONGE), "drill", "--query", args.query, "--compare", ",".join(order),
        "--pattern", args.pattern, "--duration", str(args.duration), "--lead", str(args.lead),
        "--seed", str(args.seed), "--report", str(report),
    ]  # fmt: skip
    if rate is not None:
        cmd += ["--rate", str(rate)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    rate, drills = args.rate, []
    with tempfile.TemporaryDirectory(prefix="steady-gap-") as tmp:
        for i in range(args.repeats):
            order = POLICIES if i % 2 == 0 else POLICIES[::-1]
            report = Path(tmp) / f"drill-{i}"
            print(f"drill {i + 1}/{args.repeats}: {', '.join(order)}", file=sys.stderr, flush=True)
            _drill(args, order, rate, report)
            if rate is None:
                rate = json.loads((report / "report.json").read_text())["stable_rate"]
            figures, phases = drill_figures(report)
            drills.append(
                {
                    "order": list(order),
                    "settled": settled(report),
                    "figures": figures,
                    "ratios": ratios(figures),
                    "phase_gap_ms": phase_gap(phases),
                }
            )
    kept = [d for d in drills if d["settled"]]
    median: dict[str, float | None] = {}
    for name in FIGURES:
        values = [d["ratios"][name] for d in kept if d["ratios"][name] is not None]
        median[name] = statistics.median(values) if values else None
    names = sorted({k for d in drills for k in d["phase_gap_ms"]})
    return {
        "query": args.query,
        "rate": rate,
        "drills": drills,
        "median_ratio": median,
        "median_phase_gap_ms": {
            k: statistics.median(d["phase_gap_ms"].get(k, 0.0) for d in kept) if kept else None for k in names
        },
        "elapsed_s": time.monotonic() - started,
    }


def table(report: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table

    t = Table(title=f"{report['query']} at {report['rate']:,.0f}/s: sponge / noscaling before the onset")
    columns = ("pre-burst p99 (ms)", "ratio", "steady epoch (s)", "ratio", "its events", "ratio")
    for col in ("drill", "order", *columns):
        t.add_column(col, justify="right")

    def num(x: float | None, fmt: str) -> str:
        return format(x, fmt) if x is not None else "n/a"

    def pair(figures: Mapping[str, Mapping[str, float | None]], name: str, fmt: str) -> str:
        return " / ".join(num(figures[p][name], fmt) for p in POLICIES[::-1])

    for i, d in enumerate(report["drills"], 1):
        f, r = d["figures"], d["ratios"]
        t.add_row(
            str(i) if d["settled"] else f"{i} (never steady: left out)",
            " then ".join(d["order"]),
            pair(f, "pre_burst_p99_ms", ",.0f"),
            num(r["pre_burst_p99_ms"], ".2f"),
            pair(f, "steady_epoch_s", ".2f"),
            num(r["steady_epoch_s"], ".2f"),
            pair(f, "steady_epoch_events", ",.0f"),
            num(r["steady_epoch_events"], ".2f"),
        )
    m = report["median_ratio"]
    t.add_row("median", "", *(x for name in FIGURES for x in ("", num(m[name], ".2f"))))
    gaps = Table(
        title="where sponge's steady epochs spend more: its median ms minus noscaling's, per Spark phase"
    )
    for col in ("phase", *(f"drill {i}" for i in range(1, len(report["drills"]) + 1)), "median"):
        gaps.add_column(col, justify="right")
    for name, median in report["median_phase_gap_ms"].items():
        gaps.add_row(
            name,
            *(f"{d['phase_gap_ms'].get(name, 0.0):+,.0f}" for d in report["drills"]),
            f"{median:+,.0f}" if median is not None else "n/a",
        )
    return Group(t, gaps)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.steady_gap",
        description="Sponge's steady state against noscaling's over repeated drills (ratios and medians).",
    )
    ap.add_argument("--query", default="q5", help="NEXMark query (default q5)")
    ap.add_argument("--repeats", type=int, default=3, help="drills, order swapped each time (default 3)")
    ap.add_argument("--rate", type=float, help="stable events/s (default: the first drill's calibration)")
    ap.add_argument("--pattern", default="sudden:2x:10s", help="burst after the lead (default sudden:2x:10s)")
    ap.add_argument("--lead", type=float, default=30, help="stable seconds before the onset (default 30)")
    ap.add_argument("--duration", type=float, default=50, help="seconds of trace per policy (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    ap.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = ap.parse_args(argv)
    if args.repeats < 1 or (args.rate is not None and args.rate <= 0):
        ap.error("--repeats must be at least 1 and --rate positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    return finish(report, table(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
