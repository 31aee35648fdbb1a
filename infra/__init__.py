"""CDK app and LocalStack tooling for deploying the Lambda side (issue 5)."""
