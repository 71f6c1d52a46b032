"""The tabular twin of SPAG's loop on Kuhn poker: the loop with a policy of 12 logits instead of a model.

Kuhn poker has 12 information sets (:data:`spag.game.kuhn.exploitability.INFOSETS`), and a strategy is one
probability of the aggressive action at each. The twin keeps a logit θ per information set,
π(aggressive) = sigmoid(θ), and runs an epoch of the loop as the pipeline does:

- **play**: ``play.words`` hands, dealt as the play stage deals them (each of the six deals in turn, each
  round in a seeded order), every action sampled from the current policy at ``play.temperature``
  (sigmoid(θ / T)), written as episodes whose utterances are the canonical replies (``[bet]``);
- **reward**: those episodes through :func:`spag.rewards.build.reward_rows`, the function ``spag reward``
  runs, with the run's ``reward`` section (the payoff, winners' or both players' rows, decay, role
  weights, credit). Each row is mapped back to its information set and action;
- **train**, ``spag.method: offline-po``: :func:`spag.train.losses.offline_po_loss` against the policy that
  played (the previous epoch), with ``spag``'s KL, clip, reduction and detached advantage, on micro-batches
  of ``spag.batch_size`` rows, ``spag.grad_accum`` of them per AdamW step, ``spag.epochs_per_iteration``
  passes in a seeded random order, the learning-rate schedule and warm-up of ``spag``, gradients clipped
  at norm 1 (the trainer's default). ``spag.method: online``: GRPO as :mod:`spag.train.online` runs it on
  TRL: ``online.words`` deals a epoch, ``online.words_per_step`` a step, ``online.games_per_word`` hands
  each, every utterance a sample whose reward is its player's in the hand and whose advantage is that minus
  the mean of its (deal, player) group (``online.scale_rewards``), the KL to the epoch's start as GRPO's
  (k3, β = ``spag.kl_coeff``), the policy's log-probabilities at the sampling temperature as TRL takes them.

After every epoch the twin's strategy is its exact probabilities (temperature 1, as ``spag strategy``'s exact
way reads a model) and their exploitability, exactly.

What the twin leaves out, by construction: the language (a rule-breaking reply, the prompt's framing, and a
log-likelihood that is a mean over a reply's tokens: a twin's row is its action's log-probability), the
general SFT rows (no language to keep; ``spag.sft_coeff`` has nothing to act on) and the sharing between
information sets that a model's weights bring (a model moves J, Q and K together; the twin's 12 logits move
apart; ``card_blind`` gives the three cards of a history one update, the other limit). Its learning rate is
its own (``twin.learning_rate``): the model's moves weights, the twin's moves logits, and no rate maps one
onto the other.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from spag.config import COSINE, LINEAR, ONLINE, PAPER_KL_COEFF, Online, Reward, Settings, Spag
from spag.game.kuhn import DEALS, FOLD, ROLES, KuhnPoker, action_of, cards, reply
from spag.game.kuhn.card import KuhnSettings
from spag.game.kuhn.exploitability import INFOSETS, _over, all_figures, label, moves
from spag.game.words import sample_targets
from spag.play.environment import episode_rewards
from spag.rewards.build import reward_rows
from spag.runtime.statistics import t_interval
from spag.train.losses import offline_po_loss
from spag.train.schedules import warmup_decay_schedule

Key = tuple[str, str]  # (card, history): an information set, as a profile keys it
KEYS: tuple[Key, ...] = tuple((i.card, i.history) for i in INFOSETS)
INDEX = {key: n for n, key in enumerate(KEYS)}
FACING_A_BET = tuple(key for key in KEYS if key[1].endswith("bet"))  # call or fold
MAX_GRAD_NORM = 1.0  # the trainer's (TrainConfig.max_grad_norm)
_EDGE = 1e-6  # a probability of 0 or 1 becomes this far from it, so that its logit is finite


@dataclass(frozen=True)
class TwinLoop:
    """What the twin runs: the pipeline's settings of one run, and the twin's learning rate."""

    hands: int  # play.words: hands of self-play per epoch
    epochs: int  # SPAG epochs
    temperature: float  # play.temperature: self-play's sampling
    max_turns: int  # game.max_turns
    reward: Reward
    spag: Spag
    online: Online
    learning_rate: float  # twin.learning_rate
    card_blind: bool = False  # every update the same at J, Q and K (a diagnosis: :func:`card_blind_gradient`)

    @classmethod
    def of(cls, settings: Settings) -> TwinLoop:
        """The twin of a run's settings (a Kuhn poker params file)."""
        if settings.game.name != KuhnPoker.name:
            raise ValueError(f"game.name: the twin plays Kuhn poker, not {settings.game.name}")
        return cls(
            hands=settings.play.words,
            epochs=len(settings.spag.epochs),
            temperature=settings.play.temperature,
            max_turns=settings.game.max_turns,
            reward=settings.reward,
            spag=settings.spag,
            online=settings.online,
            learning_rate=settings.twin.learning_rate,
        )

    @property
    def kl_coeff(self) -> float:
        return PAPER_KL_COEFF[self.spag.method] if self.spag.kl_coeff is None else self.spag.kl_coeff


