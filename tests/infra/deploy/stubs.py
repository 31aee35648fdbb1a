"""boto3 clients behind botocore's Stubber, for the unit tests of the code that talks to AWS.

Why the Stubber rather than a hand-written fake: the client is boto3's own, so requests and responses
are checked against the service's model, and a call nobody expected fails the test.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.stub import Stubber


def stubbed(service: str, region: str = "us-east-1") -> tuple[Any, Stubber]:
    """A real client of `service` (no credentials looked up, nothing sent) and its active Stubber."""
    client = boto3.session.Session(
        region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client(service)
    stubber = Stubber(client)
    stubber.activate()
    return client, stubber


def operations_called(client: Any) -> list[str]:
    """The operations the client is asked for from now on, recorded before the Stubber can refuse one."""
    called: list[str] = []

    def record(model: Any, **_: Any) -> None:
        called.append(model.name)

    client.meta.events.register("provide-client-params.*.*", record)
    return called
