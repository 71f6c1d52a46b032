"""The transformers backend: batched generation on CPU or GPU, built for self-play's shape of work.

Self-play asks one model for many short replies to long prompts. Every prompt starts with the same
rules text, and a game's prompt for its next turn repeats its previous prompt up to the end of the
conversation so far. ``model.generate`` spends most of its time on that shape encoding the same text
again, padding, and decoding rows that already finished. This backend runs its own loop instead:

* **prefix reuse** (what vLLM calls automatic prefix caching): the keys and values of recent prompts
  are kept (within a memory budget, least recently used out first), and each new prompt encodes only
  what follows its longest common token prefix with a kept one. The prefix shared by a whole batch
  (chat header, rules) is encoded once, at batch 1, before the rows that need it;
* prompts are encoded in groups of similar remaining length, every prompt ending in the same slot
  (padding between the shared prefix and a row's own tokens), with explicit position ids and masks,
  so a padded row computes exactly what it would compute alone;
* keys and values live in preallocated buffers written in place: no concatenation per step;
* the shared prefix sits in the same first slots of every row, so a decoding step reads its keys and
  values once for the whole batch rather than once per row (see :func:`~spag.players.hf.attention.decode_attention`);
* on CPU, a decoding step's linear layers compute ``W @ xᵀ`` rather than ``x @ Wᵀ``: the same
  product, which MKL runs much faster when x has a few rows (see :func:`~spag.players.hf.linear.weight_first`);
* a row stops costing compute once it ends its turn: finished rows are dropped from the batch and
  from the buffers as they accumulate;
* each row samples from its own seed, so a game's reply does not depend on which other games share its
  batch: a generator per row (``sampler: per-row``, a CPU's default), or every row in one call with
  counter-based noise (``sampler: counter``, a GPU's), whose loop keeps the tokens on the device and reads
  them back once every few steps for the stop strings and the finished rows, not once a step.

``decoder: generate`` leaves the loop to transformers' own ``model.generate`` with a static cache, which
transformers compiles on a GPU (each decode step a CUDA graph), with the counter sampler's noise as a logits
processor: the same games as the loop with the counter sampler, without its prefix reuse (:mod:`.generate`).

Models whose attention is not plain causal self-attention in every layer (sliding windows, state
space layers) go through ``model.generate`` one prompt at a time instead: correct, slower. So does
every model under a transformers release that lacks a piece the loop builds on
(:func:`~spag.players.hf.compat.missing_fast_path_api`); CI runs the player tests under the transformers of both locks.

The package by concern: :mod:`.player` (the player and its decoding loop), :mod:`.prefix_store` (kept
prompt keys/values and the in-place cache layer), :mod:`.attention` (decode attention), :mod:`.linear`
(CPU linear layers for decoding steps), :mod:`.sampling` (seeded per-row sampling), :mod:`.ledger` (the
counter sampler's tokens on the device, read back every few steps), :mod:`.generate` (``decoder: generate``)
and :mod:`.compat`
(which models and transformers releases the loop serves).
"""

from spag.players.hf.compat import missing_fast_path_api, supports_fast_path
from spag.players.hf.player import HFPlayer

__all__ = ["HFPlayer", "missing_fast_path_api", "supports_fast_path"]
