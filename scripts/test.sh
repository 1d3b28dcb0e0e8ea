#!/usr/bin/env bash
# Set up .venv (scripts/bootstrap.sh), lint (ruff), type-check (mypy), and run the test suite. GPU tests run where a GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
python -c "import torch, triton, numpy; print('torch', torch.__version__, '| triton', triton.__version__, '| numpy', numpy.__version__, '| cuda', torch.cuda.is_available())"
ruff check .
mypy
set +e
python -m pytest -q "$@"
code=$?
set -e
# pytest exits 5 when it collected no tests: a failure here, never a pass.
if [ "$code" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$code"
