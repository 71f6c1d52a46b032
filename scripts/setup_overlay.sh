#!/usr/bin/env bash
# Install, into a plain folder, only the pins in which OVERLAY's lock differs from the CPU lock
# (for requirements/cpu-oldtf.txt: transformers alone), with no dependencies of their own. Put the
# folder first on PYTHONPATH and .venv's python runs under the overlay's versions:
#   PYTHONPATH=.venv-oldtf .venv/bin/python -m pytest ...
# A second full venv would copy torch and the rest (2.4 GB) for one package; this takes ~100 MB.
# Needs .venv from scripts/setup.sh. Idempotent, like setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-requirements/cpu.txt}
OVERLAY=${OVERLAY:-requirements/cpu-oldtf.txt}
TARGET=${TARGET:-.venv-oldtf}
pins() { grep -E '^[A-Za-z0-9._-]+==' "$1" | sort; }
differ=$(comm -13 <(pins "$BASE") <(pins "$OVERLAY"))
if [ -z "$differ" ]; then
  echo "[setup_overlay] $OVERLAY pins nothing that $BASE does not: nothing to install" >&2
  exit 2
fi
stamp="$TARGET/.spag-installed"
want=$(cat scripts/setup_overlay.sh "$BASE" "$OVERLAY" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
# Only ever replaces a folder this script made (it carries the stamp) or an empty one.
if [ -e "$TARGET" ] && [ ! -f "$stamp" ] && [ -n "$(ls -A "$TARGET")" ]; then
  echo "[setup_overlay] $TARGET exists and was not made by this script; move it away first" >&2
  exit 2
fi
rm -rf "$TARGET"
# shellcheck disable=SC2086  # one pin per word
.venv/bin/python -m pip install --quiet --no-deps --target "$TARGET" $differ
echo "$want" > "$stamp"
echo "[setup_overlay] installed $(echo $differ) into $TARGET (over .venv's $BASE)"
