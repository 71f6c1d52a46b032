"""Speed of the skill metrics' scoring (spag.evaluate.skill): the guess rank's and the clue rank's
log-probabilities of every candidate word after each prompt, as ``HFPlayer.continuation_logprobs``
computes them, against the plain way on the same prompts.

    python bench/skill.py [--model DIR] [--words 64] [--words-file FILE] [--rounds 2] [--vllm] [--json]

plain   each prompt run whole; its cache repeated for every candidate, every candidate's later tokens
        scored in that batch (what the project did before the shared beginning);
shared  the library: the prompts' common beginning (the defender's instructions) run once, each prompt's
        own end on top of it, and the second pass only for candidates of more than one token.
vllm    (--vllm) the vllm player's ``continuation_logprobs`` on the same model in float32: vLLM's
        log-probabilities of named tokens, a decode step per node of the candidates' token tree, the
        prompts through its prefix cache (vLLM's CPU build here).

All score the same prompts (the embedded model as defender, one clue line per word written by the
coached base model, blanked) against the same candidates; the script fails if their log-probabilities
differ by more than 1e-3 and prints the largest difference and whether the ranks agree. The sides
alternate (``--rounds``), so a machine whose speed drifts slows both alike. Target: the skill metrics of
a checkpoint well inside the default run's budget (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import argparse
import json
import time


def plain_continuation_logprobs(player, prompts, opening, continuations):
    """Each prompt whole, then every candidate's later tokens on a copy of its cache."""
    import torch
    from transformers import DynamicCache

    from spag.players.base import text_ids

    opening_ids = text_ids(player.tokenizer, opening)
    pieces = [player.tokenizer(" " + c, add_special_tokens=False)["input_ids"] for c in continuations]
    width = max(len(p) for p in pieces)
    pad = player._end_ids[0]
    tokens = torch.tensor([p + [pad] * (width - len(p)) for p in pieces])
    mask = torch.tensor([[1.0] * len(p) + [0.0] * (width - len(p)) for p in pieces])
    rows = []
    with torch.inference_mode():
        for prompt in prompts:
            cache = DynamicCache()
            ids = torch.tensor([player.encode(prompt) + opening_ids])
            first = player.model(
                input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1
            ).logits
            logp = torch.log_softmax(first[0, -1].float(), dim=-1)[tokens[:, 0]]
            if width > 1:
                cache.batch_repeat_interleave(len(pieces))
                later = torch.log_softmax(
                    player.model(
                        input_ids=tokens[:, :-1], past_key_values=cache, use_cache=True
                    ).logits.float(),
                    dim=-1,
                )
                logp = logp + (later.gather(2, tokens[:, 1:].unsqueeze(-1)).squeeze(-1) * mask[:, 1:]).sum(
                    dim=1
                )
            rows.append(logp)
    return torch.stack(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Default: the embedded model.")
    parser.add_argument("--words", type=int, default=64)
    parser.add_argument(
        "--words-file",
        default=None,
        help="Candidate words, one per line (default: spag/data/fresh_eval_words.txt).",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vllm", action="store_true", help="Also score on the vllm backend.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    from spag.game.taboo import FRESH_WORDS
    from spag.game.taboo.outcomes import ATTACKER, DEFENDER
    from spag.game.taboo.rules import PREDICTION_PHRASE
    from spag.game.taboo.skill import clue_set
    from spag.game.words import read_words
    from spag.models.embedded import cached_embedded_model
    from spag.play.engine import PlayConfig
    from spag.players import load_player

    model = args.model or str(cached_embedded_model())
    player = load_player(model, "hf", device="cpu", dtype="float32")
    words = read_words(args.words_file or FRESH_WORDS)[: args.words]
    config = PlayConfig.of(max_turns=2, temperature=1.0, max_new_tokens=40, seed=0)  # the default run's
    clues = clue_set(player, words, config, per_word=1)
    prompts = [config.prompt(DEFENDER, "", [{"role": ATTACKER, "content": c["line"]}]) for c in clues]
    sides = {"plain": plain_continuation_logprobs, "shared": type(player).continuation_logprobs}
    if args.vllm:
        scorer = load_player(model, "vllm", dtype="float32", gpu_memory_utilization=0.1)
        sides["vllm"] = lambda _, *given: scorer.continuation_logprobs(*given)
    for score in sides.values():  # each side once on a prompt, untimed: vLLM's first scoring call warms up
        score(player, prompts[:1], PREDICTION_PHRASE, words)
    seconds = dict.fromkeys(sides, 0.0)
    scores = {}
    for _ in range(args.rounds):
        for name, score in sides.items():
            start = time.perf_counter()
            scores[name] = score(player, prompts, PREDICTION_PHRASE, words)
            seconds[name] += time.perf_counter() - start
    difference = max(float((scores[name] - scores["shared"]).abs().max()) for name in sides)
    same_ranks = all(
        torch.equal(scores[name].argsort(dim=1), scores["shared"].argsort(dim=1)) for name in sides
    )
    multi = sum(len(player.tokenizer(" " + w, add_special_tokens=False)["input_ids"]) > 1 for w in words)
    result = {
        "prompts": len(prompts),
        "candidates": len(words),
        "multi_token_candidates": multi,
        "prompt_tokens": sum(len(player.encode(p)) for p in prompts) // len(prompts),
        "plain_s_per_prompt": seconds["plain"] / args.rounds / len(prompts),
        "shared_s_per_prompt": seconds["shared"] / args.rounds / len(prompts),
        "speedup": seconds["plain"] / seconds["shared"],
        **(
            {
                "vllm_s_per_prompt": seconds["vllm"] / args.rounds / len(prompts),
                "vllm_over_shared": seconds["vllm"] / seconds["shared"],
            }
            if args.vllm
            else {}
        ),
        "max_logprob_difference": difference,
        "same_ranks": same_ranks,
    }
    if difference > 1e-3:
        raise SystemExit(f"the ways differ by {difference:.2e} in a log-probability")
    if args.json:
        print(json.dumps(result, indent=1))
    print(
        f"[bench/skill] {len(prompts)} prompts (about {result['prompt_tokens']} tokens) x {len(words)} words "
        f"({multi} of several tokens): plain {result['plain_s_per_prompt']:.3f} s/prompt, shared "
        f"{result['shared_s_per_prompt']:.3f} s/prompt, {result['speedup']:.2f}x; "
        + (f"vllm {result['vllm_s_per_prompt']:.3f} s/prompt; " if args.vllm else "")
        + "largest difference "
        f"{difference:.1e}, same ranks: {same_ranks}"
    )


if __name__ == "__main__":
    main()
