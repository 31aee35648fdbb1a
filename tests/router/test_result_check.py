"""What the agent accepts from a worker: the checks, on results the program could and could not make."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from bench.handoff import vm_state
from core.wire.arrow_ipc import encode
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.keyed_groups import groups_of, seal_answer
from router.agent import result_check
from tests.router.conftest import Q5, bids


def test_a_transient_result_must_have_the_programs_schema_and_the_chunks_count() -> None:
    data = bids(1_000)
    good = Q5.compile().run_table(data)
    check = result_check.transient(good.schema, data.num_rows)
    assert check(encode(good), data.num_rows) is None
    assert "records" in check(encode(good), data.num_rows + 1).reason  # type: ignore[union-attr]
    assert "columns" in check(encode(good.drop_columns(["num_bids"])), data.num_rows).reason  # type: ignore[union-attr]
    garbled = check(b"not arrow", data.num_rows)
    assert garbled is not None and garbled.corrupt
    assert (
        result_check.transient(good.schema, None)(encode(good), 0) is None
    )  # no count given: not held to one


def test_a_seals_answer_may_hold_state_only_of_the_key_groups_it_named() -> None:
    program = ProgramSpec("q4", ("winner_at_close6",)).compile()
    assert isinstance(program, KeyedProgram)
    state = vm_state(program, 200)
    frames = {name: f for name, f in state.items() if f is not None and f.height}
    (name, frame) = next(iter(frames.items()))
    groups = groups_of(frame, program.spec.keys)
    one = int(groups[0])
    mine = {name: frame.filter(groups == one)}
    assert result_check.sealed(program, [one])(encode(seal_answer(mine, None, None)), 0) is None
    everything = encode(seal_answer({name: frame}, None, None))
    refused = result_check.sealed(program, [one])(everything, 0)
    assert refused is not None and not refused.corrupt and "did not name" in refused.reason
    assert result_check.sealed(program, [one])(encode(pa.table({"x": [1]})), 0) is not None
    assert isinstance(frame, pl.DataFrame)
