"""The `sponge` command line: core/cli/main.py builds the app; each command group registers itself."""
