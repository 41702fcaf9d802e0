#!/usr/bin/env bash
# Set up if needed (system packages, .venv), then run the whole test suite: lint, then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/pipelines -x`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa TF_CPP_MIN_LOG_LEVEL=2
echo "[test] ruff"
.venv/bin/ruff check .
echo "[test] pytest"
exec .venv/bin/python -m pytest "$@"