# ------------------------------------------------------------------------------------------ the policy


_HISTORY = {history: n for n, history in enumerate(dict.fromkeys(history for _, history in KEYS))}
_GROUP = torch.tensor([_HISTORY[history] for _, history in KEYS])  # each logit's history, its cards pooled


def card_blind_gradient(grad: torch.Tensor) -> torch.Tensor:
    """The gradient of the 12 logits with each history's three cards given their mean: the update a policy
    makes when it cannot tell J, Q and K apart (four logits, one per history, in the limit of full sharing).
    The logits' differences between cards then stay as the start had them."""
    pooled = torch.zeros(len(_HISTORY), dtype=grad.dtype).index_add_(0, _GROUP, grad)
    counts = torch.bincount(_GROUP, minlength=len(_HISTORY)).to(grad.dtype)
    return (pooled / counts)[_GROUP]


def logits_of(profile: Mapping[Key, float]) -> torch.Tensor:
    """The 12 logits of a profile (probabilities of 0 or 1 moved :data:`_EDGE` inside)."""
    p = torch.tensor([min(max(float(profile[key]), _EDGE), 1 - _EDGE) for key in KEYS], dtype=torch.float64)
    return torch.logit(p)


def profile_of(logits: torch.Tensor, temperature: float = 1.0) -> dict[Key, float]:
    """The profile the logits play at ``temperature`` (0: greedy, the likelier action always)."""
    if temperature == 0:
        return {key: float(v > 0) + 0.5 * float(v == 0) for key, v in zip(KEYS, logits.tolist())}
    return dict(zip(KEYS, torch.sigmoid(logits / temperature).tolist()))


def _logprobs(logits: torch.Tensor, index: torch.Tensor, aggressive: torch.Tensor, temperature: float = 1.0):
    """log π(action) of each row: log sigmoid(±θ / T) at its information set."""
    chosen = logits[index] / temperature
    return torch.nn.functional.logsigmoid(torch.where(aggressive, chosen, -chosen))


# ------------------------------------------------------------------------------------------ self-play


def play_hand(deal: str, policy: Mapping[Key, float], rng: random.Random, max_turns: int) -> list[str]:
    """The actions of one hand of ``deal``, each drawn from ``policy`` (at most ``2 * max_turns``)."""
    dealt = cards(deal)
    actions: tuple[str, ...] = ()
    while not _over(actions) and len(actions) < 2 * max_turns:
        aggressive, passive = moves(actions)
        bold = rng.random() < policy[(dealt[len(actions) % 2], ",".join(actions))]
        actions = (*actions, aggressive if bold else passive)
    return list(actions)


def episode(index: int, deal: str, actions: Sequence[str], max_turns: int, seed: int) -> dict:
    """A played hand as an episode record (:mod:`spag.game.episodes`): the canonical reply of each action."""
    return {
        "id": str(index),
        "target_word": deal,
        "max_turns": max_turns,
        "word_index": index,
        "seed": seed,
        "game": KuhnPoker.name,
        "history": [{"role": ROLES[i % 2], "content": reply(a)} for i, a in enumerate(actions)],
    }


def _situation(ep: Mapping, turn: int) -> tuple[Key, bool]:
    """The information set of the utterance at ``turn`` of an episode, and whether it was the aggressive action."""
    before = tuple(action_of(u["content"]) for u in ep["history"][:turn])
    key = (cards(ep["target_word"])[turn % 2], ",".join(before))
    return key, action_of(ep["history"][turn]["content"]) == moves(before)[0]


# ------------------------------------------------------------------------------------------ training


