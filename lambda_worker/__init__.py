"""The AWS Lambda handler that runs transient operators on Arrow batches (issue 3)."""
