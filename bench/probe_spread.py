"""How far the drill's calibration probes scatter: its stable rate and offload cost, probed again and again.

Method. Runs the drill's two probes (core/drill/calibrate.py: one plain, one offloading half, each a
warm-up of small epochs then paced full ones, fitted T = F + c n) --repeats times, each time in a
fresh Spark application as a drill starts one, once per --cap-scales entry in turn so that this
machine's drift falls on each alike. A cap scale multiplies the events a full epoch may hold (1: the
drill's own probe, whose records take ~0.2 s of a ~1.2 s epoch); --steps-scaled gives the paced steps
used for the scales above 1 (enough events for several full epochs at the larger cap). Printed per
probe pair: the stable rate, both fits and the offload cost k; then per scale the median, lowest and
highest k and stable rate. A probe whose k scatters by more than the policy can tolerate decides the
drill's verdict by chance: the cap sponge's source gets in a burst is 1 / ((1 - s) + s k) times the
drill's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report_line import finish

METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()


def probe_pair(query: str, report: Path, cap_scale: float, steps: str) -> dict[str, Any]:
    """The drill's two probes in one fresh application, as `sponge drill` runs them."""
    from core.cli.options import memory_config
    from core.drill import drill
    from core.drill.calibrate import PROBE_SCHEDULE, PROBE_SHARE, offload_cost
    from core.drill.spark_app import SparkApp

    memory = memory_config(None, None, None, None, executors=drill.EXECUTORS, no_executors="")
    config = drill.DrillConfig(query=query, report=report, memory=memory)
    steps = PROBE_SCHEDULE if cap_scale == 1 else steps
    started = time.monotonic()
    with SparkApp(report) as app:
        plain = drill._probe(config, "probe", 0.0, lambda _: None, app, steps, cap_scale)
        routed = drill._probe(config, "probe-offload", PROBE_SHARE, lambda _: None, app, steps, cap_scale)
    return {
        "cap_scale": cap_scale,
        "stable_rate": plain.stable_rate(drill.BATCH_CAP),
        "plain": plain.to_json(),
        "routed": routed.to_json(),
        "offload_cost": offload_cost(plain, routed, PROBE_SHARE),
        "seconds": time.monotonic() - started,
    }


def spread(pairs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per cap scale: the median, lowest and highest offload cost and stable rate of its probe pairs."""
    out: dict[str, dict[str, float]] = {}
    for scale in sorted({p["cap_scale"] for p in pairs}):
        ks = [p["offload_cost"] for p in pairs if p["cap_scale"] == scale]
        rates = [p["stable_rate"] for p in pairs if p["cap_scale"] == scale]
        out[f"{scale:g}"] = {
            "k_median": statistics.median(ks),
            "k_min": min(ks),
            "k_max": max(ks),
            "rate_median": statistics.median(rates),
            "rate_min": min(rates),
            "rate_max": max(rates),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    pairs = []
    with tempfile.TemporaryDirectory(prefix="probe-spread-") as tmp:
        for i in range(args.repeats):
            for scale in args.cap_scales:
                print(f"probes {i + 1}/{args.repeats}, cap x{scale:g}", file=sys.stderr, flush=True)
                pairs.append(probe_pair(args.query, Path(tmp) / f"{i}-{scale:g}", scale, args.steps_scaled))
    elapsed = time.monotonic() - started
    return {"query": args.query, "pairs": pairs, "spread": spread(pairs), "elapsed_s": elapsed}


def table(report: Mapping[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table

    t = Table(title=f"{report['query']}: the drill's probes, repeated")
    for col in ("cap x", "stable rate (/s)", "F (s)", "c (us)", "routed F (s)", "routed c (us)", "k", "s"):
        t.add_column(col, justify="right")
    for p in report["pairs"]:
        t.add_row(
            f"{p['cap_scale']:g}",
            f"{p['stable_rate']:,.0f}",
            f"{p['plain']['fixed_s']:.2f}",
            f"{p['plain']['per_event_s'] * 1e6:.2f}",
            f"{p['routed']['fixed_s']:.2f}",
            f"{p['routed']['per_event_s'] * 1e6:.2f}",
            f"{p['offload_cost']:.2f}",
            f"{p['seconds']:.0f}",
        )
    s = Table(title="per cap scale: the offload cost k and the stable rate")
    for col in ("cap x", "k median", "k lowest-highest", "rate median", "rate lowest-highest"):
        s.add_column(col, justify="right")
    for scale, v in report["spread"].items():
        s.add_row(
            scale,
            f"{v['k_median']:.2f}",
            f"{v['k_min']:.2f}-{v['k_max']:.2f}",
            f"{v['rate_median']:,.0f}",
            f"{v['rate_min']:,.0f}-{v['rate_max']:,.0f}",
        )
    return Group(t, s)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.probe_spread",
        description="How far the drill's calibration probes scatter, at the drill's epoch cap and larger.",
    )
    ap.add_argument("--query", default="q5", help="NEXMark query (default q5)")
    ap.add_argument("--repeats", type=int, default=3, help="probe pairs per cap scale (default 3)")
    ap.add_argument(
        "--cap-scales",
        default="1,2",
        type=lambda text: [float(x) for x in text.split(",") if x],
        help="the full epochs' cap over the drill's, comma-separated (default 1,2)",
    )
    ap.add_argument(
        "--steps-scaled",
        default="5:500000",
        help="paced steps (seconds:events/s) of the probes with a cap scale above 1 (default 5:500000)",
    )
    ap.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = ap.parse_args(argv)
    if args.repeats < 1 or not args.cap_scales or min(args.cap_scales) <= 0:
        ap.error("--repeats must be at least 1 and every cap scale positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    return finish(report, table(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
