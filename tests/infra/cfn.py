"""template.yaml as CloudFormation would see it: packaged, SAM-translated in-process, conditions applied.

Why an evaluator of conditions here: the stack's options (VPC, cold-start mode, image or zip, reserved
concurrency) are Fn::If branches, so "what does the function look like with these parameters" is only
answerable after resolving them the way CloudFormation does. Only what the template uses is covered:
Fn::If/Equals/Not/And/Or/Join, Condition, Ref to parameters, and AWS::NoValue. Refs, Subs and GetAtts
elsewhere stay as written, so two templates compare by how they refer to things.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
# What `sam package` puts in place of the local CodeUri: CloudFormation's transform takes only S3 URIs.
PACKAGED_CODE_URI = "s3://sponge-artifacts/worker.zip"
REGION = "us-east-1"

_NO_VALUE = object()


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    return yaml_parse(path.read_text())


def packaged(template: Mapping[str, Any], code_uri: str = PACKAGED_CODE_URI) -> dict[str, Any]:
    """The template after `sam package`: every local CodeUri replaced by the uploaded zip's S3 URI."""
    out = copy.deepcopy(dict(template))
    for resource in out["Resources"].values():
        props = resource.get("Properties", {})
        code = props.get("CodeUri")
        if resource["Type"] == "AWS::Serverless::Function" and isinstance(code, str) and "://" not in code:
            props["CodeUri"] = code_uri
    return out


class NoManagedPolicies:
    """Managed-policy loader for the translator that needs no AWS account (the template names none)."""

    def load(self) -> dict[str, str]:
        return {}


def translate(template: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The SAM translator's output, as CloudFormation's transform would produce it in REGION.

    The Translator is built with an explicit boto3 session (no credentials are looked up; it only
    answers the region) rather than through transform(), which reads the region from the environment.
    """
    from boto3.session import Session
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    translator = Translator(None, Parser(), boto_session=Session(region_name=REGION))
    return translator.translate(
        copy.deepcopy(dict(template)),
        parameter_values=dict(parameters or {}),
        get_managed_policy_map=NoManagedPolicies().load,
    )


def parameter_values(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, Any]:
    """Defaults overlaid with the given values, lists split as CloudFormation splits them."""
    values: dict[str, Any] = {}
    for name, spec in template.get("Parameters", {}).items():
        raw = given.get(name, spec.get("Default"))
        if raw is None:
            continue
        values[name] = str(raw).split(",") if spec["Type"] == "CommaDelimitedList" else str(raw)
    unknown = set(given) - set(values)
    assert not unknown, f"parameters the template does not declare: {sorted(unknown)}"
    return values


def _value(node: Any, params: Mapping[str, Any], conditions: Mapping[str, bool]) -> Any:
    if isinstance(node, dict) and len(node) == 1:
        ((key, arg),) = node.items()
        if key == "Ref":
            return params[arg]
        if key == "Fn::Join":
            sep, items = arg
            items = _value(items, params, conditions)
            return sep.join(str(_value(i, params, conditions)) for i in items)
        if key == "Condition":
            return conditions[arg]
    if isinstance(node, list):
        return [_value(i, params, conditions) for i in node]
    return node


def _condition(node: Any, params: Mapping[str, Any], conditions: Mapping[str, bool]) -> bool:
    ((key, arg),) = node.items()
    if key == "Fn::Equals":
        left, right = (_value(a, params, conditions) for a in arg)
        return str(left) == str(right)  # CloudFormation compares parameter values as strings
    if key == "Fn::Not":
        return not _condition(arg[0], params, conditions)
    if key == "Fn::And":
        return all(_condition(a, params, conditions) for a in arg)
    if key == "Fn::Or":
        return any(_condition(a, params, conditions) for a in arg)
    if key == "Condition":
        return conditions[arg]
    raise AssertionError(f"condition function not covered by this evaluator: {key}")


def _resolve_ifs(node: Any, conditions: Mapping[str, bool]) -> Any:
    if isinstance(node, dict):
        if set(node) == {"Fn::If"}:
            name, then, otherwise = node["Fn::If"]
            return _resolve_ifs(then if conditions[name] else otherwise, conditions)
        if node == {"Ref": "AWS::NoValue"}:
            return _NO_VALUE
        resolved = {k: _resolve_ifs(v, conditions) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}
    if isinstance(node, list):
        return [v for v in (_resolve_ifs(i, conditions) for i in node) if v is not _NO_VALUE]
    return node


def evaluate(template: Mapping[str, Any], given: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The template as deployed with these parameters: conditions decided, Fn::If branches taken,
    resources and outputs whose condition is false dropped."""
    params = parameter_values(template, given or {})
    conditions: dict[str, bool] = {}
    pending = dict(template.get("Conditions", {}))
    while pending:  # conditions may refer to one another; resolve in dependency order
        before = len(pending)
        for name, expr in list(pending.items()):
            try:
                conditions[name] = _condition(expr, params, conditions)
            except KeyError:
                continue
            del pending[name]
        assert len(pending) < before, f"conditions that cannot be decided: {sorted(pending)}"
    out = {k: v for k, v in template.items() if k not in ("Conditions",)}
    for section in ("Resources", "Outputs"):
        kept = {}
        for name, body in template.get(section, {}).items():
            if "Condition" in body and not conditions[body["Condition"]]:
                continue
            kept[name] = _resolve_ifs({k: v for k, v in body.items() if k != "Condition"}, conditions)
        out[section] = kept
    out["Conditions"] = conditions
    return out


def resources_of_type(template: Mapping[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] == type_}


def only(template: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """The one resource of that type (asserting there is exactly one)."""
    found = resources_of_type(template, type_)
    assert len(found) == 1, f"expected one {type_}, found {sorted(found)}"
    return next(iter(found.values()))


def statements(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    stmts = document["Statement"]
    return list(stmts) if isinstance(stmts, list) else [stmts]


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]
