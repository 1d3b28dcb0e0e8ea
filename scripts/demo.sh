#!/usr/bin/env bash
# The main job on its embedded defaults: SQLite under $MARATHON_HOME (default ~/.local/state/kernel-marathon),
# a GPU when there is one, else the Triton interpreter. Profiles the MLA-decode starter: on a GPU it is
# checked at the benchmark shape and timed against PyTorch; on a CPU it is checked at the small shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
marathon problems
marathon compile kernels/mla_decode/starter.py --problem mla_decode
marathon profile kernels/mla_decode/starter.py --problem mla_decode "$@"
marathon log --limit 6
