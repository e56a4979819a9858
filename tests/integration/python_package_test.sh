#!/bin/sh
# The Python client as a user installs it: a venv with --system-site-packages
# (Debian's grpcio / protobuf), `pip install ./connector/python` with no
# index (no network), then the client test and the example against a live
# `ragkv serve`, run from outside the source tree.
# Usage: python_package_test.sh RAGKV_BINARY SOURCE_DIR
set -eu
RAGKV=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# Debian splits venv's pip bootstrap (ensurepip) into python3-venv, which
# scripts/setup installs: missing, it fails the run under CI=true and skips
# elsewhere ("RAGKV_SKIP:" is ctest's skip marker for this test).
if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "python_package_test: CI=true and python3-venv is not installed (scripts/setup installs it)" >&2
    exit 1
  fi
  echo "RAGKV_SKIP: python3-venv is not installed (scripts/setup installs it)"
  exit 0
fi
/usr/bin/python3 -m venv --system-site-packages "$T/venv"
"$T/venv/bin/pip" install --no-index --no-cache-dir --quiet "$SRC/connector/python"
cd "$T"
env -u RAGKV_PY_STUBS "$T/venv/bin/python" "$SRC/tests/integration/python_client_test.py" \
  --ragkv "$RAGKV" --installed --example "$SRC/connector/python/examples/retrieve_and_blend.py"
