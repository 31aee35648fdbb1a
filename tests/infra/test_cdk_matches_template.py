"""The CDK app (infra/) synthesises the stack template.yaml describes: same parameters and conditions,
and, for each set of options, the same resources with the same properties, permissions and outputs.

Compared after the SAM transform and after deciding the conditions (tests/infra/cfn.py), because that
is what CloudFormation deploys. What is allowed to differ, and why:
* the function's Code: SAM's comes from `sam package`, CDK's from its asset in the bootstrap bucket;
* SAM's `lambda:createdBy` tag on the function;
* the Lambda version's logical ID (both hash the code, differently) and its description (the CDK
  image variant names the image there so a new image publishes a new version, as SAM's hash does);
* CDK's BootstrapVersion parameter and CheckBootstrapVersion rule (its asset publishing needs them).
Version reporting is off in the app, so there is no CDKMetadata resource to leave out.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from typing import Any

import pytest

from tests.infra.cfn import as_list, evaluate, load_template, only, packaged, translate

pytestmark = pytest.mark.slow  # synthesis starts a node process for jsii (~10 s)

IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/sponge-worker@sha256:" + "0" * 64
OPTIONS: dict[str, dict[str, str]] = {
    "defaults": {},
    "vpc-provisioned": {
        "SubnetIds": "subnet-0a1b2c,subnet-3d4e5f",
        "SecurityGroupId": "sg-0123abcd",
        "ColdStartMode": "provisioned",
        "ReservedConcurrency": "0",
        "SparkClusterRoleName": "EMR_EC2_DefaultRole",
    },
    "snapstart-x86": {"ColdStartMode": "snapstart", "Architecture": "x86_64"},
    "image": {"WorkerImageUri": IMAGE_URI, "ColdStartMode": "provisioned"},
}
CDK_ONLY_PARAMETERS = {"BootstrapVersion"}


@pytest.fixture(scope="module")
def cdk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("the CDK needs node (20 or newer) on PATH")
        pytest.skip("the CDK needs node (20 or newer) on PATH")
    # jsii warns at length that node 20 is past its end of life; it works, and the warning is not ours.
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from infra.app import build_app

    code = tmp_path_factory.mktemp("worker-package")
    (code / "README").write_text("stands for build/lambda; only its hash reaches the template\n")
    app = build_app(outdir=str(tmp_path_factory.mktemp("cdk.out")), code_dir=code, stack_name="sponge-test")
    (stack,) = app.synth().stacks
    return stack.template


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    return translate(packaged(load_template()))


def test_same_parameters(cdk: dict[str, Any], sam: dict[str, Any]) -> None:
    ours = {k: v for k, v in cdk["Parameters"].items() if k not in CDK_ONLY_PARAMETERS}
    assert set(ours) == set(sam["Parameters"])
    for name, spec in sam["Parameters"].items():
        for key in ("Type", "Default", "AllowedValues", "MinValue", "MaxValue"):
            assert _text(ours[name].get(key)) == _text(spec.get(key)), (name, key)


def test_same_conditions(cdk: dict[str, Any], sam: dict[str, Any]) -> None:
    assert cdk["Conditions"] == sam["Conditions"]


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_same_resources_properties_and_permissions(
    cdk: dict[str, Any], sam: dict[str, Any], option: str
) -> None:
    given = OPTIONS[option]
    theirs = evaluate(translate(packaged(load_template()), given), given)  # SAM resolves ImageUri's Ref
    ours = evaluate(cdk, given)
    assert _types(ours) == _types(theirs)

    versioned = {"AWS::Lambda::Function", "AWS::Lambda::Version", "AWS::Lambda::Alias"}
    plain = {n for n, body in theirs["Resources"].items() if body["Type"] not in versioned}
    assert {n for n, body in ours["Resources"].items() if body["Type"] not in versioned} == plain
    for name in sorted(plain):  # log group, role, bucket, bucket policy, the cluster's policy
        assert _body(ours["Resources"][name]) == _body(theirs["Resources"][name]), name

    sam_fn, cdk_fn = (only(t, "AWS::Lambda::Function") for t in (theirs, ours))
    assert _function(cdk_fn) == _function(sam_fn)
    assert as_list(cdk_fn["DependsOn"]) == as_list(sam_fn["DependsOn"])
    image = given.get("WorkerImageUri")
    if image:
        assert sam_fn["Properties"]["Code"] == {"ImageUri": image}
        assert cdk_fn["Properties"]["Code"] == {"ImageUri": {"Ref": "WorkerImageUri"}}
    else:
        assert set(cdk_fn["Properties"]["Code"]) == set(sam_fn["Properties"]["Code"]) == {"S3Bucket", "S3Key"}

    for template in (theirs, ours):  # the alias points at the stack's one version of the function
        (version_id,) = [n for n, b in template["Resources"].items() if b["Type"] == "AWS::Lambda::Version"]
        alias = only(template, "AWS::Lambda::Alias")["Properties"]
        assert alias["FunctionVersion"] == {"Fn::GetAtt": [version_id, "Version"]}
        assert template["Resources"][version_id]["DeletionPolicy"] == "Retain"
    sam_alias, cdk_alias = (only(t, "AWS::Lambda::Alias")["Properties"] for t in (theirs, ours))
    assert _without(cdk_alias, "FunctionVersion") == _without(sam_alias, "FunctionVersion")
    sam_version, cdk_version = (only(t, "AWS::Lambda::Version")["Properties"] for t in (theirs, ours))
    assert cdk_version["FunctionName"] == sam_version["FunctionName"]


def test_same_outputs(cdk: dict[str, Any], sam: dict[str, Any]) -> None:
    assert cdk["Outputs"] == sam["Outputs"]


def test_the_cdk_stack_holds_no_extra_machinery(cdk: dict[str, Any]) -> None:
    """No CDKMetadata, no custom resources or helper functions that the template would not have."""
    types = {body["Type"] for body in cdk["Resources"].values()}
    assert not {t for t in types if t.startswith("Custom::") or t == "AWS::CDK::Metadata"}
    assert set(cdk.get("Rules", {})) <= {"CheckBootstrapVersion"}


def _text(value: Any) -> Any:
    """Parameter attributes compare as CloudFormation reads them: as strings."""
    if value is None:
        return None
    return [str(v) for v in value] if isinstance(value, list) else str(value)


def _types(template: dict[str, Any]) -> Counter[str]:
    return Counter(body["Type"] for body in template["Resources"].values())


def _body(resource: dict[str, Any]) -> dict[str, Any]:
    out = dict(resource)
    if "DependsOn" in out:
        out["DependsOn"] = as_list(out["DependsOn"])
    return out


def _function(resource: dict[str, Any]) -> dict[str, Any]:
    return {"Type": resource["Type"], "Properties": _without(resource["Properties"], "Code", "Tags")}


def _without(props: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k not in keys}
