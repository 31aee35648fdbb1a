"""The deploy's calls to AWS, answered by botocore's Stubber: which bucket answers lead to a create, how
the stack waits end, and what the user is told when they fail.

LocalStack runs the same code for real (tests/infra/test_deploy.py); these cover the answers LocalStack
never gives, such as a bucket that belongs to another account.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import infra.deploy.stack as stack
from core.errors import ConfigError, DeployError
from infra.deploy.stack import (
    DeployConfig,
    artifact_bucket_name,
    deploy,
    ensure_artifact_bucket,
    status_of,
)
from tests.infra.deploy.stubs import operations_called, stubbed

pytestmark = pytest.mark.timeout(60)

ACCOUNT = "123456789012"
BUCKET = f"sponge-artifacts-{ACCOUNT}-us-east-1"
T0 = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
GONE = "Stack with id s does not exist"  # CloudFormation's answer for a missing stack, code ValidationError


# ---- the artifact bucket -------------------------------------------------------------------------


def test_a_bucket_of_another_account_stops_the_deploy_and_is_never_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = {s: stubbed(s) for s in ("cloudformation", "s3", "sts")}
    monkeypatch.setattr(stack, "aws_client", lambda service, *_: clients[service][0])
    sts_stub = clients["sts"][1]
    sts_stub.add_response(
        "get_caller_identity", {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/u", "UserId": "U"}
    )
    s3, s3_stub = clients["s3"]
    s3_stub.add_client_error(
        "head_bucket", service_error_code="403", service_message="Forbidden", http_status_code=403
    )
    s3_calls = operations_called(s3)
    cfn_calls = operations_called(clients["cloudformation"][0])

    with pytest.raises(ConfigError) as e:
        deploy(DeployConfig(target="aws", region="us-east-1", stack_dir=tmp_path))

    assert e.value.message == (
        f"the artifact bucket {BUCKET} exists but is not accessible to these credentials "
        "(it belongs to another account, or a policy denies s3:ListBucket on it)"
    )
    assert "--artifact-bucket" in e.value.hint
    assert s3_calls == ["HeadBucket"], "nothing is created, nothing uploaded"
    assert cfn_calls == [], "no stack is touched"
    s3_stub.assert_no_pending_responses()
    sts_stub.assert_no_pending_responses()


def test_a_missing_bucket_is_created_private_in_the_deploy_region() -> None:
    s3, stub = stubbed("s3", "eu-west-1")
    stub.add_client_error(
        "head_bucket", service_error_code="404", service_message="Not Found", http_status_code=404
    )
    stub.add_response(
        "create_bucket",
        {"Location": "/b"},
        {"Bucket": "my-bucket", "CreateBucketConfiguration": {"LocationConstraint": "eu-west-1"}},
    )
    stub.add_response(
        "put_public_access_block",
        {},
        {
            "Bucket": "my-bucket",
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        },
    )
    said: list[str] = []
    ensure_artifact_bucket(s3, "my-bucket", "eu-west-1", said.append)
    stub.assert_no_pending_responses()
    assert said == ["created the artifact bucket s3://my-bucket"]


def test_an_existing_bucket_is_used_as_it_is() -> None:
    s3, stub = stubbed("s3")
    stub.add_response("head_bucket", {}, {"Bucket": "my-bucket"})
    calls = operations_called(s3)
    ensure_artifact_bucket(s3, "my-bucket", "us-east-1")
    assert calls == ["HeadBucket"]


def test_a_bucket_taken_between_the_check_and_the_create_stops_the_deploy_too() -> None:
    s3, stub = stubbed("s3")
    stub.add_client_error("head_bucket", service_error_code="404", http_status_code=404)
    stub.add_client_error("create_bucket", service_error_code="BucketAlreadyExists", http_status_code=409)
    with pytest.raises(ConfigError, match="exists but is not accessible"):
        ensure_artifact_bucket(s3, "my-bucket", "us-east-1")
    stub.assert_no_pending_responses()


def test_any_other_bucket_answer_is_reported_with_its_code_and_nothing_is_created() -> None:
    s3, stub = stubbed("s3")
    stub.add_client_error(
        "head_bucket", service_error_code="301", service_message="Moved Permanently", http_status_code=301
    )
    calls = operations_called(s3)
    with pytest.raises(DeployError) as e:
        ensure_artifact_bucket(s3, "my-bucket", "us-east-1")
    assert e.value.message == "cannot check the artifact bucket my-bucket: 301: Moved Permanently"
    assert calls == ["HeadBucket"]


def test_the_bucket_name_is_the_accounts_own_unless_one_is_given() -> None:
    sts, stub = stubbed("sts")
    given = DeployConfig(target="aws", artifact_bucket="team-artifacts")
    assert artifact_bucket_name(given, "us-east-1", sts) == "team-artifacts"  # the Stubber saw no call
    stub.add_response("get_caller_identity", {"Account": ACCOUNT})
    assert artifact_bucket_name(DeployConfig(target="aws"), "us-east-1", sts) == BUCKET
    with pytest.raises(ConfigError, match="bad artifact bucket name 'Team_Artifacts'"):
        DeployConfig(target="aws", artifact_bucket="Team_Artifacts")


# ---- the stack and its waits ---------------------------------------------------------------------


def _stack(status: str) -> dict[str, Any]:
    return {"Stacks": [{"StackName": "s", "CreationTime": T0, "StackStatus": status}]}


def _event(n: int, status: str, reason: str = "", resource: str = "Fn") -> dict[str, Any]:
    return {
        "StackId": "arn:s",
        "EventId": f"e{n}",
        "StackName": "s",
        "LogicalResourceId": resource,
        "ResourceType": "AWS::Lambda::Function",
        "Timestamp": T0 + dt.timedelta(seconds=n),
        "ResourceStatus": status,
        "ResourceStatusReason": reason,
    }


@pytest.fixture
def fast_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "WAIT_DELAY_S", 0.01)


def test_a_failed_create_names_its_first_failed_resource_from_all_event_pages(fast_waits: None) -> None:
    cfn, stub = stubbed("cloudformation")
    for status in ("CREATE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS", "ROLLBACK_COMPLETE"):
        stub.add_response("describe_stacks", _stack(status), {"StackName": "s"})
    # Newest first, over two pages: the cause is the oldest failure, on the second page.
    stub.add_response(
        "describe_stack_events",
        {
            "StackEvents": [
                _event(4, "ROLLBACK_COMPLETE", resource="s"),
                _event(3, "CREATE_FAILED", "Resource creation cancelled", resource="Role"),
            ],
            "NextToken": "page2",
        },
        {"StackName": "s"},
    )
    stub.add_response(
        "describe_stack_events",
        {"StackEvents": [_event(2, "CREATE_FAILED", "Runtime python2.7 is not supported")]},
        {"StackName": "s", "NextToken": "page2"},
    )
    with pytest.raises(DeployError) as e:
        stack._wait(cfn, "s", "create", 30.0, since=T0.timestamp())
    assert e.value.message == (
        "stack s: create ended in ROLLBACK_COMPLETE: "
        "Fn (AWS::Lambda::Function): Runtime python2.7 is not supported"
    )
    assert "describe-stack-events --stack-name s" in e.value.hint
    stub.assert_no_pending_responses()


def test_a_wait_that_runs_out_of_time_says_so(fast_waits: None) -> None:
    cfn, stub = stubbed("cloudformation")
    for _ in range(3):  # 0.03 s at 0.01 s a poll
        stub.add_response("describe_stacks", _stack("UPDATE_IN_PROGRESS"), {"StackName": "s"})
    with pytest.raises(DeployError) as e:
        stack._wait(cfn, "s", "update", 0.03)
    assert e.value.message == "stack s: update did not finish within 0.03 s (still UPDATE_IN_PROGRESS)"
    stub.assert_no_pending_responses()


def test_a_delete_ends_when_the_stack_is_gone(fast_waits: None) -> None:
    cfn, stub = stubbed("cloudformation")
    stub.add_response("describe_stacks", _stack("DELETE_IN_PROGRESS"), {"StackName": "s"})
    stub.add_client_error("describe_stacks", service_error_code="ValidationError", service_message=GONE)
    stack._wait(cfn, "s", "delete", 30.0)
    stub.assert_no_pending_responses()


def test_a_missing_stack_has_no_status_and_other_errors_are_not_taken_for_one() -> None:
    cfn, stub = stubbed("cloudformation")
    stub.add_client_error("describe_stacks", service_error_code="ValidationError", service_message=GONE)
    assert status_of(cfn, "s") is None
    stub.add_client_error("describe_stacks", service_error_code="AccessDenied", http_status_code=403)
    with pytest.raises(ClientError, match="AccessDenied"):
        status_of(cfn, "s")
