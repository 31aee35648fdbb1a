"""template.yaml: cfn-lint (with its SAM transform) is clean, the SAM translator accepts it, and the
translated stack has the properties and least-privilege permissions the Spark side relies on.

Why the lint checks a broken copy too: a linter that silently parses nothing would pass the clean
template just as well.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.infra.cfn import (
    TEMPLATE,
    as_list,
    evaluate,
    load_template,
    only,
    packaged,
    resources_of_type,
    statements,
    translate,
)

LINT_REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]
FUNCTION_ARN = (
    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-worker"
)
VPC = {"SubnetIds": "subnet-0a1b2c,subnet-3d4e5f", "SecurityGroupId": "sg-0123abcd"}
IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/sponge-worker@sha256:" + "0" * 64


def _lint(text: str) -> list[tuple[str, str]]:
    from cfnlint.api import lint
    from cfnlint.config import ManualArgs

    return [(m.rule.id, m.message) for m in lint(text, config=ManualArgs(regions=LINT_REGIONS))]


def test_cfn_lint_finds_nothing_in_the_template() -> None:
    assert _lint(TEMPLATE.read_text()) == []


def test_cfn_lint_reports_errors_in_a_broken_copy() -> None:
    text = TEMPLATE.read_text()
    broken = text.replace("MemorySize: 1769", "MemorySize: 99999", 1).replace(
        "Resource: !GetAtt WorkerLogGroup.Arn", "Resource: !GetAtt NoSuchLogGroup.Arn"
    )
    assert broken != text
    rules = {rule for rule, _ in _lint(broken)}
    assert {"E3034", "E1010"} <= rules  # value out of range, GetAtt of a missing resource


def test_cfn_lint_applies_the_serverless_rules() -> None:
    """SnapStart without a published alias is a SAM-level mistake that only the SAM rules see."""
    text = TEMPLATE.read_text()
    broken = text.replace("      AutoPublishAlias: live\n      SnapStart:", "      SnapStart:", 1)
    assert broken != text
    assert "W2530" in {rule for rule, _ in _lint(broken)}


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    return load_template()


def _deployed(sam: dict[str, Any], **given: str) -> dict[str, Any]:
    """What CloudFormation would create with these parameters: translated, then conditions applied."""
    return evaluate(translate(packaged(sam), given), given)


def test_translates_to_plain_cloudformation(sam: dict[str, Any]) -> None:
    translated = translate(packaged(sam))
    types = {body["Type"] for body in translated["Resources"].values()}
    assert not {t for t in types if t.startswith("AWS::Serverless::")}
    assert "Transform" not in translated


def test_every_parameter_is_described_and_defaulted(sam: dict[str, Any]) -> None:
    for name, spec in sam["Parameters"].items():
        assert spec.get("Description"), name
        assert "Default" in spec, name


def test_the_worker_function(sam: dict[str, Any]) -> None:
    stack = _deployed(sam)
    function = only(stack, "AWS::Lambda::Function")
    props = function["Properties"]
    assert props["Runtime"] == "python3.13"
    assert props["Handler"] == "lambda_worker.handler.handler"
    assert props["Architectures"] == [{"Ref": "Architecture"}]
    assert sam["Parameters"]["Architecture"]["Default"] == "arm64"
    assert props["MemorySize"] == 1769  # one vCPU, as in the paper
    assert props["Timeout"] == {"Ref": "WorkerTimeout"}
    assert props["ReservedConcurrentExecutions"] == {"Ref": "ReservedConcurrency"}
    assert props["Code"] == {"S3Bucket": "sponge-artifacts", "S3Key": "worker.zip"}
    assert props["FunctionName"] == {"Fn::Sub": "${AWS::StackName}-worker"}
    assert props["Role"] == {"Fn::GetAtt": ["WorkerRole", "Arn"]}
    assert "VpcConfig" not in props and "SnapStart" not in props  # both off by default
    assert function["DependsOn"] == "WorkerLogGroup"
    alias = only(stack, "AWS::Lambda::Alias")["Properties"]
    assert alias["Name"] == "live" and "ProvisionedConcurrencyConfig" not in alias


@pytest.mark.parametrize("given", [{}, {"WorkerImageUri": IMAGE_URI}], ids=["zip", "image"])
def test_a_failed_asynchronous_invocation_is_not_retried(sam: dict[str, Any], given: dict[str, str]) -> None:
    """The agent re-dispatches a failed worker's chunks and refuses a retried worker: no retries."""
    stack = _deployed(sam, **given)
    (alias_id,) = resources_of_type(stack, "AWS::Lambda::Alias")
    (function_id,) = resources_of_type(stack, "AWS::Lambda::Function")
    invoke_config = only(stack, "AWS::Lambda::EventInvokeConfig")
    props = invoke_config["Properties"]
    assert props["MaximumRetryAttempts"] == 0
    assert props["Qualifier"] == "live"  # the alias the agent invokes
    assert props["FunctionName"] == {"Ref": function_id}
    assert as_list(invoke_config["DependsOn"]) == [alias_id]


