"""Monitoring and offloading policy loop: CPU, input rate and backlog size the Lambda fleet (issue 4)."""
