"""lm-eval's HF model with each question encoded once for all its answer choices.

A multiple-choice task asks for the log-likelihood of every choice after the same context (the question).
lm-eval's ``HFLM`` runs the model over ``context + choice`` once per choice, so a four-choice HellaSwag item
encodes its 60-token context four times and computes the vocabulary's log-softmax at every position.
:class:`SharedPrefixLM` runs the context once (its keys and values kept), then the choices on top of it
in groups of similar length (:func:`spag.models.batching.length_groups`: HellaSwag's endings differ by tens
of tokens, and padding costs as much as a token on a CPU), and takes the log-softmax only where a choice's
tokens are scored. The sums are lm-eval's up to float rounding (tests/test_benchmark.py compares both on a
tiny model, bench/benchmark.py on real items); on the laptop panel the model does about half the token work.

On a CPU in float32 the linear layers take oneDNN's product over packed copies of their weights, as the
hf player's do (:func:`spag.players.hf.linear.weight_first`; docs/benchmarks.md has the time it saves).

Every request it cannot share this way (a context of one token, a context and choice longer than the
model's window, a non-causal model) goes through ``HFLM`` unchanged.
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext

from lm_eval.models.huggingface import HFLM
from tqdm.auto import tqdm

from spag.models.batching import length_groups
from spag.players.hf.linear import packed_linears

DEFAULT_ITEMS_PER_BATCH = 16


class SharedPrefixLM(HFLM):
    """``HFLM`` whose ``loglikelihood`` encodes each distinct context once per batch of contexts."""

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
        import torch

        if self.backend != "causal":
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        results: list = [None] * len(requests)
        contexts: dict[tuple, list[int]] = {}
        plain = []
        for i, (_, context, continuation) in enumerate(requests):
            if len(context) < 2 or len(context) + len(continuation) > self.max_length + 1:
                plain.append(i)
            else:
                contexts.setdefault(tuple(context), []).append(i)
        if plain:
            for i, answer in zip(
                plain,
                super()._loglikelihood_tokens([requests[i] for i in plain], disable_tqdm, override_bs),
                strict=True,
            ):
                results[i] = answer
        # Longest contexts first (as HFLM: time estimates are upper bounds), similar lengths batched together.
        groups = sorted(contexts.items(), key=lambda kv: -len(kv[0]))
        size = (
            self.batch_size
            if isinstance(self.batch_size, int) and self.batch_size > 0
            else DEFAULT_ITEMS_PER_BATCH
        )
        keep_arg = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        bar = tqdm(
            total=len(requests) - len(plain),
            disable=disable_tqdm or self.rank != 0,
            desc="Running loglikelihood requests (shared contexts)",
        )
        linears = packed_linears(self.model) if self.mixed_precision_dtype is None else nullcontext()
        with (
            torch.no_grad(),
            torch.autocast(
                device_type=self.device.type,
                dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None,
            ),
            linears,
        ):
            for start in range(0, len(groups), size):
                chunk = groups[start : start + size]
                for i, answer in self._score_chunk(requests, chunk, keep_arg):
                    results[i] = answer
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)
                    bar.update(1)
        bar.close()
        return results

    def _score_chunk(self, requests, chunk, keep_arg: bool):
        """(request index, (log-likelihood, greedy)) for every request of ``chunk`` (contexts with their
        requests): the contexts but their last token in one pass, then every continuation, led by its
        context's last token, attending to its own context's keys and values."""
        import torch
        import torch.nn.functional as F
        from transformers import DynamicCache

        device = self.device
        prefix_lengths = [len(context) - 1 for context, _ in chunk]
        width = max(prefix_lengths)
        prefix = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (context, _) in enumerate(chunk):
            prefix[row, : len(context) - 1] = torch.tensor(context[:-1])
        # Right-padded: a causal model's real positions never see the padding that follows them.
        out = self.model(prefix.to(device), use_cache=True, **({"logits_to_keep": 1} if keep_arg else {}))
        cache = out.past_key_values
        owners, rows = [], []
        for row, (context, indices) in enumerate(chunk):
            for i in indices:
                owners.append(row)
                rows.append(i)
        # The continuations in groups of similar length, each padded to its own longest: choices differ
        # in length (HellaSwag's endings by tens of tokens), and on a CPU padding costs as much as a token.
        lengths = [len(requests[i][2]) for i in rows]
        for group in length_groups(lengths):
            length = max(lengths[g] for g in group)
            tokens = torch.zeros((len(group), length), dtype=torch.long)
            mask = torch.zeros((len(group), width + length), dtype=torch.long)
            positions = torch.zeros((len(group), length), dtype=torch.long)
            for r, g in enumerate(group):
                owner, continuation = owners[g], requests[rows[g]][2]
                sequence = [chunk[owner][0][-1], *continuation[:-1]]
                tokens[r, : len(sequence)] = torch.tensor(sequence)
                mask[r, : prefix_lengths[owner]] = 1  # its own context, not the padding after it
                mask[r, width:] = 1
                positions[r] = prefix_lengths[owner] + torch.arange(length)
            index = torch.tensor([owners[g] for g in group], device=device)
            group_cache = DynamicCache()
            for layer, kept in enumerate(cache.layers):
                group_cache.update(kept.keys[index], kept.values[index], layer)
            logits = self.model(
                tokens.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                past_key_values=group_cache,
                use_cache=False,
            ).logits
            logprobs = F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)
            for r, g in enumerate(group):
                continuation = requests[rows[g]][2]
                scored = logprobs[r, : len(continuation)]
                target = torch.tensor(continuation, device=device)
                total = float(scored.gather(-1, target[:, None]).sum())
                yield rows[g], (total, bool((scored.argmax(dim=-1) == target).all()))
            del group_cache, logits, logprobs
