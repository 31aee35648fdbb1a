"""The CDK twin of template.yaml: the same parameters, conditions, resources, permissions and outputs.

The parameters and conditions are declared in infra/worker_parameters.py; this module builds the
resources, their permissions and the outputs on them.

Why CloudFormation-level (L1) constructs rather than CDK's higher-level ones: the SAM template is the
reference (it is what LocalStack deploys and what cfn-lint checks), and the L2 constructs add their
own roles, policies and custom resources (log retention, auto-delete) that would make the two stacks
differ in what they may do. L1 constructs with the template's logical IDs keep them comparable
resource by resource (tests/infra/test_cdk_matches_template.py), and a stack deployed from one can be
updated from the other.

What SAM's AutoPublishAlias does is spelt out here: a Lambda version (retained on replacement, so the
alias can move back) and the alias "live" on it, and SAM's EventInvokeConfig becomes the
AWS::Lambda::EventInvokeConfig on that alias. The version's logical ID carries the code asset's
hash so that new code publishes a new version, as SAM's hashed IDs do; the image function's version
carries the image URI in its description for the same reason (a new description replaces it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import (
    Acknowledgment,
    Aws,
    CfnDeletionPolicy,
    CfnOutput,
    CfnResource,
    Fn,
    Stack,
    Token,
    Validations,
)
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from core.deployment import METRICS_NAMESPACE
from infra.worker_parameters import declare_conditions, declare_parameters

HANDLER = "lambda_worker.handler.handler"
RUNTIME = "python3.13"
MEMORY_MB = 1769  # one vCPU, as in the Sponge paper
ALIAS = "live"
FUNCTION_NAME = "${AWS::StackName}-worker"
STACK_DESCRIPTION = (
    "Sponge on Spark - transient Lambda workers, staging bucket and the Spark cluster's policy"
)
ROLE_DESCRIPTION = "Execution role of the Sponge workers - their own log group only"
POLICY_DESCRIPTION = (
    "Lets the Spark cluster invoke the Sponge workers of this stack (their alias live) and nothing else"
)
ENI_POLICY = "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaENIManagementAccess"
FUNCTION_ARN = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:" + FUNCTION_NAME


def _unless(condition: str, value: Any) -> Any:
    """The value where the condition holds, no property at all where it does not (Fn::If with NoValue)."""
    return Fn.condition_if(condition, value, Aws.NO_VALUE)


class WorkerStack(Stack):
    """Sponge's Lambda side: transient workers, their log group, the staging bucket, the cluster's policy."""

    def __init__(self, scope: Construct, construct_id: str, *, code_dir: Path, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.params = declare_parameters(self)
        declare_conditions(self, self.params)
        log_group = self._log_group()
        bucket = self._staging_bucket()
        role = self._worker_role(log_group, bucket)
        code = s3_assets.Asset(self, "WorkerCode", path=str(code_dir))
        zip_code = lambda_.CfnFunction.CodeProperty(s3_bucket=code.s3_bucket_name, s3_key=code.s3_object_key)
        self._function("WorkerFunction", "UseZip", role, log_group, bucket, zip_code, code.asset_hash[:10])
        image_code = lambda_.CfnFunction.CodeProperty(image_uri=self.params.image_uri.value_as_string)
        self._function("WorkerImageFunction", "UseImage", role, log_group, bucket, image_code, "")
        policy = self._spark_cluster_policy(bucket)
        self._outputs(log_group, bucket, policy)

    def _log_group(self) -> logs.CfnLogGroup:
        group = logs.CfnLogGroup(
            self,
            "WorkerLogGroup",
            log_group_name=Fn.sub("/aws/lambda/" + FUNCTION_NAME),
            retention_in_days=self.params.log_retention.value_as_number,
        )
        _delete_with_stack(group)
        return group

    def _staging_bucket(self) -> s3.CfnBucket:
        bucket = s3.CfnBucket(
            self,
            "StagingBucket",
            bucket_encryption=s3.CfnBucket.BucketEncryptionProperty(
                server_side_encryption_configuration=[
                    s3.CfnBucket.ServerSideEncryptionRuleProperty(
                        server_side_encryption_by_default=s3.CfnBucket.ServerSideEncryptionByDefaultProperty(
                            sse_algorithm="AES256"
                        )
                    )
                ]
            ),
            public_access_block_configuration=s3.CfnBucket.PublicAccessBlockConfigurationProperty(
                block_public_acls=True,
                block_public_policy=True,
                ignore_public_acls=True,
                restrict_public_buckets=True,
            ),
            lifecycle_configuration=s3.CfnBucket.LifecycleConfigurationProperty(
                rules=[
                    s3.CfnBucket.RuleProperty(
                        id="ExpireStagedObjects",
                        status="Enabled",
                        expiration_in_days=self.params.expiration.value_as_number,
                    )
                ]
            ),
        )
        _delete_with_stack(bucket)
        s3.CfnBucketPolicy(
            self,
            "StagingBucketPolicy",
            bucket=bucket.ref,
            policy_document={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "DenyInsecureTransport",
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:*",
                        "Resource": [bucket.attr_arn, Fn.sub("${StagingBucket.Arn}/*")],
                        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    }
                ],
            },
        )
        return bucket

    def _worker_role(self, log_group: logs.CfnLogGroup, bucket: s3.CfnBucket) -> iam.CfnRole:
        return iam.CfnRole(
            self,
            "WorkerRole",
            description=ROLE_DESCRIPTION,
            assume_role_policy_document={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            },
            managed_policy_arns=Token.as_list(_unless("AttachVpc", [Fn.sub(ENI_POLICY)])),
            policies=[
                iam.CfnRole.PolicyProperty(
                    policy_name="worker",
                    policy_document={
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "OwnLogGroup",
                                "Effect": "Allow",
                                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                                "Resource": log_group.attr_arn,
                            },
                        ],
                    },
                )
            ],
        )

    def _function(
        self,
        logical_id: str,
        condition: str,
        role: iam.CfnRole,
        log_group: logs.CfnLogGroup,
        bucket: s3.CfnBucket,
        code: lambda_.CfnFunction.CodeProperty,
        code_hash: str,
    ) -> None:
        """One variant of the worker function (zip or image) with its version and alias, under a condition."""
        image = condition == "UseImage"
        function = lambda_.CfnFunction(
            self,
            logical_id,
            function_name=Fn.sub(FUNCTION_NAME),
            description=f"Sponge transient worker ({'container image' if image else 'zip package'})",
            code=code,
            package_type="Image" if image else None,
            handler=None if image else HANDLER,
            runtime=None if image else RUNTIME,
            image_config=lambda_.CfnFunction.ImageConfigProperty(command=[HANDLER]) if image else None,
            architectures=[self.params.architecture.value_as_string],
            memory_size=MEMORY_MB,
            timeout=self.params.timeout.value_as_number,
            role=role.attr_arn,
            reserved_concurrent_executions=Token.as_number(
                _unless("HasReservedConcurrency", self.params.reserved.value_as_number)
            ),
            # Inside Fn::If, CDK renders property structs with their Python-side casing: spell them out.
            snap_start=None if image else _unless("UseSnapStart", {"ApplyOn": "PublishedVersions"}),
            vpc_config=_unless(
                "AttachVpc",
                {
                    "SubnetIds": self.params.subnet_ids.value_as_list,
                    "SecurityGroupIds": [self.params.security_group.value_as_string],
                },
            ),
            environment=lambda_.CfnFunction.EnvironmentProperty(
                variables={
                    "POWERTOOLS_SERVICE_NAME": "sponge-worker",
                    "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                    "POWERTOOLS_TRACE_DISABLED": "true",
                }
            ),
        )
        _only_if(function, self, condition)
        # CDK's synth-time check reads VpcConfig with the empty default IDs, ignoring that AttachVpc is false
        # for them; cfn-lint on template.yaml, which honours the condition, passes.
        Validations.of(function).acknowledge(
            *(
                Acknowledgment(
                    id=f"CloudFormation-Validate::{rule}", reason="VpcConfig only when IDs are given"
                )
                for rule in ("F3031", "E1150")
            )
        )
        function.add_resource_dependency(log_group, "the group must exist before Lambda would create it")

        version = lambda_.CfnVersion(
            self,
            f"{logical_id}Version",
            function_name=function.ref,
            description=Fn.sub("image ${WorkerImageUri}") if image else None,
        )
        version.override_logical_id(f"{logical_id}Version{code_hash}")
        version.cfn_options.deletion_policy = CfnDeletionPolicy.RETAIN
        version.cfn_options.update_replace_policy = CfnDeletionPolicy.RETAIN
        _only_if(version, self, condition)

        alias = lambda_.CfnAlias(
            self,
            f"{logical_id}Alias{ALIAS}",
            name=ALIAS,
            function_name=function.ref,
            function_version=version.attr_version,
            provisioned_concurrency_config=_unless(
                "UseProvisioned", {"ProvisionedConcurrentExecutions": self.params.provisioned.value_as_number}
            ),
        )
        _only_if(alias, self, condition)

        # SAM's EventInvokeConfig: no asynchronous retries of a failed invocation through the alias
        # (the agent has re-dispatched the worker's chunks by then and refuses a retried worker).
        invoke_config = lambda_.CfnEventInvokeConfig(
            self,
            f"{logical_id}EventInvokeConfig",
            function_name=function.ref,
            qualifier=ALIAS,
            maximum_retry_attempts=0,
            destination_config=lambda_.CfnEventInvokeConfig.DestinationConfigProperty(),
        )
        invoke_config.add_dependency(alias)  # the qualifier must exist first
        _only_if(invoke_config, self, condition)

    def _spark_cluster_policy(self, bucket: s3.CfnBucket) -> iam.CfnManagedPolicy:
        return iam.CfnManagedPolicy(
            self,
            "SparkClusterPolicy",
            description=POLICY_DESCRIPTION,
            roles=Token.as_list(_unless("HasClusterRole", [self.params.cluster_role.value_as_string])),
            policy_document={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "InvokeWorkers",
                        "Effect": "Allow",
                        "Action": "lambda:InvokeFunction",
                        "Resource": Fn.sub(FUNCTION_ARN + ":" + ALIAS),
                    },
                ],
            },
        )

    def _outputs(
        self, log_group: logs.CfnLogGroup, bucket: s3.CfnBucket, policy: iam.CfnManagedPolicy
    ) -> None:
        def output(name: str, value: Any, description: str) -> None:
            # Outputs may share a name with a parameter or resource in a template, not in a construct tree.
            out = CfnOutput(self, f"Output{name}", value=Token.as_string(value), description=description)
            out.override_logical_id(name)

        # By name, not by reference: either variant of the function bears it; outputs wait for all resources.
        output(
            "FunctionName",
            Fn.sub(FUNCTION_NAME),
            "Name of the worker function (what the boto3 invoker calls)",
        )
        output("FunctionArn", Fn.sub(FUNCTION_ARN), "ARN of the worker function (unqualified)")
        output(
            "FunctionAlias",
            ALIAS,
            "Alias to invoke (qualifier); SnapStart and provisioned concurrency apply only through it",
        )
        output(
            "FunctionTimeout",
            self.params.timeout.value_as_string,
            "The function's timeout in seconds (the invoker's read timeout goes above it)",
        )
        output(
            "ReservedConcurrency",
            self.params.reserved.value_as_string,
            "Reserved concurrency (0 = none reserved)",
        )
        output(
            "ProvisionedEnvironments",
            Fn.condition_if("UseProvisioned", self.params.provisioned.value_as_string, "0"),
            "Environments kept warm on the alias by provisioned concurrency (0 unless ColdStartMode is "
            "provisioned)",
        )
        output("StagingBucket", bucket.ref, "Name of the encrypted, TLS-only staging bucket")
        output(
            "SparkClusterPolicyArn",
            policy.ref,
            "Managed policy to attach to the Spark cluster's instance role",
        )
        output("Region", Aws.REGION, "Region of the stack (the invoker's region)")
        output("LogGroupName", log_group.ref, "Log group of the workers (logs and EMF metrics)")


def _delete_with_stack(resource: CfnResource) -> None:
    """Transient data (logs, staged objects) goes with the stack, said explicitly as cfn-lint asks."""
    resource.cfn_options.deletion_policy = CfnDeletionPolicy.DELETE
    resource.cfn_options.update_replace_policy = CfnDeletionPolicy.DELETE


def _only_if(resource: CfnResource, stack: Stack, condition: str) -> None:
    resource.cfn_options.condition = stack.node.find_child(condition)  # type: ignore[assignment]
