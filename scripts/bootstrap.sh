#!/usr/bin/env bash
# Create (or reuse) .venv in the project root with everything kernel-marathon needs. Idempotent.
# Usage: source-free: `bash scripts/bootstrap.sh`; then `. .venv/bin/activate`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
# torch first, pinned: CPU machines get the CPU build, so the project's `torch` requirement pulls nothing more.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
