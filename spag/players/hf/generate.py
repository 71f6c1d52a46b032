"""The hf backend's second decoder (``decoder: generate``): transformers' own ``model.generate`` with a static
key/value cache, for a GPU.

With a static cache transformers compiles the decode step (torch.compile's "reduce-overhead" mode), so on a
GPU each step is replayed as a CUDA graph; on a CPU it runs eagerly. A game keeps its own seed: the counter
sampler (:class:`spag.players.hf.sampling.CounterSampler`, whose noise is a hash of the row's seed, its step
and the token id) draws each row's token inside a logits processor, which leaves that token alone for
``generate``'s greedy pick. So from the same logits a row draws what the engine with the counter sampler draws,
whatever rows share its batch.

Shapes are rounded up, so that the compiled step serves many calls: the rows to a multiple of
:data:`ROW_STEP` (the extra rows repeat the first and are dropped), the cache to a multiple of
:data:`CACHE_STEP` tokens. A reply ends where the engine's would: at an end-of-turn token, at a stop string or
pattern, or at ``max_new_tokens``; it is cut from what ``generate`` returns, once per call. Stop strings also
end a row inside ``generate`` (transformers' ``StopStringCriteria``, built once per player and stop strings:
it tabulates the whole vocabulary), never before the engine would.
"""

from __future__ import annotations

from spag.players.base import FINISH_LENGTH, FINISH_STOP
from spag.players.hf.sampling import CounterSampler

ROW_STEP = 8
CACHE_STEP = 256


def rounded_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _logits_processor_class():
    import torch
    from transformers import LogitsProcessor

    class CounterDraws(LogitsProcessor):
        """The counter sampler (:class:`~spag.players.hf.sampling.CounterSampler`) as a logits processor: each
        step it draws every row's token from the logits given (the end of turn suppressed before
        ``min_new_tokens``) and leaves that token alone finite, so that ``generate``'s greedy pick is the
        sampler's draw. Every row draws at every step, so a row's n-th draw is its n-th token, as in the
        engine's loop. ``prompt_width``: the length of the padded prompts (the step is what comes after)."""

        def __init__(self, sampler, rows: int, prompt_width: int, min_new_tokens: int):
            self.sampler, self.rows = sampler, list(range(rows))
            self.prompt_width, self.min_new_tokens = prompt_width, min_new_tokens

        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - self.prompt_width
            picks = self.sampler.sample(scores, self.rows, suppress_end=step < self.min_new_tokens)
            return torch.full_like(scores, float("-inf")).scatter_(1, picks[:, None], 0.0)

    return CounterDraws


def generate_replies(player, encoded, seeds, *, temperature, top_k, max_new_tokens, min_new_tokens, stop):
    """The replies of ``player`` (an :class:`~spag.players.hf.player.HFPlayer`) to the token ids ``encoded``,
    by ``model.generate`` with a static cache; ``seeds`` as the engine takes them (None: drawn)."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

    device, pad = player.device, player.tokenizer.pad_token_id
    rows = rounded_up(len(encoded), ROW_STEP)
    padded = list(encoded) + [encoded[0]] * (rows - len(encoded))
    width = max(map(len, padded))
    ids = torch.tensor([[pad] * (width - len(e)) + list(e) for e in padded], device=device)
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in padded], device=device)
    sampler = CounterSampler(
        list(seeds) + [0] * (rows - len(seeds)), temperature, top_k, device, player._end_ids
    )
    draws = _logits_processor_class()(sampler, rows, width, min_new_tokens)
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
        logits_processor=LogitsProcessorList([draws]),
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
