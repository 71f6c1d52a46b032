"""CPU linear layers: oneDNN's product over packed weights for prompts, ``W @ xᵀ`` or packed weights for
decoding steps.

:func:`weight_first` routes a model's plain ``nn.Linear`` layers through :func:`weight_first_linear` for
the duration of a ``with`` block and restores them exactly afterwards (tests/test_players.py checks it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial

PACKED_ROWS = 64  # over more rows every layer takes oneDNN's product over its packed weight ...
PACKED_MIN_WEIGHTS = (
    800_000  # ... over fewer, only weights of at least this many elements (see PackedWeights)
)
WEIGHT_FIRST_ROWS = 256  # without a packed weight, layers over at most this many rows compute W @ xᵀ


def weight_first_linear(module, x, packed=None):
    """``module(x)`` for an ``nn.Linear``: oneDNN's product with ``packed`` (the weight in oneDNN's layout,
    see :class:`PackedWeights`) over more than ``PACKED_ROWS`` rows, and over fewer for weights of at least
    ``PACKED_MIN_WEIGHTS`` elements; otherwise ``W @ xᵀ`` (transposed back, not copied) over at most
    ``WEIGHT_FIRST_ROWS`` rows and ``nn.Linear``'s own path over more."""
    import torch

    rows = x.numel() // x.shape[-1]
    if packed is not None and (rows > PACKED_ROWS or module.weight.numel() >= PACKED_MIN_WEIGHTS):
        out = packed_product(x.reshape(-1, x.shape[-1]), packed, module.bias)
        return out.reshape(*x.shape[:-1], module.weight.shape[0])
    if rows > WEIGHT_FIRST_ROWS:
        return torch.nn.functional.linear(x, module.weight, module.bias)
    columns = x.reshape(-1, x.shape[-1]).t()
    out = (
        torch.mm(module.weight, columns)
        if module.bias is None
        else torch.addmm(module.bias[:, None], module.weight, columns)
    )
    return out.t().reshape(*x.shape[:-1], module.weight.shape[0])


def packed_product(rows, packed, bias):
    """``rows @ Wᵀ + bias`` by oneDNN, W given as its packed copy (``_reorder_linear_weight``)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


class PackedWeights:
    """The float32 linear weights of a model, copied once into oneDNN's packed layout.

    oneDNN's product over a packed weight beat MKL's on the CPUs measured (docs/benchmarks.md,
    ``bench/linear.py``): for a decoding step's few rows through the largest layers (the small ones did
    not gain, hence ``PACKED_MIN_WEIGHTS``), and over more than ``PACKED_ROWS`` rows (a prompt) through
    every layer. A copy costs memory (the size of the weights) and is made again when its weight is
    replaced or changed in place through an operation that counts versions; a fused optimiser step does not
    count them (nor does an edit through ``weight.data``), so a player made before such a step must not be
    used after it (online training makes a new player every step). Where the oneDNN operators are missing
    or disagree with ``torch.mm`` on a first check, nothing is packed.
    """

    def __init__(self):
        self._copies: dict[int, tuple[tuple, object]] = {}  # id(module) -> (weight key, packed)
        self.available: bool | None = None  # None: not checked yet

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
        if weight.dtype != torch.float32 or weight.device.type != "cpu" or self.available is False:
            return None
        key = self._key(weight)
        kept = self._copies.get(id(module))
        if kept is not None and kept[0] == key:
            return kept[1]
        if self.available is None:  # the first weight: packed once, and checked
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

    On a CPU in float32 a small model's linear layers run slower as ``x @ Wᵀ`` (what ``nn.Linear`` asks of
    MKL) than as ``W @ xᵀ`` for a decoding step's few rows (``bench/play.py`` measures it); for one row both
    are the same matrix-vector product. Where ``packs`` holds packed copies of the weights
    (:class:`PackedWeights`), oneDNN's product over them is faster still for the largest layers on a
    decoding step and for every layer over a prompt's rows (:func:`weight_first_linear` says which rows
    take which product). Layers that already carry their own ``forward`` (hooks of accelerate, adapters)
    and subclasses are left alone.
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


def packed_linears(model):
    """:func:`weight_first` with packed copies of the weights for a float32 model on a CPU (the route the
    benchmark panel and the reference pass take for their long inputs); a context that does nothing for any
    other model."""
    import torch

    weight = next(model.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return nullcontext()
    return weight_first(model, PackedWeights())
