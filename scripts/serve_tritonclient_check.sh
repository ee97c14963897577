#!/usr/bin/env bash
# Checks `kiln serve` with the tritonclient[http] Python client from PyPI (a real KServe v2
# client): creates .venv-serve on first use, builds kiln, runs scripts/serve_tritonclient_check.py.
# Loopback only. Usage: scripts/serve_tritonclient_check.sh [--model resnet18]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-serve/bin/python ]; then
    python3 -m venv .venv-serve
    .venv-serve/bin/pip install --quiet 'tritonclient[http]' numpy
fi
cargo build --release -p kiln-cli
exec .venv-serve/bin/python scripts/serve_tritonclient_check.py --kiln target/release/kiln "$@"
