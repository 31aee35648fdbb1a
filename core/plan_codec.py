"""A logical plan as JSON data and back: how a job that is not built into the product reaches a worker.

Why data and not code: a Lambda worker is another machine, possibly another version, and it must not
run what a request sends it (ADR 0031: the agent trusts no request). A NEXMark query travels as its
name, since every side holds its builder; a user's job travels as its plan. Decoding builds only
the plan's own frozen types (operators by their kind, windows, aggregate calls, expressions), each
field checked against its declared type, and then the plan's own checks run (core/plan.py
`validate`, and every expression typed against its input's columns), so a malformed plan is
refused with a `PlanError` saying which node and field, before anything compiles it.

The format is versioned (`FORMAT`): a plan names the version it was written in, and a reader refuses
one it does not know rather than guess.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from core.errors import PlanError
from core.expr import (
    ARITHMETIC,
    COMPARISON,
    BinOp,
    BoolOp,
    Cast,
    Col,
    DType,
    Expr,
    IsIn,
    Lit,
    Not,
    epoch_micros,
    lit,
)
from core.plan import (
    OPERATORS,
    Comm,
    Edge,
    Filter,
    LatestAggregate,
    LogicalPlan,
    Map,
    Node,
    Operator,
    WindowAggregate,
    WindowJoin,
    WinnerAtClose,
)

FORMAT = 1
MAX_DEPTH = 64  # an expression nested deeper is refused, not recursed into
_OPERATORS: dict[str, type[Operator]] = {c.KIND: c for c in OPERATORS}  # type: ignore[attr-defined]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# ---- encoding -----------------------------------------------------------------------------------


def plan_to_json(plan: LogicalPlan) -> dict[str, Any]:
    """The plan as JSON-ready data: every node's operator whole, the edges and the checked schemas."""
    return {
        "format": FORMAT,
        "name": plan.name,
        "nodes": [{"id": n.id, "op": {"kind": n.op.kind, **_fields_to_json(n.op)}} for n in plan.nodes],
        "edges": [{"src": e.src, "dst": e.dst, "comm": e.comm.value, "port": e.port} for e in plan.edges],
        "schemas": {nid: {c: t.value for c, t in cols.items()} for nid, cols in plan.schemas.items()},
    }


def _fields_to_json(obj: Any) -> dict[str, Any]:
    return {f.name: _to_json(getattr(obj, f.name)) for f in fields(obj)}


