"""A linear layer's products on a CPU in float32, side by side in one run: what spag/players/hf/linear.py
chooses between.

    python bench/linear.py [--rows 16 32 64 128 512 2048] [--repeats 40] [--toy]

For each weight shape of the embedded model (SmolLM2-135M: 576 -> 1536, 1536 -> 576, 576 -> 576, 576 -> 192
and the 49152-word output layer) and each number of rows x, three products of the same inputs:

- ``x @ Wᵀ``: what ``nn.Linear`` asks of torch's BLAS (MKL on x86);
- ``W @ xᵀ``: the same product with the weight first, transposed back (``weight_first_linear`` without
  a packed weight);
- packed: oneDNN's product over the weight's packed copy (``PackedWeights``: ``_reorder_linear_weight``
  then ``_linear_pointwise``).

Reported: GFLOPS of each (the best of three timings of ``--repeats`` calls) and the packed product's
rate over the better of MKL's two; each side checked against ``x @ Wᵀ`` first. ``--toy``: small shapes
and few repeats (CI runs it so, to keep the script working). To see the kernels a CPU without AVX-512
would run, set ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``.
"""

from __future__ import annotations

import argparse
import time

SHAPES = [(576, 1536), (1536, 576), (576, 576), (576, 192), (576, 49152)]  # (in, out) of the embedded model
TOY_SHAPES = [(48, 96), (96, 48)]


def _rate(call, flops: float, repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        best = min(best, (time.perf_counter() - start) / repeats)
    return flops / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 32, 64, 128, 512, 2048])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--toy", action="store_true", help="small shapes, few repeats (CI)")
    args = parser.parse_args()

    import torch

    from spag.players.hf.linear import PACKED_ROWS, packed_product

    shapes, rows_list, repeats = (TOY_SHAPES, [3, 100], 2) if args.toy else (SHAPES, args.rows, args.repeats)
    generator = torch.Generator().manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32; GFLOPS (best of 3 x {repeats} calls)"
    )
    print(
        f"{'rows':>5} {'in -> out':>12} {'x @ Wᵀ':>8} {'W @ xᵀ':>8} {'packed':>8} {'packed / best MKL':>18}"
    )
    for rows in rows_list:
        for d_in, d_out in shapes:
            x = torch.randn(rows, d_in, generator=generator)
            weight = torch.randn(d_out, d_in, generator=generator)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_ROWS)
            sides = {
                "x @ Wᵀ": lambda x=x, weight=weight: torch.nn.functional.linear(x, weight),
                "W @ xᵀ": lambda x=x, weight=weight: torch.mm(weight, x.t()).t(),
                "packed": lambda x=x, packed=packed: packed_product(x, packed, None),
            }
            expected = x @ weight.t()
            for name, call in sides.items():
                torch.testing.assert_close(call(), expected, rtol=1e-4, atol=1e-4, msg=name)
            flops = 2.0 * rows * d_in * d_out
            rates = {name: _rate(call, flops, repeats) for name, call in sides.items()}
            ratio = rates["packed"] / max(rates["x @ Wᵀ"], rates["W @ xᵀ"])
            print(
                f"{rows:>5} {f'{d_in} -> {d_out}':>12} {rates['x @ Wᵀ']:>8.0f} {rates['W @ xᵀ']:>8.0f} "
                f"{rates['packed']:>8.0f} {ratio:>17.2f}x",
                flush=True,
            )
    print(f"bench/linear: {len(rows_list) * len(shapes)} products measured")


if __name__ == "__main__":
    main()