def test_the_handler_named_by_the_template_exists() -> None:
    handler = load_template()["Resources"]["WorkerFunction"]["Properties"]["Handler"]
    module, _, name = handler.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


def test_reserved_concurrency_zero_reserves_none(sam: dict[str, Any]) -> None:
    props = only(_deployed(sam, ReservedConcurrency="0"), "AWS::Lambda::Function")["Properties"]
    assert "ReservedConcurrentExecutions" not in props


def test_vpc_is_attached_only_when_subnets_and_security_group_are_given(sam: dict[str, Any]) -> None:
    stack = _deployed(sam, **VPC)
    props = only(stack, "AWS::Lambda::Function")["Properties"]
    assert props["VpcConfig"] == {
        "SubnetIds": {"Ref": "SubnetIds"},
        "SecurityGroupIds": [{"Ref": "SecurityGroupId"}],
    }
    role = only(stack, "AWS::IAM::Role")["Properties"]
    assert role["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaENIManagementAccess"}
    ]
    half = _deployed(sam, SubnetIds=VPC["SubnetIds"])  # no security group: no VPC
    assert "VpcConfig" not in only(half, "AWS::Lambda::Function")["Properties"]
    assert "ManagedPolicyArns" not in only(half, "AWS::IAM::Role")["Properties"]


