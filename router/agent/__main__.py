"""Entry point of `python -m router.agent` (the command line is in router/agent/cli.py)."""

import sys

from router.agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
