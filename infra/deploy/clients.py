"""boto3 clients for a deploy target: LocalStack's endpoint with its test credentials, or AWS's defaults.

Why one place: deploying, destroying and reporting all talk to the same target, and a client built
without LocalStack's endpoint or credentials would silently reach the real AWS account instead.
"""

from __future__ import annotations

from typing import Any

from core.deployment import LOCALSTACK_CREDENTIALS, Deployment


def aws_client(service: str, target: str, region: str, endpoint_url: str | None) -> Any:
    """A boto3 client for the target: LocalStack's endpoint and test credentials, or AWS's defaults."""
    import boto3

    creds = dict(LOCALSTACK_CREDENTIALS) if target == "localstack" else {}
    return boto3.session.Session(region_name=region, **creds).client(service, endpoint_url=endpoint_url)


def client_for(deployment: Deployment, service: str) -> Any:
    """A boto3 client for the deployment's region and endpoint."""
    return aws_client(service, deployment.target, deployment.region, deployment.endpoint_url)
