"""What a failed AWS call means, read from its error code (CloudFormation's ValidationError aside)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from infra.deploy.aws_errors import Failure, classify, error_text


def _error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Op")


@pytest.mark.parametrize(
    ("code", "message", "failure"),
    [
        ("404", "Not Found", Failure.MISSING),
        ("NoSuchBucket", "", Failure.MISSING),
        ("ResourceNotFoundException", "", Failure.MISSING),
        ("ValidationError", "Stack with id s does not exist", Failure.MISSING),
        ("403", "Forbidden", Failure.NOT_YOURS),
        ("AccessDenied", "", Failure.NOT_YOURS),
        ("BucketAlreadyExists", "", Failure.NOT_YOURS),
        ("ValidationError", "No updates are to be performed.", Failure.NO_CHANGES),
        ("ValidationError", "Template format error", Failure.OTHER),
        ("301", "Moved Permanently", Failure.OTHER),
        ("Throttling", "does not exist", Failure.OTHER),  # the text counts for CloudFormation's code only
    ],
)
def test_a_failure_is_told_by_its_code(code: str, message: str, failure: Failure) -> None:
    assert classify(_error(code, message)) is failure


def test_an_error_is_quoted_as_code_and_message() -> None:
    assert error_text(_error("AccessDenied", "no")) == "AccessDenied: no"
    assert error_text({"Error": {"Code": "ValidationError"}}) == "ValidationError: no message"
