"""The agent's part in keyed stages, with real worker processes: stashed chunks sealed group by group
decide what the step decides in place; a seal asked again answers the same, also from a new agent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from core.offload_plan import key_groups_of
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.frames import pack, unpack
from merge.keyed_groups import GROUP, read_answer, read_groups_answer, seal_request
from router import stats
from router.agent.server import AgentServer
from router.client import AgentClient, OffloadError
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

Q4 = ProgramSpec("q4", ("winner_at_close6",))
KEYS = {"auction": "id", "bid": "auction"}
EVENTS = 6_000
END_MS = 10**15


def _records(entity: str) -> pa.Table:
    records = generate(GeneratorConfig(seed=5, events=EVENTS), entity, 0, EVENTS)
    table = pa.Table.from_batches([records])
    return table.append_column(GROUP, pa.array(key_groups_of(table[KEYS[entity]])))


def _fleet(tmp_path: Path) -> EmbeddedFleet:
    return EmbeddedFleet(EmbeddedFleetConfig(concurrency_limit=2, log_path=str(tmp_path / "w.log")))


def test_sealed_groups_decide_what_the_step_decides_and_a_repeat_answers_the_same(
    make_agent: Callable[..., AgentServer], secret: bytes, tmp_path: Path
) -> None:
    agent = make_agent(_fleet(tmp_path), agent={"handoff_dir": tmp_path / "handoff"})
    client = AgentClient(agent.address, secret)
    tables = {e: _records(e) for e in KEYS}
    for entity, table in tables.items():
        client.stash(entity, 0, EVENTS, 0, table)
    client.stash("bid", 0, EVENTS, 0, tables["bid"])  # a retried task: harmless
    program = KeyedProgram.from_plan(get_query("q4").plan(QueryParams()), "winner_at_close6")
    groups = sorted(set(tables["bid"][GROUP].to_pylist()))[:6]
    for g in groups:
        parts = [(e, 0, EVENTS, 0) for e in KEYS]
        answer, worker, ran_locally = client.seal(Q4, [(g, 0, True)], parts, None, None, 0)
        out, dues = read_groups_answer(answer)
        due = dues[g]
        # In place: the same records through the worker's own program.
        here = {e: pl.from_arrow(t).filter(pl.col(GROUP) == g) for e, t in tables.items()}
        _, want_out, want_due = read_answer(program.run_table(seal_request({}, here, None, 0)))
        assert due == want_due and (out is None) == (want_out is None)
        assert worker or ran_locally
        # The group's state is kept: closing everything decides the same winners as in place.
        closed, _, _ = client.seal(Q4, [(g, 1, False)], [], None, None, END_MS)
        again, _, _ = client.seal(Q4, [(g, 1, False)], [], None, None, END_MS)  # a replayed batch
        assert closed.equals(again)
        state = unpack(client.hand_back(Q4, g, 2))[0]
        assert all(f is None or f.height == 0 for f in state.values())  # every auction closed
    assert agent.counters.get(stats.operator_offloaded("winner_at_close6")) > 0


def test_a_new_agent_over_the_same_directory_seals_from_the_stored_version(
    make_agent: Callable[..., AgentServer], secret: bytes, tmp_path: Path
) -> None:
    first = make_agent(None, agent={"handoff_dir": tmp_path / "handoff"})  # no fleet: the agent runs it
    client = AgentClient(first.address, secret)
    table = _records("auction")
    client.stash("auction", 0, EVENTS, 0, table)
    g = table[GROUP][0].as_py()
    client.seal(Q4, [(g, 0, True)], [("auction", 0, EVENTS, 0)], None, None, 0)
    first.stop(grace_s=0.1)
    second = make_agent(None, agent={"handoff_dir": tmp_path / "handoff"})
    state = unpack(AgentClient(second.address, secret).hand_back(Q4, g, 1))[0]
    assert (
        state["open"] is not None
        and state["open"].height == table.filter(pa.compute.equal(table[GROUP], g)).num_rows
    )


def test_a_seal_naming_a_chunk_never_stashed_is_refused(
    make_agent: Callable[..., AgentServer], secret: bytes, tmp_path: Path
) -> None:
    agent = make_agent(None, agent={"handoff_dir": tmp_path / "handoff"})
    client = AgentClient(agent.address, secret, retry_budget_s=0)
    with pytest.raises(OffloadError) as info:
        client.seal(Q4, [(3, 0, True)], [("bid", 0, 10, 0)], None, None, 0)
    assert info.value.code == "FAILED_PRECONDITION" and "bid-0-10-0" in str(info.value)


def test_a_lazy_fetch_takes_the_keys_the_records_name_and_the_counters_say_what_moved(
    make_agent: Callable[..., AgentServer], secret: bytes, tmp_path: Path
) -> None:
    """The agent names a group's keys from its stashed records; state moved in with a seal joins the
    stored version, and a hand-back returns both; keys and bytes are counted per operator."""
    agent = make_agent(None, agent={"handoff_dir": tmp_path / "handoff"})
    client = AgentClient(agent.address, secret)
    auctions = _records("auction")
    g = auctions[GROUP][0].as_py()
    mine = auctions.filter(pa.compute.equal(auctions[GROUP], g))
    first, second = mine.slice(0, 2), mine.slice(2)
    client.stash("auction", 0, EVENTS, 0, first)
    client.stash("auction", 0, EVENTS, 1, second)
    touched = client.touched(Q4, [g], [("auction", 0, EVENTS, 0)])
    assert sorted(touched["sponge_k0"].to_pylist()) == sorted(first["id"].to_pylist())
    assert client.touched(Q4, [g], []).num_rows == 0  # an empty group names no key
    client.seal(Q4, [(g, 0, True)], [("auction", 0, EVENTS, 0)], None, None, 0)
    # The second chunk's auctions moved in as state (opened on the VM): they join the stored version.
    program = KeyedProgram.from_plan(get_query("q4").plan(QueryParams()), "winner_at_close6")
    rows = {"auction": pl.from_arrow(second)}
    opened, _, _ = read_answer(program.run_table(seal_request({}, rows, None, 0)))
    moved = pack(opened, {})
    client.seal(Q4, [(g, 1, False)], [], moved, None, 0)
    state = unpack(client.hand_back(Q4, g, 2))[0]
    assert state["open"] is not None and state["open"].height == mine.num_rows
    figures = stats.handoffs(agent.counters.snapshot())["winner_at_close6"]
    assert figures["keys_fetched"] == second.num_rows and figures["keys_returned"] == mine.num_rows
    assert figures["state_bytes_moved"] > 0


def test_warming_a_program_stores_counts_and_offloads_nothing(
    make_agent: Callable[..., AgentServer], secret: bytes, tmp_path: Path
) -> None:
    """The agent's part of a warm-up runs a made-up seal in place: no state version, no chunk, no count
    of records; the first real seal of a group then starts from nothing, as it would have."""
    agent = make_agent(_fleet(tmp_path), agent={"handoff_dir": tmp_path / "handoff"})
    client = AgentClient(agent.address, secret)
    assert client.warm(Q4) == 0  # no warm pool in this agent: only its own part ran
    assert not [p for p in (tmp_path / "handoff").rglob("*") if p.is_file()]
    assert not {k: v for k, v in agent.counters.snapshot().items() if v}
    table = _records("auction")
    client.stash("auction", 0, EVENTS, 0, table)
    g = int(table[GROUP][0].as_py())
    client.seal(Q4, [(g, 0, True)], [("auction", 0, EVENTS, 0)], None, None, 0)
    state = unpack(client.hand_back(Q4, g, 1))[0]
    program = Q4.compile()
    assert isinstance(program, KeyedProgram)
    want = pl.from_arrow(table).filter(pl.col(GROUP) == g).height  # type: ignore[union-attr]
    assert program.key_count(state) == want  # its auctions, none of the warm-up's made-up keys
