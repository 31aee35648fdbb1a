"""Which transient program a worker runs: a small JSON spec, its stable id, and a warm cache.

Why a spec and not pickled code: the VM agent, the Spark tasks and Lambda workers are different
processes (and, on AWS, different machines and possibly code versions), so a program is named by data
every side can check: the NEXMark query, its window parameters and the chain of node ids; or, for a
job not built into the product, the job's logical plan itself (core/plan_codec.py), which the worker
decodes into the plan's own types and checks. The id is a hash of the canonical JSON, so equal specs
get equal ids everywhere and a chunk can name its program in a few bytes. Workers compile a spec once
and keep it for warm invocations (paper section 4.4).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import ConfigError
from lambda_worker.transient import TransientProgram, base_node_id

if TYPE_CHECKING:
    from core.plan import LogicalPlan
    from lambda_worker.keyed import KeyedProgram
    from lambda_worker.rank import RankProgram

    Program = TransientProgram | KeyedProgram | RankProgram

_FIELDS = {"query", "params", "node_ids", "plan"}
_PARAMS = {"window_size_s", "window_slide_s"}
MAX_SPEC_CHARS = 1 << 20  # a job's plan is a few KB: a longer spec is refused, not parsed


@dataclass(frozen=True)
class ProgramSpec:
    """The chain of nodes to run as transient operators, of a NEXMark query with its window parameters,
    or of the job whose plan `plan` carries (canonical JSON; `query` is then the job's name)."""

    query: str
    node_ids: tuple[str, ...]
    window_size_s: int = 10
    window_slide_s: int = 2
    plan: str = ""

    @classmethod
    def of_plan(cls, plan: LogicalPlan, node_ids: Sequence[str]) -> ProgramSpec:
        """The spec of `node_ids` of a job's own plan, which travels with it."""
        from core.plan_codec import plan_to_json

        return cls(plan.name, tuple(node_ids), plan=_canonical(plan_to_json(plan)))

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query:
            raise ConfigError(f"program query must be a query name, got {self.query!r}")
        if isinstance(self.node_ids, str) or not self.node_ids:
            raise ConfigError("program node_ids must be a non-empty list of node ids")
        object.__setattr__(self, "node_ids", tuple(base_node_id(str(n)) for n in self.node_ids))
        for name in ("window_size_s", "window_slide_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"program {name} must be an integer, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        data = {
            "query": self.query,
            "params": {"window_size_s": self.window_size_s, "window_slide_s": self.window_slide_s},
            "node_ids": list(self.node_ids),
        }
        return data | ({"plan": json.loads(self.plan)} if self.plan else {})

    def dumps(self) -> str:
        return _canonical(self.to_json())

    @property
    def program_id(self) -> str:
        return "p" + hashlib.sha256(self.dumps().encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProgramSpec:
        if not isinstance(data, Mapping):
            raise ConfigError(f"a program spec is a JSON object, got {type(data).__name__}")
        unknown = set(data) - _FIELDS
        if unknown:
            raise ConfigError(f"unknown program fields {sorted(unknown)}", hint=f"known: {sorted(_FIELDS)}")
        if "query" not in data or "node_ids" not in data:
            raise ConfigError("a program spec needs 'query' and 'node_ids'")
        params = data.get("params") or {}
        if not isinstance(params, Mapping) or set(params) - _PARAMS:
            raise ConfigError(
                f"unknown program params {sorted(set(params) - _PARAMS)}", hint=f"known: {sorted(_PARAMS)}"
            )
        node_ids = data["node_ids"]
        if not isinstance(node_ids, list):
            raise ConfigError(f"program node_ids must be a JSON list, got {node_ids!r}")
        plan = data.get("plan")
        if plan is not None:
            _check_plan(plan)
        return cls(data["query"], tuple(node_ids), **params, plan=_canonical(plan) if plan else "")

    @classmethod
    def loads(cls, text: str) -> ProgramSpec:
        if len(text) > MAX_SPEC_CHARS:
            raise ConfigError(f"a program spec of {len(text):,} characters is over {MAX_SPEC_CHARS:,}")
        try:
            return cls.from_json(json.loads(text))
        except json.JSONDecodeError as e:
            raise ConfigError(f"program spec is not valid JSON: {e}") from None

    def compile(self) -> Program:
        """A chain of transient operators; or, when the spec names one node alone, a keyed
        operator's step or a fused top-k's ranking."""
        from core.keyed_stages import stepped
        from core.nexmark.params import QueryParams
        from core.nexmark.queries import get_query
        from core.plan_codec import plan_from_json
        from lambda_worker.keyed import KeyedProgram
        from lambda_worker.rank import RankProgram
        from merge.sliding_top_k import fused_top_ks

        plan = (
            plan_from_json(json.loads(self.plan))
            if self.plan
            else get_query(self.query).plan(QueryParams(self.window_size_s, self.window_slide_s))
        )
        (first, *rest) = self.node_ids
        if not rest and first in {n.id for n in plan.nodes}:
            if stepped(plan.node(first).op):
                return KeyedProgram.from_plan(plan, first)
            if first in fused_top_ks(plan):
                return RankProgram.from_plan(plan, first)
        return TransientProgram.from_plan(plan, self.node_ids)


def _check_plan(plan: object) -> None:
    """A job's plan, refused here as a bad request (not later, as a failed compile) when malformed."""
    from core.errors import PlanError
    from core.plan_codec import plan_from_json

    try:
        plan_from_json(plan)
    except PlanError as e:
        raise ConfigError(f"the program's plan is malformed: {e.message}", hint=e.hint) from None


def _canonical(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


class ProgramCache:
    """Compiled programs by id; kept for the life of the process so warm invocations skip compiling."""

    def __init__(self) -> None:
        self._programs: dict[str, Program] = {}

    def __contains__(self, program_id: str) -> bool:
        return program_id in self._programs

    def __len__(self) -> int:
        return len(self._programs)

    def get(self, spec: ProgramSpec) -> Program:
        pid = spec.program_id
        if pid not in self._programs:
            self._programs[pid] = spec.compile()
        return self._programs[pid]

    def get_json(self, program_id: str, spec_json: str) -> Program:
        """The program `program_id`, compiling `spec_json` if needed and checking that it is that program."""
        if program_id in self._programs:
            return self._programs[program_id]
        if not spec_json:
            raise ConfigError(
                f"unknown program {program_id!r} and no spec came with it",
                hint="the sender must send the program spec with a program's first chunk",
            )
        spec = ProgramSpec.loads(spec_json)
        if spec.program_id != program_id:
            raise ConfigError(
                f"program spec hashes to {spec.program_id}, not {program_id}",
                hint="the sender and this worker disagree on the spec format: check their versions",
            )
        return self.get(spec)


def preload() -> None:
    """Load now what a program's first chunk would otherwise load while its records wait: the keyed
    and ranking programs' modules, and what polars loads on its first Arrow conversion (it imports
    pandas then: about 0.35 s here). Called while a worker warms and when the agent starts."""
    import polars as pl
    import pyarrow as pa

    import lambda_worker.keyed
    import lambda_worker.rank  # noqa: F401

    pl.from_arrow(pa.table({"x": pa.array([], pa.int64())}))
