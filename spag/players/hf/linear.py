"""CPU linear layers for decoding steps: ``W @ xᵀ`` for a few rows, oneDNN's packed weights for the largest.

:func:`weight_first` routes a model's plain ``nn.Linear`` layers through :func:`weight_first_linear` for
the duration of a ``with`` block and restores them exactly afterwards (tests/test_players.py checks it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

WEIGHT_FIRST_ROWS = 256   # linear layers over at most this many rows compute W @ xᵀ (see weight_first)
PACKED_ROWS = 64          # ... or oneDNN's product over a packed weight, up to this many rows
PACKED_MIN_WEIGHTS = 800_000  # for weights of at least this many elements (see PackedWeights)


def weight_first_linear(module, x, packed=None):
    """``module(x)`` for an ``nn.Linear``: ``W @ xᵀ`` (transposed back, not copied) when x has few rows,
    or oneDNN's product with ``packed`` (the weight in oneDNN's layout, see :class:`PackedWeights`)
    when x has at most ``PACKED_ROWS`` rows."""
    import torch

    if x.numel() > WEIGHT_FIRST_ROWS * x.shape[-1]:
        return torch.nn.functional.linear(x, module.weight, module.bias)
    if packed is not None and x.numel() <= PACKED_ROWS * x.shape[-1]:
        out = packed_product(x.reshape(-1, x.shape[-1]), packed, module.bias)
        return out.reshape(*x.shape[:-1], module.weight.shape[0])
    rows = x.reshape(-1, x.shape[-1]).t()
    out = torch.mm(module.weight, rows) if module.bias is None else \
        torch.addmm(module.bias[:, None], module.weight, rows)
    return out.t().reshape(*x.shape[:-1], module.weight.shape[0])


def packed_product(rows, packed, bias):
    """``rows @ Wᵀ + bias`` by oneDNN, W given as its packed copy (``_reorder_linear_weight``)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


class PackedWeights:
    """The large float32 linear weights of a model, copied once into oneDNN's packed layout.

    For a decoding step (a few rows through each layer, the weights streamed from memory every step)
    oneDNN's product over a packed weight beat MKL's ``W @ xᵀ`` on a 2-core AVX2 CPU: measured in
    place, both on the same inputs over a whole bench run, the 49152-word output layer took 0.55x
    the time, SmolLM2's gate/up layers (1536x576) 0.74x and its down layer 0.92x, while the 576x576
    layers were even (0.98x) and the 192x576 ones slower (1.2x): only weights of at least
    ``PACKED_MIN_WEIGHTS`` elements are packed. A copy costs memory (430 MB for SmolLM2-135M) and is
    made again when its weight changes (in place, as an optimiser step does, or replaced; an edit through
    ``weight.data`` bypasses the version counter and is not seen). Where the
    oneDNN operators are missing or disagree with ``torch.mm`` on a first check, nothing is packed.
    """

    def __init__(self):
        self._copies: dict[int, tuple[tuple, object]] = {}   # id(module) -> (weight key, packed)
        self.available: bool | None = None                    # None: not checked yet

    @staticmethod
    def _key(weight) -> tuple:
        return (weight.data_ptr(), weight._version, tuple(weight.shape))

    @staticmethod
    def _pack(weight):
        import torch

        return torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_ROWS)

    def _first_pack(self, weight):
        """The first weight's packed copy if oneDNN's product with it agrees with ``torch.mm``, else None."""
        import torch

        try:
            packed = self._pack(weight)
            x = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0))
            agrees = torch.allclose(packed_product(x, packed, None), x @ weight.t(), rtol=1e-4, atol=1e-4)
        except (AttributeError, RuntimeError, NotImplementedError):
            return None
        return packed if agrees else None

    def get(self, module):
        """The packed copy of ``module.weight``, or None where this layer keeps ``W @ xᵀ``."""
        import torch

        weight = module.weight
        if weight.dtype != torch.float32 or weight.device.type != "cpu" \
                or weight.numel() < PACKED_MIN_WEIGHTS or self.available is False:
            return None
        key = self._key(weight)
        kept = self._copies.get(id(module))
        if kept is not None and kept[0] == key:
            return kept[1]
        if self.available is None:        # the first weight: packed once, and checked
            packed = self._first_pack(weight.detach())
            self.available = packed is not None
            if packed is None:
                return None
        else:
            packed = self._pack(weight.detach())
        self._copies[id(module)] = (key, packed)
        return packed


@contextmanager
def weight_first(model, packs: PackedWeights | None = None) -> Iterator[None]:
    """Route the model's plain ``nn.Linear`` layers through :func:`weight_first_linear` meanwhile.

    On a 2-core AVX2 CPU in float32, SmolLM2's linear layers took 1.5x longer as ``x @ Wᵀ`` (what
    ``nn.Linear`` asks of MKL) than as ``W @ xᵀ`` for 32 rows (one decoding step of a batch of 32); for
    one row both are the same matrix-vector product. Over many rows (a group of prompts) the
    transposed result slowed the layers after it more than the product gained, so inputs over
    ``WEIGHT_FIRST_ROWS`` rows keep ``nn.Linear``'s own path. The largest layers take oneDNN's
    product over a packed copy of their weight instead, where ``packs`` holds one (see
    :class:`PackedWeights`). Layers that already carry their own ``forward`` (hooks of accelerate,
    adapters) and subclasses are left alone.
    """
    import torch

    layers = [m for m in model.modules() if type(m) is torch.nn.Linear and "forward" not in vars(m)]
    for layer in layers:
        packed = packs.get(layer) if packs is not None else None
        layer.forward = partial(weight_first_linear, layer, packed=packed)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward
