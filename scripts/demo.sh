#!/usr/bin/env bash
# The main job on its embedded defaults: SQLite under $MARATHON_HOME (default ~/.local/state/kernel-marathon),
# a GPU when there is one, else the Triton interpreter. A short tuner run on the softmax kernel (no model, no
# key) through the MCP server, ending with its report in reports/RUN/ (a folder per run: running the demo again
# adds a folder and keeps the earlier ones). Extra arguments go to `marathon run` (the demo names the run itself).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
marathon problems
run_id="softmax-$(date -u +%Y%m%d-%H%M%S)-demo$(printf '%04x' "$RANDOM")"
set +e
marathon run --problem softmax --max-steps 6 "$@" --run-id "$run_id"
code=$?
set -e
if [ "$code" -ne 2 ]; then  # 2: the run never started (bad arguments), so it has no report
    marathon report "$run_id" --out reports
fi
exit "$code"
