"""Cold and warm start of the deployed worker on LocalStack, and how long LocalStack keeps an idle one.

Method. Starts a LocalStack of its own (host mode, the project's runtime executor, a free port and a
temporary state directory; --keepalive-s sets its LAMBDA_KEEPALIVE_MS, otherwise LocalStack's own
default holds), deploys template.yaml, and invokes the worker through the Lambda API invoker's warm
rounds (router/invokers/lambda_api.py), the same warm-up event the agent's warm pool sends: the
handler imports what a session needs (gRPC, the protocol, polars and pyarrow) and holds its environment
--hold-s seconds. (1) cold: one round of --pool concurrent warm-ups on the fresh function, every one a
new environment, as a burst of --pool workers meets an empty pool; (2) warm burst: the same round
again, every one warm, on --pool distinct environments; (3) warm: --samples single warm-ups one after
another, no hold. A start is the invoke's round trip through boto3 minus the hold: for a cold one,
LocalStack starting the runtime process, the handler's import and the warm-up's imports; `init` is the
handler's own part of it. (4) With --idle S,...: for each S in turn, the function idles S seconds, then
one warm-up says whether an environment was still there (warm) or all had been reclaimed (cold).
Printed: p50 and max of cold starts, p50 and p95 of warm ones, cold / warm, and each idle probe.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report_line import finish
from router.invokers.lambda_api import WARMUP_HOLD_S

METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()


def _ms(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered) * 1000, 1),
        "p95": round(p95 * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
    }


def _starts(answers: Sequence[Any], hold_s: float) -> list[float]:
    return [max(0.0, a.seconds - hold_s) for a in answers]


def measure(invoker: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The four phases of the method on a freshly deployed function."""
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    cold = invoker.warm(args.pool, hold_s=args.hold_s)
    say(f"cold round: {cold.answered}/{args.pool} answered, {cold.cold} cold, {cold.environments} envs")
    burst = invoker.warm(args.pool, hold_s=args.hold_s)
    say(f"warm round: {burst.answered}/{args.pool} answered, {burst.cold} cold, {burst.environments} envs")
    singles = [invoker.warm(1, hold_s=0.0) for _ in range(args.samples)]
    warm = [a for r in singles for a in r.answers]
    cold_starts = _starts([a for a in cold.answers if a.cold], args.hold_s)
    warm_starts = _starts([a for a in warm if not a.cold], 0.0)
    if not cold_starts or not warm_starts:
        raise SystemExit(f"error: no cold ({len(cold_starts)}) or warm ({len(warm_starts)}) start answered")
    probes = []
    for idle_s in args.idle:
        say(f"idling {idle_s:g} s ...")
        time.sleep(idle_s)
        answer = invoker.warm(1, hold_s=0.0).answers
        probes.append({"idle_s": idle_s, "cold": bool(answer and answer[0].cold), "answered": bool(answer)})
        say(f"after {idle_s:g} s idle: {'cold' if probes[-1]['cold'] else 'warm'}")
    cold_ms, warm_ms = _ms(cold_starts), _ms(warm_starts)
    return {
        "pool": args.pool,
        "hold_s": args.hold_s,
        "cold_ms": cold_ms,
        "cold_init_ms": _ms([a.init_seconds for a in cold.answers if a.cold]),
        "cold_environments": cold.environments,
        "warm_burst_ms": _ms(_starts([a for a in burst.answers if not a.cold], args.hold_s) or [0.0]),
        "warm_burst_cold": burst.cold,
        "warm_burst_environments": burst.environments,
        "warm_ms": warm_ms,
        "warm_cold": sum(1 for a in warm if a.cold),
        "cold_vs_warm_p50": round(cold_ms["p50"] / max(warm_ms["p50"], 0.1), 1),
        "idle_probes": probes,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from infra.deploy.clients import client_for
    from infra.deploy.stack import DeployConfig, deploy, destroy
    from infra.localstack.launcher import LocalStackConfig, start, stop
    from router.agent_process import free_port
    from router.invokers.lambda_api import Boto3Invoker, Boto3InvokerConfig

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-cold-start-") as tmp:
        extra = (
            () if args.keepalive_s is None else (("LAMBDA_KEEPALIVE_MS", str(int(args.keepalive_s * 1000))),)
        )
        config = LocalStackConfig(state_dir=Path(tmp) / "localstack", port=free_port(), extra_env=extra)
        handle = start(config)
        try:
            d = deploy(
                DeployConfig.for_target(
                    "localstack", endpoint_url=handle.endpoint, stack_name="bench", stack_dir=Path(tmp)
                )
            )
            invoker = Boto3Invoker(
                Boto3InvokerConfig(
                    function_name=d.function_name,
                    qualifier=d.qualifier,
                    region=d.region,
                    endpoint_url=d.endpoint_url,
                    invocation_type="RequestResponse",
                    function_timeout_s=d.function_timeout_s,
                ),
                client=client_for(d, "lambda"),
            )
            try:
                report = measure(invoker, args)
            finally:
                invoker.close()
                destroy(d, Path(tmp))
        finally:
            stop(config)
    report["keepalive_s"] = args.keepalive_s if args.keepalive_s is not None else "localstack default"
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    report["method"] = METHOD
    return report


def _seconds(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"idle times must be positive seconds, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.cold_start", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument("--pool", type=int, default=3, help="warm-ups per round: the cold burst (default 3)")
    ap.add_argument("--samples", type=int, default=20, help="single warm starts timed (default 20)")
    ap.add_argument(
        "--hold-s",
        type=float,
        default=WARMUP_HOLD_S,
        help=f"each round's warm-up hold (default {WARMUP_HOLD_S:g} s, the warm pool's)",
    )
    ap.add_argument(
        "--idle",
        type=_seconds,
        default=[],
        metavar="S[,S...]",
        help="idle this many seconds, in turn, then probe cold or warm (e.g. 570,630 around LocalStack's "
        "default keep-alive; default: no probe)",
    )
    ap.add_argument(
        "--keepalive-s",
        type=float,
        default=None,
        help="LocalStack's LAMBDA_KEEPALIVE_MS, in seconds (default: LocalStack's own, 600 s)",
    )
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    if args.pool < 1 or args.samples < 1 or not 0 <= args.hold_s <= 5:
        ap.error("--pool and --samples must be at least 1, --hold-s in [0, 5]")
    if args.keepalive_s is not None and not args.keepalive_s > 0:
        ap.error("--keepalive-s must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.table import Table

    args = parse_args(argv)
    report = run(args)
    table = Table(title=f"worker start on LocalStack ({args.pool} at once for cold and warm burst)")
    for col in ("start", "p50 ms", "p95 ms", "max ms", "environments"):
        table.add_column(col, justify="left" if col == "start" else "right")
    for name, key, envs in (
        ("cold (burst of --pool)", "cold_ms", report["cold_environments"]),
        ("  of it, the handler's init", "cold_init_ms", ""),
        ("warm (burst of --pool)", "warm_burst_ms", report["warm_burst_environments"]),
        ("warm (one at a time)", "warm_ms", ""),
    ):
        ms = report[key]
        table.add_row(name, f"{ms['p50']:.1f}", f"{ms['p95']:.1f}", f"{ms['max']:.1f}", str(envs))
    probes = ", ".join(
        f"{p['idle_s']:g} s idle: {'cold' if p['cold'] else 'warm'}" for p in report["idle_probes"]
    )
    table.caption = f"cold / warm (p50): {report['cold_vs_warm_p50']:g}" + (f"; {probes}" if probes else "")
    return finish(report, table, METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())
