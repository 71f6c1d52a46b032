#!/usr/bin/env bash
# The GPU check rehearsed here as it runs on an offline GPU node like the lent machines (scripts/gpu-image-freeze.txt):
#   1. a Python 3.12 "image" venv holding only what that image holds of the check's needs, at the image's versions
#      where recorded (else requirements/gpu.txt's), from PyPI; built once and reused;
#   2. the check's wheelhouse for that venv's `pip freeze` (scripts/wheelhouse.py build, from PyPI);
#   3. a fresh venv on top of the image venv (its packages seen through a .pth file, so the image venv stays as the
#      image is), the wheelhouse installed into it with pip --no-index (scripts/wheelhouse.py install);
#   4. `python bench/gpu.py --cpu --spawn` there, from the source tree (PYTHONPATH; spag itself is not installed),
#      each part a new Python process as on a GPU.
# torch: the image's 2.11.0. PyPI's only Linux build of it is CUDA's (a few GB, once), which runs on a CPU; the
# CPU-only builds live on download.pytorch.org (TORCH_INDEX=https://download.pytorch.org/whl/cpu takes it there).
# Settings: PYTHON (a Python 3.12; default pyenv's 3.12, else python3.12 on PATH), SPAG_CACHE (default
# ~/.cache/spag: the venvs, the wheelhouse and the check's JSON go under $SPAG_CACHE/rehearsal), TORCH_INDEX.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${SPAG_CACHE:-$HOME/.cache/spag}/rehearsal
image=$work/image-py312 run=$work/run-py312 wheels=$work/wheelhouse
mkdir -p "$work"

python=${PYTHON:-}
if [ -z "$python" ]; then
  if command -v pyenv >/dev/null 2>&1; then
    python=$(ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -n 1 || true)
  fi
  [ -n "$python" ] || python=$(command -v python3.12 || true)
fi
if [ -z "$python" ]; then
  echo "[rehearse] error: no Python 3.12 found (pyenv's or python3.12 on PATH): set PYTHON=/path/to/python3.12" >&2
  exit 2
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
if [ "$version" != 3.12 ]; then
  echo "[rehearse] error: PYTHON=$python is ${version:+Python }${version:-no Python}; the GPU image runs" \
       "Python 3.12: set PYTHON=/path/to/python3.12" >&2
  exit 2
fi
echo "[rehearse] Python: $python ($("$python" -V 2>&1))"

# What the image holds of the check's needs (the issue's list), each at the image's version where the freeze
# records one, else at the lock's.
stand_in="torch transformers accelerate peft numpy pyarrow safetensors tokenizers huggingface-hub pyyaml typer rich
tqdm ninja psutil msgpack py-cpuinfo"
pin() {  # name==version from the image's freeze (less a +local part), else from requirements/gpu.txt; the
  # name matched as pip normalises it (the freeze says huggingface_hub, the lock huggingface-hub)
  local line pattern="^${1//[-_.]/[-_.]}=="
  line=$(grep -i -E -m 1 "$pattern" scripts/gpu-image-freeze.txt || grep -i -E -m 1 "$pattern" requirements/gpu.txt)
  echo "${line%%+*}"
}
pins=()
for name in $stand_in; do pins+=("$(pin "$name")"); done
names() {  # the package names of a freeze, normalised, sorted
  grep -v '^#' "$1" | sed 's/[=@ ].*//' | tr '[:upper:]_.' '[:lower:]--' | sort -u
}
stamp=$(cat scripts/gpu-image-freeze.txt <(echo "${pins[*]} ${TORCH_INDEX:-}") \
  | sha256sum | cut -d' ' -f1)
if [ "$(cat "$image/.rehearsal" 2>/dev/null)" != "$stamp" ]; then
  echo "[rehearse] building the image venv $image: ${pins[*]}"
  rm -rf "$image"
  "$python" -m venv "$image"
  index=()
  [ -z "${TORCH_INDEX:-}" ] || index=(--index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple)
  "$image/bin/python" -m pip install --quiet --no-cache-dir "${index[@]}" "${pins[@]}"
  # What those pins pulled in that the image does not hold (e.g. pydantic, which the lock's typer asks for)
  # goes again: the wheelhouse must carry it, as it must for the image.
  "$image/bin/python" -m pip freeze --all > "$work/image-freeze.txt"
  # (pip itself stays: the image's own freeze, without --all, does not list it)
  extra=$(comm -23 <(names "$work/image-freeze.txt") <(names scripts/gpu-image-freeze.txt) \
    | grep -vxE 'pip|setuptools|wheel' || true)
  if [ -n "$extra" ]; then
    echo "[rehearse] removing what the image does not hold:" $extra
    # shellcheck disable=SC2086
    "$image/bin/python" -m pip uninstall --quiet --yes $extra
  fi
  echo "$stamp" > "$image/.rehearsal"
fi
"$image/bin/python" -m pip freeze --all > "$work/image-freeze.txt"

echo "[rehearse] the wheelhouse for the image venv's freeze"
"$image/bin/python" scripts/wheelhouse.py build "$wheels" --python 3.12 --freeze "$work/image-freeze.txt"

rm -rf "$run"
"$python" -m venv "$run"
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site "$image" > "$(site "$run")/rehearsal-image.pth"
# The image's commands (torchrun, ...) beside the run venv's python, run by it, as they lie beside the image's
for script in "$image"/bin/*; do
  name=${script##*/}
  if [ ! -e "$run/bin/$name" ] && head -n 1 "$script" | grep -q "^#!$image/bin/python"; then
    printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$run/bin/python" "$script" > "$run/bin/$name"
    chmod +x "$run/bin/$name"
  fi
done
echo "[rehearse] installing the wheelhouse into $run with --no-index"
# no pip configuration: a find-links folder of this machine's (as /etc/xdg/pip may name) would hide a missing wheel
PIP_CONFIG_FILE=/dev/null "$run/bin/python" scripts/wheelhouse.py install "$wheels"
if "$run/bin/python" -m pip show spag >/dev/null 2>&1; then
  echo "[rehearse] error: spag is installed in $run; the check must run from the source tree" >&2
  exit 2
fi
echo "[rehearse] python bench/gpu.py --cpu --spawn, from $root"
PYTHONPATH=$root "$run/bin/python" bench/gpu.py --cpu --spawn --out "$work/gpu-cpu.json"  # processes as on a GPU
echo "[rehearse] passed: $work/gpu-cpu.json"
