#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 machine: system packages, Python 3.11, .venv with stepmark and all extras.
# Re-runs are cheap: each stage is skipped when its stamp matches.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(python3 python3-venv python3-dev build-essential libosmesa6 libgl1 libglib2.0-0 chromium postgresql ca-certificates)

need_apt=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if ((${#need_apt[@]})); then
  echo "[setup] installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PY=""
for cand in python3.11 /usr/bin/python3.11 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys, venv; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
    PY="$cand"; break
  fi
done
[ -n "$PY" ] || { echo "[setup] error: Python 3.11 not found" >&2; exit 1; }

STAMP=".venv/.stepmark-installed"
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "[setup] creating .venv with $($PY --version) and installing stepmark (a few minutes the first time)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  LOG=.venv/install.log
  if ! { .venv/bin/python -m pip install --upgrade pip setuptools wheel &&
         .venv/bin/python -m pip install -e ".[tfds,dev]"; } >"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    echo "[setup] error: pip install failed; full log in $LOG" >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
