"""`sponge queries`, `compile`, `reference`, `events`: the queries, their plans, their batch answers."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from core.cli.options import (
    EventsOpt,
    JobArg,
    OutputOpt,
    QueryArg,
    RateOpt,
    SeedOpt,
    SlideOpt,
    WindowOpt,
    check_query,
    generator,
    params,
)
from core.console import out


def queries() -> None:
    """List the NEXMark queries, one line each."""
    from core.nexmark.queries import QUERIES

    for info in QUERIES.values():
        out.print(f"{info.name}  {info.summary}")


def compile_(
    job_ref: JobArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the DAGs and the offload chains as JSON.")
    ] = False,
) -> None:
    """Compile a query or your own job: its logical DAG, the DAG after operator insertion (TOs, ROs,
    MOs), and which operators a burst moves to workers. A job's wrong column, type or operator fails
    here, on its line, before Spark or any worker starts."""
    from core.job import load
    from core.keyed_stages import keyed_stages
    from core.offload_chains import offload_chains
    from core.render import render_chains, render_logical, render_rewritten
    from core.rewrite import rewrite
    from merge.sliding_top_k import fused_top_ks

    job = load(job_ref)
    logical = job.plan()
    rewritten = rewrite(logical)
    chains = offload_chains(logical)
    if as_json:
        doc = {
            "query": job.name,
            "logical": logical.to_json(),
            "rewritten": rewritten.to_json(),
            "rewrite_ms": round(rewritten.rewrite_ms, 3),
            "offload_chains": [
                {
                    "entity": c.entity,
                    "nodes": list(c.node_ids),
                    "kind": c.kind,
                    "fused": list(c.fused),
                    "keyed_op": c.keyed_op,
                }
                for c in chains
            ],
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    out.print(render_logical(logical))
    out.print(render_rewritten(rewritten))
    out.print(render_chains(logical, chains, keyed_stages(logical), list(fused_top_ks(logical))))


def reference(
    query: QueryArg,
    output: OutputOpt,
    events: EventsOpt = 100_000,
    seed: SeedOpt = 0,
    rate: RateOpt = None,
    window_size: WindowOpt = 10,
    window_slide: SlideOpt = 2,
) -> None:
    """Compute QUERY's results in batch with DuckDB SQL, independently of the Spark lowering."""
    from core.nexmark.reference import write_reference

    check_query(query)
    summary = write_reference(query, generator(events, seed, rate), params(window_size, window_slide), output)
    out.print(json.dumps(summary, indent=2))


def events(output: OutputOpt, events: EventsOpt = 100_000, seed: SeedOpt = 0, rate: RateOpt = None) -> None:
    """Write the generated events as Parquet, one directory per entity, with event and arrival times."""
    from core.nexmark.export import write_events

    counts = write_events(generator(events, seed, rate), output)
    out.print(json.dumps({"output": str(output), "rows": counts}, indent=2))


def register(app: typer.Typer) -> None:
    """Add `sponge queries`, `compile`, `reference` and `events` to the app."""
    app.command()(queries)
    app.command(name="compile")(compile_)
    app.command()(reference)
    app.command()(events)
