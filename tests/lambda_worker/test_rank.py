"""A worker's ranking of Q5's closed windows: compiled from the plan, it returns its keys' candidates."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from core.errors import PlanError
from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from lambda_worker.program import ProgramSpec
from lambda_worker.rank import RankProgram


def test_q5s_ranking_returns_the_top_key_and_its_ties_and_counts_the_pane_rows() -> None:
    program = ProgramSpec("q5", ("top_k5",)).compile()
    assert isinstance(program, RankProgram)
    panes = pa.table({"auction": [1, 2, 3, 1, 2], "num_bids": [2, 1, 3, 1, 2]})
    counts: dict[str, int] = {}
    out = pl.from_arrow(program.run_table(panes, counts))
    assert isinstance(out, pl.DataFrame)
    assert sorted(out.iter_rows()) == [(1, 3), (2, 3), (3, 3)]  # every auction tied at 3 bids
    assert counts == {"top_k5": 5} and program.records_in(panes) == 0


def test_only_a_fused_top_k_has_a_ranking() -> None:
    with pytest.raises(PlanError, match="not a top-k fused"):
        RankProgram.from_plan(get_query("q7").plan(QueryParams()), "window_aggregate2")
