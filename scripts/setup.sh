#!/usr/bin/env bash
# Create .venv and install spag with everything it needs. Idempotent: re-runs only when pyproject changes.
# On a machine with no NVIDIA GPU, torch 2.13.0 (CPU build) is installed first so that pip never pulls a
# multi-GB CUDA build to satisfy the plain `torch` requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp="$VENV/.spag-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install --quiet --upgrade pip
extras="dev"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  extras="dev,gpu"
else
  $pip install --quiet "torch==2.13.0"
fi
$pip install --quiet -e ".[$extras]"
echo "$want" > "$stamp"
echo "[setup] installed spag[$extras] into $VENV"
