#!/usr/bin/env bash
# The main job on its embedded defaults: SQLite under $MARATHON_HOME (default ~/.local/state/kernel-marathon),
# a GPU when there is one, else the Triton interpreter. A short tuner run on the softmax kernel (no model, no
# key) through the MCP server, ending with a report in reports/demo/. Extra arguments go to `marathon run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
marathon problems
marathon run --problem softmax --max-steps 6 --report reports/demo "$@"
