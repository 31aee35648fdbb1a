"""Deploy template.yaml through CloudFormation, remember its outputs, tear it down, report on it.

    sponge deploy --target localstack|aws [--stack NAME]   ->  .sponge/stack-<target>.json
    sponge destroy --target ...          sponge status --target ...

Why our own few steps instead of `sam deploy`: the SAM CLI is not a dependency of the project (and
needs Docker for builds); what `sam deploy` does for this template is three calls, made here with
boto3 (DESIGN.md section 3): zip the code, upload it to an artifact bucket under a content hash and
point CodeUri at it (what `aws cloudformation package` does), then create or update the stack with
CAPABILITY_IAM, CAPABILITY_NAMED_IAM and CAPABILITY_AUTO_EXPAND (the SAM transform) and wait.

The stack file is the one place `sponge run --target localstack|aws` learns where its workers are:
it is read once, at the edge (core/spark/offload_session.py), into a `Deployment` (core/deployment.py).

The modules, one step each: code_package (the zip, its hash, CodeUri pointed at the upload), stack
(DeployConfig, deploy and destroy, the waits, the artifact bucket), status (logs, warm workers,
metrics), clients (boto3 clients for a target) and aws_errors (what a failed call means, by its error
code). Callers import from them directly; this package re-exports nothing.
"""