def test_cold_start_modes_exclude_each_other(sam: dict[str, Any]) -> None:
    snap = _deployed(sam, ColdStartMode="snapstart")
    assert only(snap, "AWS::Lambda::Function")["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert "ProvisionedConcurrencyConfig" not in only(snap, "AWS::Lambda::Alias")["Properties"]
    assert snap["Outputs"]["ProvisionedEnvironments"]["Value"] == "0"  # what the drill bills as standing

    warm = _deployed(sam, ColdStartMode="provisioned", ProvisionedConcurrency="4")
    assert "SnapStart" not in only(warm, "AWS::Lambda::Function")["Properties"]
    assert only(warm, "AWS::Lambda::Alias")["Properties"]["ProvisionedConcurrencyConfig"] == {
        "ProvisionedConcurrentExecutions": {"Ref": "ProvisionedConcurrency"}
    }
    assert only(warm, "AWS::Lambda::Version")["Properties"]["FunctionName"] == {"Ref": "WorkerFunction"}
    assert warm["Outputs"]["ProvisionedEnvironments"]["Value"] == {"Ref": "ProvisionedConcurrency"}


def test_an_image_uri_replaces_the_zip_function(sam: dict[str, Any]) -> None:
    stack = _deployed(sam, WorkerImageUri=IMAGE_URI, ColdStartMode="snapstart")
    functions = resources_of_type(stack, "AWS::Lambda::Function")
    assert list(functions) == ["WorkerImageFunction"]
    props = functions["WorkerImageFunction"]["Properties"]
    assert props["PackageType"] == "Image" and props["Code"] == {"ImageUri": IMAGE_URI}
    assert props["ImageConfig"] == {"Command": ["lambda_worker.handler.handler"]}
    assert props["MemorySize"] == 1769 and "SnapStart" not in props  # SnapStart takes no images
    assert len(resources_of_type(stack, "AWS::Lambda::Alias")) == 1


def test_the_log_group(sam: dict[str, Any]) -> None:
    stack = _deployed(sam, LogRetentionDays="30")
    group = only(stack, "AWS::Logs::LogGroup")["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${AWS::StackName}-worker"}
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert sam["Parameters"]["LogRetentionDays"]["Default"] == 14


def test_the_staging_bucket_is_encrypted_private_and_tls_only(sam: dict[str, Any]) -> None:
    stack = _deployed(sam)
    bucket = only(stack, "AWS::S3::Bucket")["Properties"]
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4

    policy = only(stack, "AWS::S3::BucketPolicy")["Properties"]
    assert policy["Bucket"] == {"Ref": "StagingBucket"}
    (deny,) = [s for s in statements(policy["PolicyDocument"]) if s["Effect"] == "Deny"]
    assert deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [
        {"Fn::GetAtt": ["StagingBucket", "Arn"]},
        {"Fn::Sub": "${StagingBucket.Arn}/*"},
    ]


def _allowed(document: dict[str, Any]) -> dict[str, set[str]]:
    """Action -> the resources it is allowed on (as written), asserting nothing is allowed on '*'."""
    allowed: dict[str, set[str]] = {}
    for stmt in statements(document):
        assert stmt["Effect"] == "Allow" and "NotAction" not in stmt and "NotResource" not in stmt
        for action in as_list(stmt["Action"]):
            assert "*" not in action, action
            for resource in as_list(stmt["Resource"]):
                assert resource != "*"
                allowed.setdefault(action, set()).add(repr(resource))
    return allowed


def test_the_spark_cluster_policy_allows_only_invoking_this_functions_alias(sam: dict[str, Any]) -> None:
    stack = _deployed(sam)
    policy = only(stack, "AWS::IAM::ManagedPolicy")["Properties"]
    # The agent invokes the alias (its --qualifier), never the unqualified function or another version.
    assert _allowed(policy["PolicyDocument"]) == {
        "lambda:InvokeFunction": {repr({"Fn::Sub": FUNCTION_ARN + ":live"})}
    }
    assert "Roles" not in policy  # attached by the user unless SparkClusterRoleName is given
    attached = only(_deployed(sam, SparkClusterRoleName="EMR_EC2_DefaultRole"), "AWS::IAM::ManagedPolicy")
    assert attached["Properties"]["Roles"] == [{"Ref": "SparkClusterRoleName"}]


def test_the_worker_role_writes_only_its_logs(sam: dict[str, Any]) -> None:
    role = only(_deployed(sam), "AWS::IAM::Role")["Properties"]
    (trust,) = statements(role["AssumeRolePolicyDocument"])
    assert trust["Principal"] == {"Service": "lambda.amazonaws.com"}
    (inline,) = role["Policies"]
    logs = {repr({"Fn::GetAtt": ["WorkerLogGroup", "Arn"]})}
    assert _allowed(inline["PolicyDocument"]) == {"logs:CreateLogStream": logs, "logs:PutLogEvents": logs}


def test_outputs_name_what_the_spark_side_needs(sam: dict[str, Any]) -> None:
    outputs = _deployed(sam)["Outputs"]
    assert {
        "FunctionName",
        "FunctionArn",
        "FunctionAlias",
        "StagingBucket",
        "SparkClusterPolicyArn",
        "Region",
        "LogGroupName",
    } <= set(outputs)
    assert outputs["FunctionName"]["Value"] == {"Fn::Sub": "${AWS::StackName}-worker"}
    assert outputs["FunctionArn"]["Value"] == {"Fn::Sub": FUNCTION_ARN}
    assert outputs["FunctionAlias"]["Value"] == "live"
    assert outputs["StagingBucket"]["Value"] == {"Ref": "StagingBucket"}
    assert outputs["SparkClusterPolicyArn"]["Value"] == {"Ref": "SparkClusterPolicy"}
    assert outputs["Region"]["Value"] == {"Ref": "AWS::Region"}
    assert outputs["LogGroupName"]["Value"] == {"Ref": "WorkerLogGroup"}
    assert all(out.get("Description") for out in outputs.values())
