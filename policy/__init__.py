"""Monitoring and offloading policy loop: CPU, input rate and backlog decide the Lambda fleet size (issue 4)."""
