"""The 1 MB chunk round trip over TLS against plaintext, measured in one run.

Method. Each round starts an agent (the product's AgentServer) with an embedded fleet of worker
processes on 127.0.0.1, once serving plaintext and once TLS under a CA made for it (as a run's agent
does, core/wire/run_pki.py), in alternating order; each times `--rounds` Offload calls of a chunk of
NEXMark bids of about `--chunk-mb` MB through Q5's transient program, warm workers, a distinct key
each time (router/measure.py). The round trip is the client's: encode, gRPC to the agent, dispatch
to a worker over its own TLS or plaintext stream, the program, and back. Printed: p50 and p99 of
each transport (the median over rounds) and TLS / plaintext for both; the machine is shared, so only
the ratio of the same run is compared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from bench.report_line import finish
from router.measure import measure

TRANSPORTS = ("plaintext", "tls")
METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {t: [] for t in TRANSPORTS}
    for r in range(args.repeats):
        order = TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]
        for transport in order:
            m = measure(args.chunk_mb, args.rounds, args.workers, "q5", local=False, tls=transport == "tls")
            samples[transport].append(m)
            print(
                f"round {r + 1}/{args.repeats} {transport}: p50 {m['offload_p50_ms']} ms, "
                f"p99 {m['offload_p99_ms']} ms",
                file=sys.stderr,
                flush=True,
            )
    figures = {
        t: {q: round(statistics.median(m[f"offload_{q}_ms"] for m in samples[t]), 2) for q in ("p50", "p99")}
        for t in TRANSPORTS
    }
    return {
        "method": METHOD,
        "chunk_mb": args.chunk_mb,
        "chunk_rows": samples["tls"][0]["chunk_rows"],
        "rounds": args.rounds,
        "repeats": args.repeats,
        "plaintext_ms": figures["plaintext"],
        "tls_ms": figures["tls"],
        "p50_ratio_tls_vs_plaintext": round(figures["tls"]["p50"] / figures["plaintext"]["p50"], 3),
        "p99_ratio_tls_vs_plaintext": round(figures["tls"]["p99"] / figures["plaintext"]["p99"], 3),
        "tls_p99_goal_ms": 20.0,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.transport", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument("--chunk-mb", type=float, default=1.0, help="chunk size in Arrow MB (default 1)")
    ap.add_argument("--rounds", type=int, default=200, help="timed round trips per agent (default 200)")
    ap.add_argument("--repeats", type=int, default=3, help="agents per transport, alternating (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="embedded workers (default 2)")
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1 or args.workers < 1 or not args.chunk_mb > 0:
        ap.error("--rounds, --repeats and --workers must be at least 1, --chunk-mb positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.table import Table

    args = parse_args(argv)
    report = run(args)
    table = Table(title=f"{args.chunk_mb:g} MB chunk round trip ({report['chunk_rows']:,} bids)")
    for col in ("transport", "p50 ms", "p99 ms"):
        table.add_column(col, justify="left" if col == "transport" else "right")
    for t in TRANSPORTS:
        table.add_row(t, f"{report[f'{t}_ms']['p50']:.2f}", f"{report[f'{t}_ms']['p99']:.2f}")
    table.caption = (
        f"TLS / plaintext: p50 {report['p50_ratio_tls_vs_plaintext']:.3f}, "
        f"p99 {report['p99_ratio_tls_vs_plaintext']:.3f}"
    )
    return finish(report, table, METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
