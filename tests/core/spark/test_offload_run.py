"""Redirect and merge end to end: Spark, the VM agent process and Lambda worker processes.

Every run's output must equal the DuckDB batch reference over the same events, whatever share is
offloaded and however it changes mid-run: nothing lost, nothing duplicated. Injected faults are
test_offload_faults.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.direct_sink import OFFLOADED_DIR
from core.keyed_stages import plan_routed
from core.nexmark.generator import GeneratorConfig
from core.nexmark.queries import QUERIES, get_query
from core.nexmark.reference import reference_for
from core.nexmark.schedule import RateSchedule
from core.offload_chains import offload_chains
from core.results import diff_results, read_results
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, run_query
from merge.sliding_top_k import fused_top_ks
from tests.core.spark.offload_checks import PARAMS, Switches, checked_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Every query with a partial share and with everything offloaded on another seed, except where another
# query's run takes the same path: Q0 and Q1 run Q2's (a stateless chain into the direct sink), Q7
# Q5's at share 1 (window partials merged on the VM). Inactive routers on the queries whose offloaded
# operators consult the plan as they run: Q3's join and Q6's running average (Q5's ranking meets an
# inactive router in test_a_router_switched_off_and_on_loses_and_repeats_nothing). Each case is 10-40 s
# of Spark, and CI must stay under 30 minutes.
CASES = [
    (query, seed, share)
    for query in QUERIES
    if query not in ("q0", "q1")
    for seed, share in [(1, 0.0), (1, 0.3), (2, 1.0)]
    if (share > 0.0 or query in ("q3", "q6")) and not (share == 1.0 and query == "q7")
]


@pytest.mark.parametrize(("query", "seed", "share"), CASES)
def test_offloaded_output_equals_reference(
    spark, tmp_path: Path, query: str, seed: int, share: float
) -> None:
    # The runs that offload everything go over TLS, as a run whose agent is off loopback does; every
    # other query's with mutual TLS (each worker with a certificate of its own).
    transport = ("mtls" if int(query[1:]) % 2 else "tls") if share == 1.0 else None
    # Chunks wait for a worker however long it takes to start on a loaded machine: the workers, not
    # the agent's fallback, must run them.
    offload = OffloadConfig(share=share, workers=2, transport=transport, local_fallback_s=60.0)
    summary = checked_run(tmp_path, query, seed, offload, 12_000, pace=False)
    assert summary["transport"] == (transport or "plaintext")
    routed = summary["records_routed_to_workers"]
    if share == 0.0:
        assert routed == 0 and summary["records_offloaded"] == 0 and summary["chunks_dispatched"] == 0
    else:
        # Workers really processed records; with share 1 every record of the routed entities went.
        assert summary["records_offloaded"] > 0 and routed > 0
        # Every routed record went out in exactly one chunk, whose result came once from a worker or
        # from the agent itself.
        assert summary["records_offloaded"] + summary["records_run_locally_by_agent"] == routed
        # Every worker that dialled in said how it started. One invoked near the end of so short a run
        # may not have dialled in before the session closed, so the count is of those that did.
        connected = summary["workers_connected"]
        assert 1 <= connected <= summary["workers_started"]
        assert summary["cold_starts"] + summary["warm_starts"] == connected
        # A keyed stage's program warms the pool at the start (ADR 0045): its workers then start warm.
        assert summary["cold_starts"] >= 1 or summary["program_warm_ups"] >= 1
        assert summary["worker_cpu_s"] > 0  # the workers' CPU on the chunks they resolved
        # Per node, the workers' records: every node of the chains (and of the pairs or keyed stages
        # they reach) ran some, and each worker's chunk entered its chain at the first node, so those
        # add up to the records offloaded.
        plan = get_query(query).plan(PARAMS)
        chains = offload_chains(plan)
        per_node = summary["operators_offloaded"]
        want = {n for c in chains for n in (*c.node_ids, *c.fused, *([c.keyed_op] if c.keyed_op else []))}
        want |= set(plan_routed(plan))  # fed through the VM: workers step the plan's key groups
        want |= set(fused_top_ks(plan))  # workers rank the closed windows' key groups
        assert summary["chunks_run_locally"] == 0
        assert set(per_node) == want, per_node
        assert all(n > 0 for n in per_node.values()), per_node
        assert sum(per_node.get(c.node_ids[0], 0) for c in chains) == summary["records_offloaded"], per_node
        # The rows of chains that end at the sink went straight into it (core/direct_sink.py).
        direct = any(c.to_sink for c in chains)
        assert direct == (tmp_path / "out" / OFFLOADED_DIR).is_dir()
    if share == 1.0:
        assert summary["records_local"] == 0


# A keyed stage whose groups go to the workers, come back and go again while the VM holds their
# auctions (Q6) or persons (Q3): the lazy fetch takes what the records name (Q6: and progressive
# rounds of 50 more keys a batch), the hand-back returns it, nothing is lost.
SWITCHES = Switches(after_epoch=2, shares=(0.6, 0.05, 0.7))


def _switched_run(
    tmp_path: Path, query: str, epoch_events: int, epochs: int, offload: OffloadConfig, switches: Switches
) -> tuple[dict, Path]:
    """Run `query` unpaced, publishing the shares of `switches` in turn (see Switches); the output must
    equal the reference and every share must have routed committed records. Returns the summary and
    the output directory."""
    from core.spark.offload_session import OFFLOAD_DIR

    gen = GeneratorConfig(seed=3, events=epochs * epoch_events, schedule=RateSchedule.constant(epoch_events))
    out = tmp_path / "out"
    config = RunConfig(
        query=query,
        generator=gen,
        output=out,
        params=PARAMS,
        max_events_per_batch=epoch_events,
        offload=offload,
    )
    publisher = switches.publisher(out / OFFLOAD_DIR)
    summary = run_query(config, progress=publisher)
    diff = diff_results(read_results(out), reference_for(query, gen, PARAMS))
    assert diff is None, f"{query}: {diff}"
    assert publisher.published == len(switches.shares), (
        f"the run ended after {publisher.published} of {len(switches.shares)} switches had routed records: "
        "give it more epochs"
    )
    return summary, out


# Q6's winners are Q4's operator, and its running average follows the plan's key groups. Q3's filters
# keep 2 % of the events: its epochs are larger, so that groups back on the VM meet a record of
# theirs there and take their state back.
@pytest.mark.parametrize(
    ("query", "epoch_events", "fetch"), [("q3", 5_000, "lazy"), ("q6", 2_000, "progressive")]
)
def test_groups_switched_back_and_forth_mid_run_move_their_keys_and_equal_the_reference(
    spark, tmp_path: Path, query: str, epoch_events: int, fetch: str
) -> None:
    # Workers, not the agent's fallback, must run the chunks: only they fetch and return the groups' keys.
    offload = OffloadConfig(share=0.05, workers=2, fetch=fetch, round_keys=50, local_fallback_s=60.0)
    summary, _ = _switched_run(tmp_path, query, epoch_events, 14, offload, SWITCHES)
    plan = get_query(query).plan(PARAMS)
    for op_id in {c.keyed_op for c in offload_chains(plan)} | set(plan_routed(plan)):
        moved = summary["handoffs"][op_id]
        assert moved["keys_fetched"] > 0 and moved["keys_returned"] > 0 and moved["state_bytes_moved"] > 0


# The router off, on, off and on again, by epoch: the workers' stream reads nothing while the plan
# offloads nothing and picks up the offsets routed to it when offloading resumes. Q5's workers return
# partial states (Q2's sink path measured the same; one query keeps CI's time).
ON_OFF = Switches(after_epoch=1, shares=(0.5, 0.0, 0.5))


def test_a_router_switched_off_and_on_loses_and_repeats_nothing(spark, tmp_path: Path) -> None:
    from core.spark.offload_session import OFFLOAD_DIR
    from router.routing_log import RoutingLog

    offload = OffloadConfig(share=0.0, workers=2)
    summary, out = _switched_run(tmp_path, "q5", 2_000, 12, offload, ON_OFF)
    # The offsets really went local, offloaded, local and offloaded again.
    routed = [seg.plan.offloads for seg in RoutingLog(out / OFFLOAD_DIR).segments()]
    assert [k for i, k in enumerate(routed) if i == 0 or k != routed[i - 1]] == [False, True, False, True]
    assert summary["records_routed_to_workers"] > 0
