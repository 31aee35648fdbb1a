"""Routing and dispatch: the router in the source read, the VM agent, and the Lambda fleets it invokes."""
