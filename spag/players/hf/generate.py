"""The hf backend's second decoder (``decoder: generate``): transformers' own ``model.generate`` with a static
key/value cache, for a GPU.

With a static cache transformers compiles the decode step (torch.compile's "reduce-overhead" mode), so on a
GPU each step is replayed as a CUDA graph; on a CPU it runs eagerly. A game keeps its own seed: the counter
sampler's noise (:func:`spag.players.hf.sampling.counter_uniform`, a hash of the row's seed, its step and the
token id) is added to the logits by a logits processor (:class:`CounterNoise`) and ``generate`` picks greedily,
which is the Gumbel-max rule the counter sampler draws by. So from the same logits a row draws what the engine
with the counter sampler draws, whatever rows share its batch.

Shapes are rounded up, so that the compiled step serves many calls: the rows to a multiple of
:data:`ROW_STEP` (the extra rows repeat the first and are dropped), the cache to a multiple of
:data:`CACHE_STEP` tokens. A reply ends where the engine's would: at an end-of-turn token, at a stop string or
pattern, or at ``max_new_tokens``; it is cut from what ``generate`` returns, once per call. Stop strings also
end a row inside ``generate`` (transformers' ``StopStringCriteria``, built once per player and stop strings:
it tabulates the whole vocabulary), never before the engine would.
"""

from __future__ import annotations

import os

from spag.players.base import FINISH_LENGTH, FINISH_STOP
from spag.players.hf.sampling import counter_uniform

ROW_STEP = 8
CACHE_STEP = 256


def rounded_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _logits_processor_class():
    from transformers import LogitsProcessor

    class CounterNoise(LogitsProcessor):
        """The counter sampler as a logits processor: the end of turn suppressed before ``min_new_tokens``,
        the logits over the temperature, the top k kept, and each kept token's Gumbel noise added (float64),
        so that a greedy pick is the counter sampler's draw. At temperature 0 the logits stay as they are
        (greedy). ``prompt_width``: the length of the padded prompts (the step is what comes after)."""

        def __init__(
            self, seeds, prompt_width: int, temperature: float, top_k: int, end_index, min_new_tokens
        ):
            self.seeds, self.prompt_width = seeds[:, None], prompt_width
            self.temperature, self.top_k = temperature, top_k
            self.end_index, self.min_new_tokens = end_index, min_new_tokens

        def __call__(self, input_ids, scores):
            import torch

            step = input_ids.shape[1] - self.prompt_width
            logits = scores.float()
            if step < self.min_new_tokens and len(self.end_index):
                logits = logits.index_fill(1, self.end_index, float("-inf"))
            if self.temperature <= 0:
                return logits
            logits = logits / self.temperature
            if self.top_k and self.top_k < logits.shape[-1]:
                values, tokens = logits.topk(self.top_k, dim=-1)
            else:
                values, tokens = logits, torch.arange(logits.shape[-1], device=logits.device)[None]
            noise = counter_uniform(self.seeds, torch.full_like(self.seeds, step), tokens)
            drawn = values.double() - torch.log(-torch.log(noise))
            out = torch.full(logits.shape, float("-inf"), dtype=torch.float64, device=logits.device)
            return out.scatter(1, tokens.expand_as(values), drawn)

    return CounterNoise


def generate_replies(player, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
    """The replies of ``player`` (an :class:`~spag.players.hf.player.HFPlayer`) to the token ids ``encoded``,
    by ``model.generate`` with a static cache; ``seeds`` as the engine takes them (None: drawn)."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

    device, pad = player.device, player.tokenizer.pad_token_id
    rows = rounded_up(len(encoded), ROW_STEP)
    padded = list(encoded) + [encoded[0]] * (rows - len(encoded))
    drawn = [int(s) if s is not None else int.from_bytes(os.urandom(7), "little") for s in seeds]
    drawn += [0] * (rows - len(drawn))
    width = max(map(len, padded))
    ids = torch.tensor([[pad] * (width - len(e)) + list(e) for e in padded], device=device)
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in padded], device=device)
    end_index = torch.tensor(player._end_ids, dtype=torch.long, device=device)
    noise = _logits_processor_class()(
        torch.tensor(drawn, dtype=torch.long, device=device),
        width,
        temperature,
        top_k,
        end_index,
        min_new_tokens,
    )
    cache = player._static_cache(rows, rounded_up(width + max_new_tokens, CACHE_STEP))
    kwargs = {}
    if stop.strings:
        kwargs["stopping_criteria"] = StoppingCriteriaList([player._stop_criteria(stop.strings)])
    # Every setting that changes the logits given, so that the model's own generation_config (Qwen's has a
    # repetition penalty) adds nothing the engine does not do.
    settings = GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=False,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=player._end_ids,
        pad_token_id=pad,
    )
    out = player.model.generate(
        input_ids=ids,
        attention_mask=mask,
        past_key_values=cache,
        generation_config=settings,
        logits_processor=LogitsProcessorList([noise]),
        **kwargs,
    )
    generated = out[: len(encoded), width:].tolist()  # the one read of the call
    player.counters["prompt_tokens"] += sum(map(len, encoded))
    replies = []
    for tokens in generated:
        kept, finish = [], FINISH_LENGTH
        for token in tokens:  # the engine's rule, token by token
            if token in player._end_ids:
                finish = FINISH_STOP
                break
            kept.append(token)
            if player._stopped_by_text(kept, stop):
                finish = FINISH_STOP
                break
            if len(kept) >= max_new_tokens:
                break
        replies.append(player._finish(kept, finish, stop))
    return replies
