#!/usr/bin/env bash
# Set up if needed (system packages, .venv), then run the whole test suite: lint, then pytest.
# With arguments, they go to one pytest run, e.g. `bash scripts/test.sh tests/pipelines -x`.
#
# Without arguments pytest runs twice: TensorFlow (TFDS tests, marker `tfds`) and MuJoCo's OSMesa renderer crash
# when loaded into one process (measured: the first render after both are imported aborts), so TFDS tests get a
# process of their own. Test modules import TensorFlow lazily for the same reason.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
export MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa TF_CPP_MIN_LOG_LEVEL=2
echo "[test] ruff"
.venv/bin/ruff check .
if (($#)); then
  exec .venv/bin/python -m pytest "$@"
fi
status=0
echo "[test] pytest: everything but TFDS"
.venv/bin/python -m pytest -m "not tfds" || status=$?
echo "[test] pytest: TFDS (own process)"
tf_status=0
.venv/bin/python -m pytest -m tfds || tf_status=$?
[ "$tf_status" -eq 5 ] && tf_status=0  # no TFDS tests selected is not a failure of this run
[ "$status" -ne 0 ] && exit "$status"
exit "$tf_status"
