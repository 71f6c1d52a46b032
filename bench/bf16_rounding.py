"""How much of a training update survives a cast to bfloat16: two checkpoints, weight by weight.

    python bench/bf16_rounding.py BEFORE_DIR AFTER_DIR      (e.g. data/imitation/model data/epoch_1/model)

Prints the share of weights that differ between the two checkpoints in float32 and the share that still
differ once both are cast to bfloat16 (what a player with `dtype: bfloat16` sees), and the median size of
an update against the median size of a weight. When most updates are below bfloat16's resolution (a
relative step of 2^-8), a model trained in float32 and played in bfloat16 plays mostly as before.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from safetensors.torch import load_file


def weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(file))
    if not tensors:
        raise SystemExit(f"{folder}: no .safetensors files")
    return tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()

    before, after = weights(args.before), weights(args.after)
    total = changed = changed_bf16 = 0
    updates, sizes = [], []
    for name, old in before.items():
        if name not in after:
            continue
        old, new = old.float(), after[name].float()
        total += old.numel()
        changed += int((old != new).sum())
        changed_bf16 += int((old.bfloat16() != new.bfloat16()).sum())
        updates.append(float((new - old).abs().median()))
        sizes.append(float(old.abs().median()))
    print(f"{len(updates)} tensors, {total:,} weights ({args.before} -> {args.after})")
    print(
        f"changed in float32: {changed / total:.1%}; still changed after casting both to bfloat16: "
        f"{changed_bf16 / total:.1%}"
    )
    print(
        f"median update {statistics.median(updates):.2e} against median weight {statistics.median(sizes):.2e}"
    )


if __name__ == "__main__":
    main()
