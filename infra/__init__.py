"""Deploying the Lambda side: packaging, the stack (SAM template and its CDK twin), status, LocalStack."""
