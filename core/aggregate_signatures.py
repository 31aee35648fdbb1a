"""The aggregates a query may call, as the query builder sees them: a name, an argument, a result type.

Why here and not with the fold rules: the kernel type-checks a query before anything runs, and it
must not depend on how a partial state is built or merged (merge/algebra.py, which refers to these
signatures). A signature says only what the query author can observe.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import PlanError
from core.expr import DType


@dataclass(frozen=True)
class AggregateSignature:
    name: str
    needs_arg: bool
    result: DType | None  # None: the result has the argument's type

    @property
    def keeps_records(self) -> bool:
        """True for the aggregates whose result is a list of the records they kept."""
        return self.result == DType.RECORDS

    def result_type(self, arg: DType | None) -> DType:
        if self.result is not None:
            return self.result
        if arg is None:
            raise PlanError(f"aggregate {self.name} needs an argument")
        return arg


SIGNATURES: dict[str, AggregateSignature] = {
    s.name: s
    for s in (
        AggregateSignature("count", needs_arg=False, result=DType.INT64),
        AggregateSignature("sum", needs_arg=True, result=None),
        AggregateSignature("min", needs_arg=True, result=None),
        AggregateSignature("max", needs_arg=True, result=None),
        AggregateSignature("avg", needs_arg=True, result=DType.FLOAT64),
        # The records at the argument's maximum, ties kept (Q7).
        AggregateSignature("max_with_ties", needs_arg=True, result=DType.RECORDS),
        # The n greatest records by an ordering (Q6).
        AggregateSignature("latest_n", needs_arg=False, result=DType.RECORDS),
    )
}


def signature(name: str) -> AggregateSignature:
    try:
        return SIGNATURES[name]
    except KeyError:
        raise PlanError(
            f"unknown aggregate {name!r}", hint=f"use one of: {', '.join(sorted(SIGNATURES))}"
        ) from None
