"""Router operators and the VM-side agent that dispatches offloaded records to Lambda workers (issue 3)."""
