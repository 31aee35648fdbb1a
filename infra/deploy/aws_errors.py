"""What an AWS error means for the deploy: read from the error's code, the one field AWS keeps stable.

Why one place: deploying, destroying and reporting all ask the same few questions of a failed call
(is the thing missing? does it belong to someone else? was there nothing to do?), and answering them by
searching the error's text breaks when the wording changes and mistakes one case for another (a bucket
of another account answered like a missing one). Only CloudFormation forces a look at the text: it
reports a missing stack and an update with no changes with the same ValidationError code.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError


class Failure(StrEnum):
    """What a failed call says about the thing it asked for."""

    MISSING = "missing"  # there is no such bucket, stack, log group, function ...
    NOT_YOURS = "not_yours"  # it exists, but these credentials may not use it (another account's bucket)
    NO_CHANGES = "no_changes"  # CloudFormation: the update would change nothing
    OTHER = "other"


# S3's HEAD requests have no body, so their code is the bare HTTP status.
_MISSING = frozenset({"404", "NotFound", "NoSuchBucket", "NoSuchKey", "ResourceNotFoundException"})
_NOT_YOURS = frozenset(
    {"403", "Forbidden", "AccessDenied", "AccessDeniedException", "AllAccessDisabled", "BucketAlreadyExists"}
)


def error_code(error: ClientError) -> str:
    """The error's code ("404", "AccessDenied", "ValidationError" ...), or "" when the response has none."""
    return str(error.response.get("Error", {}).get("Code", ""))


def error_text(error: ClientError | Mapping[str, Any]) -> str:
    """`Code: Message`, how the deploy quotes an AWS error to the user; `error` may also be the raw
    response of a failed call (a waiter's last response)."""
    response = error.response if isinstance(error, ClientError) else error
    err = response.get("Error", {})
    return f"{err.get('Code', 'ClientError')}: {err.get('Message') or 'no message'}"


def classify(error: ClientError) -> Failure:
    """What the failed call means, decided by its error code."""
    code = error_code(error)
    if code in _MISSING:
        return Failure.MISSING
    if code in _NOT_YOURS:
        return Failure.NOT_YOURS
    if code == "ValidationError":
        return _cloudformation_validation(str(error.response.get("Error", {}).get("Message", "")))
    return Failure.OTHER


def _cloudformation_validation(message: str) -> Failure:
    # CloudFormation gives both the code ValidationError: only the message tells them apart.
    if "does not exist" in message:
        return Failure.MISSING
    if "No updates are to be performed" in message:
        return Failure.NO_CHANGES
    return Failure.OTHER
