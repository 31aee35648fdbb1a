"""What a deployer may choose when deploying the CDK worker stack: template.yaml's Parameters and the
Conditions derived from them, with the same names, types, defaults, bounds and descriptions.

Why apart from infra/worker_stack.py: these are the stack's inputs, declared once and read by every
resource; the resources refer to the conditions by name (Fn::If, a resource's Condition), so this
module only has to create them on the stack.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import CfnCondition, CfnParameter, Fn, Stack

LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 3653)


@dataclass(frozen=True)
class WorkerParameters:
    """The stack's CfnParameters, by the role they play (their logical IDs are template.yaml's)."""

    architecture: CfnParameter
    timeout: CfnParameter
    reserved: CfnParameter
    cold_start_mode: CfnParameter
    provisioned: CfnParameter
    subnet_ids: CfnParameter
    security_group: CfnParameter
    log_retention: CfnParameter
    expiration: CfnParameter
    image_uri: CfnParameter
    cluster_role: CfnParameter


def declare_parameters(stack: Stack) -> WorkerParameters:
    """Create the template's parameters on `stack`, in template.yaml's order."""
    return WorkerParameters(
        architecture=CfnParameter(
            stack,
            "Architecture",
            type="String",
            default="arm64",
            allowed_values=["arm64", "x86_64"],
            description="CPU architecture of the workers; the package's native wheels must match it.",
        ),
        timeout=CfnParameter(
            stack,
            "WorkerTimeout",
            type="Number",
            default=300,
            min_value=3,
            max_value=900,
            description="Seconds a worker session may run; the invoker's read timeout is set above this.",
        ),
        reserved=CfnParameter(
            stack,
            "ReservedConcurrency",
            type="Number",
            default=50,
            min_value=0,
            max_value=10000,
            description="Reserved concurrency, i.e. the most workers at once; 0 reserves none.",
        ),
        cold_start_mode=CfnParameter(
            stack,
            "ColdStartMode",
            type="String",
            default="none",
            allowed_values=["none", "snapstart", "provisioned"],
            description="How cold starts are fought: none, snapstart (zip package only) or provisioned.",
        ),
        provisioned=CfnParameter(
            stack,
            "ProvisionedConcurrency",
            type="Number",
            default=2,
            min_value=1,
            description="Warm environments kept on the alias when ColdStartMode is provisioned.",
        ),
        subnet_ids=CfnParameter(
            stack,
            "SubnetIds",
            type="CommaDelimitedList",
            default="",
            description="Subnets (in the Spark cluster's VPC) for the workers; empty: no VPC.",
        ),
        security_group=CfnParameter(
            stack,
            "SecurityGroupId",
            type="String",
            default="",
            description="Security group for the workers' network interfaces.",
        ),
        log_retention=CfnParameter(
            stack,
            "LogRetentionDays",
            type="Number",
            default=14,
            allowed_values=[str(d) for d in LOG_RETENTION_DAYS],
            description="Days the workers' logs (and EMF metrics records) are kept.",
        ),
        expiration=CfnParameter(
            stack,
            "StagingExpirationDays",
            type="Number",
            default=7,
            min_value=1,
            description="Days after which staged objects are deleted from the staging bucket.",
        ),
        image_uri=CfnParameter(
            stack,
            "WorkerImageUri",
            type="String",
            default="",
            description="ECR image URI of the worker as a container image; when given, it replaces the zip.",
        ),
        cluster_role=CfnParameter(
            stack,
            "SparkClusterRoleName",
            type="String",
            default="",
            description="Optional name of the Spark cluster's instance role; the policy is attached to it.",
        ),
    )


def declare_conditions(stack: Stack, params: WorkerParameters) -> None:
    """Create the template's conditions on `stack`, named as template.yaml names them."""
    CfnCondition(
        stack,
        "AttachVpc",
        expression=Fn.condition_and(
            Fn.condition_not(Fn.condition_equals(Fn.join("", params.subnet_ids.value_as_list), "")),
            Fn.condition_not(Fn.condition_equals(params.security_group.value_as_string, "")),
        ),
    )
    CfnCondition(
        stack,
        "HasReservedConcurrency",
        expression=Fn.condition_not(Fn.condition_equals(params.reserved.value_as_number, 0)),
    )
    CfnCondition(
        stack,
        "UseImage",
        expression=Fn.condition_not(Fn.condition_equals(params.image_uri.value_as_string, "")),
    )
    CfnCondition(stack, "UseZip", expression=Fn.condition_equals(params.image_uri.value_as_string, ""))
    CfnCondition(
        stack,
        "UseSnapStart",
        expression=Fn.condition_equals(params.cold_start_mode.value_as_string, "snapstart"),
    )
    CfnCondition(
        stack,
        "UseProvisioned",
        expression=Fn.condition_equals(params.cold_start_mode.value_as_string, "provisioned"),
    )
    CfnCondition(
        stack,
        "HasClusterRole",
        expression=Fn.condition_not(Fn.condition_equals(params.cluster_role.value_as_string, "")),
    )
