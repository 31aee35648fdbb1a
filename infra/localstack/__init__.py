"""LocalStack on a machine without Docker: its virtualenv (setup.sh), its launcher, and the project's
host runtime executor plugin (sponge_executor/). See docs/localstack.md."""
