"""A worker's keyed step: compiled from the plan alone, it decides what the VM's step decides."""

from __future__ import annotations

import pytest

from core.errors import PlanError
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from lambda_worker.keyed import KeyedProgram
from lambda_worker.program import ProgramSpec
from merge.winner import WinnerState, seal_answer, seal_request, step
from tests.merge.test_winner import SPEC, _frame, _rows


def test_q4s_winner_step_is_compiled_from_the_plans_schemas() -> None:
    program = ProgramSpec("q4", ("winner_at_close6",)).compile()
    assert isinstance(program, KeyedProgram)
    s = program.spec
    assert (s.left, s.right) == (
        ("a_id", "seller", "category", "reserve", "a_date_time", "expires"),
        ("b_auction", "price", "b_date_time"),
    )
    assert set(s.timestamps) == {"a_date_time", "expires", "b_date_time"} and s.n_keys == 1


def test_a_seal_run_by_the_program_is_the_step_and_counts_the_batchs_rows() -> None:
    program = KeyedProgram("t", "winner_at_close6", SPEC)
    new = _frame([r for _, r in _rows([(1, 0, 10, 5), (2, 1, 3, 0)], [(1, 2, 7), (2, 2, 1), (1, 4, 9)])])
    counts: dict[str, int] = {}
    answer = seal_answer(program.run_table(seal_request(WinnerState(), new, 0), counts))
    here = step(SPEC, WinnerState(), new, 0)
    assert answer.state.open is not None and here.state.open is not None
    assert answer.state.open.equals(here.state.open) and counts == {"winner_at_close6": 5}
    later = seal_answer(program.run_table(seal_request(answer.state, new.clear(), 4_000)))
    assert later.won is not None and later.won.select("a_id", "price").rows() == [(2, 1)]


def test_only_a_winner_at_close_has_a_keyed_step() -> None:
    with pytest.raises(PlanError, match="no keyed step"):
        KeyedProgram.from_plan(get_query("q3").plan(QueryParams()), "window_join8")