def _to_json(value: Any) -> Any:
    if isinstance(value, Expr):
        return expr_to_json(value)
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value):
        return _fields_to_json(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def expr_to_json(e: Expr) -> dict[str, Any]:
    if isinstance(e, Col):
        return {"col": e.name}
    if isinstance(e, Lit):
        return {"lit": _scalar_to_json(e.value, e.type_), "type": e.type_.value}
    if isinstance(e, BinOp):
        return {"binop": e.op, "left": expr_to_json(e.left), "right": expr_to_json(e.right)}
    if isinstance(e, BoolOp):
        return {"boolop": e.op, "args": [expr_to_json(a) for a in e.args]}
    if isinstance(e, Not):
        return {"not": expr_to_json(e.arg)}
    if isinstance(e, IsIn):
        return {"isin": expr_to_json(e.arg), "values": [_isin_value_to_json(v) for v in e.values]}
    if isinstance(e, Cast):
        return {"cast": expr_to_json(e.arg), "to": e.to.value}
    raise PlanError(f"no JSON form for expression {e!r}")


def _scalar_to_json(value: object, dtype: DType) -> object:
    """JSON has no timestamps and no non-finite floats: a timestamp is its epoch microseconds, a NaN
    or an infinity its name."""
    if dtype is DType.TIMESTAMP:
        return epoch_micros(value)
    if dtype is DType.FLOAT64 and isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _isin_value_to_json(value: object) -> object:
    if value is None:
        return None
    dtype = lit(value).type_
    return {"lit": _scalar_to_json(value, dtype), "type": dtype.value}


# ---- decoding -----------------------------------------------------------------------------------


def plan_from_json(data: object) -> LogicalPlan:
    """The plan `plan_to_json` wrote; a `PlanError` naming what is wrong for anything else."""
    obj = _object(data, "a plan", {"format", "name", "nodes", "edges", "schemas"})
    if obj.get("format") != FORMAT:
        raise PlanError(
            f"plan format {obj.get('format')!r} is not one this build reads ({FORMAT})",
            hint="run the same sponge version on the VM and the workers",
        )
    name = _typed(obj.get("name"), str, "the plan's name")
    nodes = tuple(_node(n, i) for i, n in enumerate(_list(obj.get("nodes"), "the plan's nodes")))
    edges = tuple(_edge(e, i) for i, e in enumerate(_list(obj.get("edges"), "the plan's edges")))
    schemas = {
        _typed(nid, str, "a schema's node id"): {
            _typed(c, str, f"a column name of {nid}"): _enum(DType, t, f"the type of {nid}.{c}")
            for c, t in _object(cols, f"the schema of {nid}").items()
        }
        for nid, cols in _object(obj.get("schemas", {}), "the plan's schemas").items()
    }
    plan = LogicalPlan(name, nodes, edges, schemas=schemas)
    _check_expressions(plan)
    return plan


def _node(data: object, i: int) -> Node:
    obj = _object(data, f"node {i}", {"id", "op"})
    node_id = _typed(obj.get("id"), str, f"node {i}'s id")
    op = _object(obj.get("op"), f"node {node_id}'s operator")
    kind = op.get("kind")
    cls = _OPERATORS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise PlanError(
            f"node {node_id} has unknown operator kind {kind!r}", hint=f"known: {sorted(_OPERATORS)}"
        )
    return Node(node_id, _dataclass(cls, {k: v for k, v in op.items() if k != "kind"}, f"node {node_id}"))


def _edge(data: object, i: int) -> Edge:
    obj = _object(data, f"edge {i}", {"src", "dst", "comm", "port"})
    return Edge(
        _typed(obj.get("src"), str, f"edge {i}'s src"),
        _typed(obj.get("dst"), str, f"edge {i}'s dst"),
        _enum(Comm, obj.get("comm"), f"edge {i}'s comm"),
        _typed(obj.get("port", 0), int, f"edge {i}'s port"),
    )


def _dataclass(cls: type, data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    declared = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(declared)
    if unknown:
        raise PlanError(f"{where}: unknown fields {sorted(unknown)}", hint=f"known: {sorted(declared)}")
    values = {}
    for name, f in declared.items():
        if name in data:
            values[name] = _value(hints[name], data[name], f"{where}.{name}")
        elif f.default is MISSING and f.default_factory is MISSING:
            raise PlanError(f"{where}: missing field {name!r}")
    return cls(**values)


def _value(hint: Any, data: Any, where: str) -> Any:
    """`data` read as a value of the declared type `hint` (the types the plan's dataclasses use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if data is None and type(None) in args:
            return None
        (other,) = [a for a in args if a is not type(None)]
        return _value(other, data, where)
    if origin is tuple:
        items = _list(data, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(items))
        if len(items) != len(args):
            raise PlanError(f"{where}: expected {len(args)} items, got {len(items)}")
        return tuple(_value(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, items, strict=True)))
    if hint is Expr:
        return expr_from_json(data, where)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint, data, where)
    if isinstance(hint, type) and is_dataclass(hint):
        return _dataclass(hint, _object(data, where), where)
    if hint in (str, int, bool):
        return _typed(data, hint, where)
    raise PlanError(f"{where}: no JSON form for a field of type {hint!r}")


def expr_from_json(data: object, where: str = "an expression", depth: int = 0) -> Expr:
    if depth > MAX_DEPTH:
        raise PlanError(f"{where}: expression nested deeper than {MAX_DEPTH}")
    obj = _object(data, where)
    sub = depth + 1
    if "col" in obj:
        _only(obj, {"col"}, where)
        return Col(_typed(obj["col"], str, f"{where}: a column name"))
    if "lit" in obj:
        _only(obj, {"lit", "type"}, where)
        dtype = _enum(DType, obj.get("type"), f"{where}: a literal's type")
        return Lit(_scalar_from_json(obj["lit"], dtype, where), dtype)
    if "binop" in obj:
        _only(obj, {"binop", "left", "right"}, where)
        op = obj["binop"]
        if op not in ARITHMETIC + COMPARISON:
            raise PlanError(
                f"{where}: unknown operator {op!r}", hint=f"known: {' '.join(ARITHMETIC + COMPARISON)}"
            )
        return BinOp(
            op, expr_from_json(obj.get("left"), where, sub), expr_from_json(obj.get("right"), where, sub)
        )
    if "boolop" in obj:
        _only(obj, {"boolop", "args"}, where)
        if obj["boolop"] not in ("and", "or"):
            raise PlanError(f"{where}: unknown boolean operator {obj['boolop']!r}", hint="known: and, or")
        args = tuple(expr_from_json(a, where, sub) for a in _list(obj.get("args"), where))
        return BoolOp(obj["boolop"], args)
    if "not" in obj:
        _only(obj, {"not"}, where)
        return Not(expr_from_json(obj["not"], where, sub))
    if "isin" in obj:
        _only(obj, {"isin", "values"}, where)
        values = tuple(_isin_value(v, where) for v in _list(obj.get("values"), where))
        return IsIn(expr_from_json(obj["isin"], where, sub), values)
    if "cast" in obj:
        _only(obj, {"cast", "to"}, where)
        return Cast(
            expr_from_json(obj["cast"], where, sub), _enum(DType, obj.get("to"), f"{where}: a cast's type")
        )
    raise PlanError(
        f"{where}: not an expression: {sorted(obj)}", hint="col, lit, binop, boolop, not, isin, cast"
    )


def _isin_value(data: object, where: str) -> object:
    if data is None:
        return None
    obj = _object(data, f"{where}: an isin value", {"lit", "type"})
    return _scalar_from_json(
        obj.get("lit"), _enum(DType, obj.get("type"), f"{where}: an isin value's type"), where
    )


def _scalar_from_json(value: object, dtype: DType, where: str) -> object:
    if dtype is DType.TIMESTAMP:
        return _EPOCH + timedelta(microseconds=_typed(value, int, f"{where}: a timestamp literal"))
    if dtype is DType.FLOAT64:
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        return float(_typed(value, (int, float), f"{where}: a float literal"))
    if dtype is DType.INT64:
        return _typed(value, int, f"{where}: an int literal")
    if dtype is DType.STRING:
        return _typed(value, str, f"{where}: a string literal")
    if dtype is DType.BOOL:
        return _typed(value, bool, f"{where}: a bool literal")
    raise PlanError(f"{where}: no literal of type {dtype.value}")


def _check_expressions(plan: LogicalPlan) -> None:
    """Each expression typed against the columns it reads, as the query builder typed it: a row-wise
    one and an aggregate's argument against the node's input, a join's condition against its output."""
    for node in plan.nodes:
        op, ins = node.op, plan.in_edges(node.id)
        read = plan.schemas.get(ins[0].src) if len(ins) == 1 else None
        checks: list[tuple[Expr, Mapping[str, DType] | None]] = []
        if isinstance(op, Map):
            checks += [(e, read) for _, e in op.projections]
        elif isinstance(op, Filter):
            checks.append((op.predicate, read))
        elif isinstance(op, WindowAggregate | LatestAggregate):
            checks += [(a.arg, read) for a in op.aggs if a.arg is not None]
        elif isinstance(op, WindowJoin | WinnerAtClose) and op.condition is not None:
            checks.append((op.condition, plan.schemas.get(node.id)))
        for e, schema in checks:
            if schema is None:
                continue
            try:
                dtype = e.dtype(schema)
            except PlanError as err:
                raise PlanError(f"{op.kind} {node.id}: {err.message}", hint=err.hint) from None
            if isinstance(op, Filter | WindowJoin | WinnerAtClose) and dtype is not DType.BOOL:
                raise PlanError(f"{op.kind} {node.id}: its predicate is a {dtype.value}, not a bool")


# ---- JSON shapes --------------------------------------------------------------------------------


def _object(data: object, where: str, allowed: set[str] | None = None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise PlanError(f"{where} must be a JSON object, got {type(data).__name__}")
    if allowed is not None:
        _only(data, allowed, where)
    return data


def _only(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(obj) - allowed
    if unknown:
        raise PlanError(f"{where}: unknown fields {sorted(unknown)}", hint=f"known: {sorted(allowed)}")


def _list(data: object, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise PlanError(f"{where} must be a JSON list, got {type(data).__name__}")
    return data


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """`value` if it is of `kind` (a bool is not taken for a number: JSON keeps them apart)."""
    is_bool = isinstance(value, bool)
    wants_bool = kind is bool or (isinstance(kind, tuple) and bool in kind)
    if not isinstance(value, kind) or (is_bool and not wants_bool):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise PlanError(f"{where} must be a {name}, got {value!r}")
    return value


def _enum(cls: type[Enum], value: object, where: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise PlanError(
            f"{where}: {value!r} is not a {cls.__name__}",
            hint=f"known: {', '.join(str(m.value) for m in cls)}",
        ) from None
