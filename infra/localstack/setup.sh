#!/usr/bin/env bash
# Create LocalStack's own virtualenv (.localstack-venv) with pinned localstack-core and the project's
# host runtime executor (infra/localstack/sponge_executor). Run by `make localstack-setup` and `make setup`.
#
# Why a virtualenv of its own: localstack-core's current releases need Python 3.13 and pin libraries
# (boto3, cryptography, ...) at versions other than the project's; LocalStack runs as a separate
# process, so the two never need to share an interpreter.
#
#   infra/localstack/setup.sh [VENV_DIR]     (default: .localstack-venv in the project root)
#   LOCALSTACK_PYTHON=/path/to/python3.13 infra/localstack/setup.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${1:-$ROOT/.localstack-venv}"
STAMP="$VENV/.installed"
CONSTRAINTS="$HERE/constraints.txt"
PLUGIN="$HERE/sponge_executor"
LOCALSTACK_SPEC="localstack-core[runtime]==2026.3.0"

find_python() {
  local candidates=()
  [ -n "${LOCALSTACK_PYTHON:-}" ] && candidates+=("$LOCALSTACK_PYTHON")
  candidates+=("$HOME/.pyenv/versions/3.13.0/bin/python")
  if [ -d "$HOME/.pyenv/versions" ]; then
    for d in "$HOME"/.pyenv/versions/3.13.*; do [ -x "$d/bin/python" ] && candidates+=("$d/bin/python"); done
  fi
  command -v python3.13 >/dev/null 2>&1 && candidates+=("$(command -v python3.13)")
  for py in "${candidates[@]}"; do
    if [ -x "$py" ] && "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else 1)' 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done
  return 1
}

# Up to date when the stamp is newer than the pins and every file of the plugin.
if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] \
   && [ -z "$(find "$CONSTRAINTS" "$PLUGIN" "$0" -newer "$STAMP" -not -path '*/__pycache__*' -not -path '*.egg-info*' 2>/dev/null | head -1)" ]; then
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  if ! PY="$(find_python)"; then
    echo "error: LocalStack needs Python 3.13 and none was found (looked at \$LOCALSTACK_PYTHON," \
         "~/.pyenv/versions/3.13.*, python3.13 on PATH); install it (e.g. \`pyenv install 3.13\`," \
         "or Debian/Ubuntu: apt-get install python3.13 python3.13-venv) or set LOCALSTACK_PYTHON" >&2
    exit 1
  fi
  echo "localstack-setup: creating $VENV with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV"
fi
echo "localstack-setup: installing $LOCALSTACK_SPEC and the sponge-host executor (pinned) ..."
pip_install() {
  # This machine's pip config names local mirrors that may be absent: drop those warnings, keep pip's status.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" "$@" \
    2> >(grep -v "^WARNING: Location" >&2)
}
# service-identity: Twisted (LocalStack's server) verifies TLS hostnames with it and warns without it.
pip_install "$LOCALSTACK_SPEC" service-identity
pip_install --no-deps "$PLUGIN"
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import entry_points, version

names = {ep.name for ep in entry_points(group="localstack.lambda.runtime_executor")}
assert "sponge-host" in names, f"the sponge-host executor is not registered: {sorted(names)}"
from OpenSSL import crypto

assert hasattr(crypto.X509, "add_extensions"), "pyopenssl too new for LocalStack's certificate code"
print(f"localstack-setup: localstack-core {version('localstack-core')}, executors {sorted(names)}")
EOF
# Kinesis's engine: LocalStack installs the kinesis-local npm package (kinesis-mock) on the first Kinesis
# request; install it now, where the runtime looks (the default instance's filesystem root; in a container,
# LocalStack's shared /var/lib/localstack), so no Kinesis call or test waits on npm.
if ! command -v npm >/dev/null 2>&1; then
  echo "error: LocalStack's Kinesis needs node and npm (install nodejs 18+, e.g. make node)" >&2
  exit 1
fi
FILESYSTEM_ROOT="$ROOT/.localstack/filesystem" "$VENV/bin/python" - <<'EOF'
from localstack.services.kinesis.packages import kinesismock_package

kinesismock_package.install()
print(f"localstack-setup: Kinesis engine (kinesis-local) in {kinesismock_package.get_installed_dir()}")
EOF
touch "$STAMP"