def _optimiser(logits: torch.Tensor, loop: TwinLoop, total: int):
    """AdamW at the twin's learning rate (no weight decay: the trainer's default) and ``spag``'s schedule."""
    optimiser = torch.optim.AdamW([logits], lr=loop.learning_rate, weight_decay=0.0)
    warmup = math.ceil(total * loop.spag.warmup_ratio)
    if loop.spag.lr_scheduler in (COSINE, LINEAR):
        from transformers.optimization import get_scheduler  # the Trainer's own schedules

        return optimiser, get_scheduler(
            loop.spag.lr_scheduler, optimiser, num_warmup_steps=warmup, num_training_steps=total
        )
    return optimiser, warmup_decay_schedule(optimiser, warmup, total, loop.spag.lr_scheduler)


def _step(optimiser, schedule, logits: torch.Tensor) -> None:
    torch.nn.utils.clip_grad_norm_([logits], MAX_GRAD_NORM)
    optimiser.step()
    schedule.step()
    optimiser.zero_grad()


def offline_update(
    logits: torch.Tensor,
    rows: Sequence[Mapping],
    episodes: Sequence[Mapping],
    loop: TwinLoop,
    generator: torch.Generator,
) -> int:
    """One epoch's ``offline-po`` training on ``rows`` (of ``episodes``) against the policy that played them;
    returns the optimiser steps taken."""
    if not rows:
        return 0
    situations = [_situation(episodes[int(r["episode"])], r["turn"]) for r in rows]
    index = torch.tensor([INDEX[key] for key, _ in situations])
    aggressive = torch.tensor([bold for _, bold in situations])
    rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float64)
    weights = torch.tensor([r["weight"] for r in rows], dtype=torch.float64)
    reference = _logprobs(logits.detach(), index, aggressive)
    s = loop.spag
    micro = math.ceil(len(rows) / s.batch_size)
    per_pass = max(micro // s.grad_accum + int(micro % s.grad_accum > 0), 1)
    total = math.ceil(s.epochs_per_iteration * per_pass)
    optimiser, schedule = _optimiser(logits, loop, total)
    done = 0
    while done < total:
        batches = torch.randperm(len(rows), generator=generator).split(s.batch_size)
        for start in range(0, len(batches), s.grad_accum):
            for batch in batches[start : start + s.grad_accum]:
                loss, _ = offline_po_loss(
                    _logprobs(logits, index[batch], aggressive[batch]),
                    reference[batch],
                    rewards[batch],
                    weights[batch],
                    torch.ones(len(batch), dtype=torch.bool),
                    loop.kl_coeff,
                    s.clip_range,
                    s.sft_coeff,
                    detach_advantage=s.detach_advantage,
                    reduction=s.reduction,
                )
                (loss / s.grad_accum).backward()
            _step(optimiser, schedule, logits)
            done += 1
            if done == total:
                break
    return done


def _advantages(rewards: torch.Tensor, groups: list[int], scale: str) -> torch.Tensor:
    """Each sample's reward minus its group's mean (``scale``: also divided by the group's or the batch's
    standard deviation, as TRL's ``scale_rewards`` does)."""
    group = torch.tensor(groups)
    advantages = rewards.clone()
    for g in group.unique():
        members = group == g
        advantages[members] = rewards[members] - rewards[members].mean()
        if scale == "group":
            spread = rewards[members].std() if members.sum() > 1 else torch.tensor(0.0, dtype=rewards.dtype)
            advantages[members] /= spread + 1e-4
    if scale == "batch":
        advantages /= (rewards.std() if len(rewards) > 1 else 0.0) + 1e-4
    return advantages


def online_update(logits: torch.Tensor, loop: TwinLoop, seed: int, epoch: int, rng: random.Random) -> dict:
    """One epoch of online self-play (GRPO, as :mod:`spag.train.online`): play a step's hands with the live
    policy, update, play the next. Returns the epoch's hands and the steps taken."""
    o, game = loop.online, KuhnPoker(KuhnSettings(max_turns=loop.max_turns))
    deals = sample_targets(list(DEALS), o.words, f"{seed}-{epoch}-online", repeat=True)
    per_pass = o.words // o.words_per_step
    total = math.ceil(per_pass * loop.spag.epochs_per_iteration)
    optimiser, schedule = _optimiser(logits, loop, total)
    reference = logits.detach().clone()
    played = []
    for step in range(total):
        chunk = [deals[(step % per_pass) * o.words_per_step + k] for k in range(o.words_per_step)]
        keys, bold, rewards, groups = [], [], [], []
        policy = profile_of(logits.detach(), loop.temperature)
        for d, deal in enumerate(chunk):
            for _ in range(o.games_per_word):
                ep = episode(
                    len(played), deal, play_hand(deal, policy, rng, loop.max_turns), loop.max_turns, seed
                )
                ep["outcome"] = game.judge(deal, ep["history"]).outcome
                played.append(ep)
                paid = episode_rewards(game, ep, o, loop.reward.payoff)
                for turn, utterance in enumerate(ep["history"]):
                    key, aggressive = _situation(ep, turn)
                    keys.append(INDEX[key])
                    bold.append(aggressive)
                    rewards.append(paid[utterance["role"]])
                    groups.append(2 * d + ROLES.index(utterance["role"]))
        index, aggressive = torch.tensor(keys), torch.tensor(bold)
        advantages = _advantages(torch.tensor(rewards, dtype=torch.float64), groups, o.scale_rewards)
        logp = _logprobs(logits, index, aggressive, loop.temperature)
        ref = _logprobs(reference, index, aggressive, loop.temperature)
        kl = torch.exp(ref - logp) - (ref - logp) - 1  # GRPO's k3 estimate of KL(π ‖ π_ref)
        loss = (-advantages * torch.exp(logp - logp.detach()) + loop.kl_coeff * kl).mean()
        loss.backward()
        _step(optimiser, schedule, logits)
    return {"hands": played, "steps": total}


# ------------------------------------------------------------------------------------------ the loop


def _point(epoch: int, logits: torch.Tensor, **extra) -> dict:
    profile = profile_of(logits.detach())
    figures = all_figures(profile)
    return {
        "epoch": epoch,
        "exploitability": figures["chips"]["exploitability"],
        "wins_exploitability": figures["wins"]["exploitability"],
        "probabilities": {label(i): profile[(i.card, i.history)] for i in INFOSETS},
        **extra,
    }


def run_twin(start: Mapping[Key, float], loop: TwinLoop, seed: int) -> list[dict]:
    """The twin from the profile ``start``: one point per checkpoint, the start (epoch 0) then every epoch,
    each with its chips exploitability (``wins_exploitability`` too), its 12 probabilities, and for epochs the
    hands played, the folds among their actions and the optimiser steps."""
    game = KuhnPoker(KuhnSettings(max_turns=loop.max_turns))
    logits = logits_of(start).requires_grad_(True)
    if loop.card_blind:
        logits.register_hook(card_blind_gradient)
    generator = torch.Generator().manual_seed(seed)
    points = [_point(0, logits)]
    for epoch in range(1, loop.epochs + 1):
        rng = random.Random(f"twin-{seed}-{epoch}")
        if loop.spag.method == ONLINE:
            result = online_update(logits, loop, seed, epoch, rng)
            hands, steps = result["hands"], result["steps"]
        else:
            policy = profile_of(logits.detach(), loop.temperature)
            deals = sample_targets(list(DEALS), loop.hands, f"{seed}-{epoch}", repeat=True)
            hands = [
                episode(i, deal, play_hand(deal, policy, rng, loop.max_turns), loop.max_turns, seed)
                for i, deal in enumerate(deals)
            ]
            rows = [] if loop.spag.control else reward_rows(hands, seed, options=loop.reward, game=game)[0]
            steps = offline_update(logits, rows, hands, loop, generator)
        folds = sum(action_of(u["content"]) == FOLD for h in hands for u in h["history"])
        points.append(_point(epoch, logits, hands=len(hands), folds=folds, steps=steps))
    return points


def twin_curves(start: Mapping[Key, float], loop: TwinLoop, seeds: Sequence[int]) -> dict:
    """The twin over ``seeds``: every run's points (``runs``, by seed), and per epoch the mean exploitability
    over the seeds with its 95% t interval (``curve``: ``{epoch, mean, low, high, n}``)."""
    runs = {seed: run_twin(start, loop, seed) for seed in seeds}
    curve = [
        {"epoch": epoch, **t_interval([points[epoch]["exploitability"] for points in runs.values()])}
        for epoch in range(loop.epochs + 1)
    ]
    return {"runs": runs, "curve": curve}
