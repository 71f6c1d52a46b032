"""The training objectives as pure functions of tensors: imitation learning and SPAG.

Every loss works on sequence-level log-likelihoods, one number per row::

    log π(y|x) = mean over the completion tokens (and the closing eos) of log π(token | everything before)

computed by :func:`completion_logprobs` from the model's logits. With ``w`` the row's weight, β the KL
coefficient, ε the clip range and α the SFT coefficient:

``sft``         w · (−log π)
``sft-kl``      w · [ −log π + β · π · (log π − log π_ref) ]         (imitation learning, β = 0.1)
``offline-po``  game rows:  r = exp(log π − log π_ref),   A = reward − β · (log π − log π_ref)
                            −min(r·A, clip(r, 1−ε, 1+ε)·A)           weighted mean over game rows
                sft rows:   α · (−log π)                              weighted mean over sft rows
                                                                      (SPAG, β = 0.2, ε = 0.2, α = 0.5)

In ``sft-kl``, π · (log π − log π_ref) is a one-sample estimate of KL(π ‖ π_ref) on the sequence, with π the
mean token likelihood exp(log π) as in the original code.

Reductions (why they differ):

- ``sft`` and ``sft-kl`` sum w·l over the batch and divide by the NUMBER OF ROWS, as the original code does.
  This is an unbiased estimate of the dataset average of w·l whatever the batch size, so the absolute scale
  of the weights is kept: a row of weight 2 counts twice as much as a row of weight 1 in any batch.
- ``offline-po`` has two reductions (``reduction=``):

  ``rows`` (the default, and the original code's): each term is Σ w·l over its rows divided by the NUMBER
  of rows of that kind in the batch, ``α · Σ_sft w·(−log π) / n_sft + Σ_game w·ppo / n_game``. The weights
  keep their absolute scale, so the role weights of :mod:`spag.rewards.build` do their job: on a 6:1
  attacker:defender set each role carries half of the policy-gradient mass.

  ``weights``: each term is Σ w·l / Σ w over its rows. Within a batch of one role the role weight cancels
  out, so with mostly single-role batches the role re-weighting is lost (the defender's share falls to
  roughly its share of rows). Kept as the simpler alternative to compare against.

  In both, a batch without rows of one kind contributes 0 for that term.

With micro-batches of varying size (``batch_rebalance``) a micro-batch's own counts would weigh its rows by
how many share it. There each loss is given ``step_rows`` (:func:`step_rows`: the rows and weights of each
kind over the whole optimiser step, divided by its micro-batches and processes), and every division above
takes the step's number instead of the batch's: averaged over the step's micro-batches, as the Trainer
does, the loss is the one of a single batch of all the step's rows.

Every function returns ``(loss, stats)``: a scalar tensor with gradient, and a dict of detached scalar
tensors for logging (KL, clip fraction, mean ratio, per-term losses). A statistic about game rows is only
present when the batch has game rows, and likewise for sft rows, so averaging it over batches is not
diluted by batches that had nothing to say.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from spag.config import METHODS, REDUCTIONS

SFT, SFT_KL, OFFLINE_PO = METHODS  # named once, as settings (spag.config)
ROWS, WEIGHTS = REDUCTIONS


def completion_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, completion_mask: torch.Tensor
) -> torch.Tensor:
    """Mean log-likelihood of the completion tokens of each row: ``[batch]``.

    ``logits`` may cover only the last K positions of ``input_ids`` (``[batch, K, vocab]``, as a model
    returns with ``logits_to_keep=K``); the logits at position t predict the token at t + 1.
    ``completion_mask`` is 1 on completion tokens (the reply and its eos) and 0 on prompt and padding, so
    neither prompt nor padding ever enters log π. Rows are expected to hold at least one completion token.
    """
    kept = logits.shape[1]
    input_ids = input_ids[:, -kept:]
    completion_mask = completion_mask[:, -kept:]
    targets = input_ids[:, 1:]
    mask = completion_mask[:, 1:].to(torch.bool)
    predicted = logits[:, :-1]
    # Only the completion positions go through log-softmax: prompts are long, replies short.
    token_logprobs = -F.cross_entropy(predicted[mask].float(), targets[mask], reduction="none")
    row_of_token = torch.nonzero(mask, as_tuple=True)[0]
    sums = torch.zeros(logits.shape[0], dtype=token_logprobs.dtype, device=logits.device)
    sums = sums.index_add(0, row_of_token, token_logprobs)
    counts = mask.sum(dim=1).clamp(min=1).to(sums.dtype)
    return sums / counts


def step_rows(batches) -> torch.Tensor:
    """The rows of an optimiser step's collated micro-batches: ``[rows, game rows, sft rows, Σ w of game
    rows, Σ w of sft rows]``, on the batches' device (summed there: nothing is read back to the host)."""
    game = torch.cat([batch["is_game"] for batch in batches]).to(torch.bool)
    weight = torch.cat([batch["weight"] for batch in batches]).to(torch.float64)
    return torch.stack(
        [
            torch.ones_like(weight).sum(),
            game.to(torch.float64).sum(),
            (~game).to(torch.float64).sum(),
            weight[game].sum(),
            weight[~game].sum(),
        ]
    )


def _reduce(
    values: torch.Tensor, weights: torch.Tensor, reduction: str, step: tuple | None = None
) -> torch.Tensor:
    """Σ w·v divided by the number of rows (``rows``) or by Σ w (``weights``): the batch's own, or where
    ``step`` is given, its (rows, Σ w) of this kind from the whole step (:func:`step_rows`).

    0 (still attached to the graph) when there is nothing to average.
    """
    weighted = (values * weights).sum()
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {', '.join(REDUCTIONS)}")
    if step is not None:
        total = (step[0] if reduction == ROWS else step[1]).to(weighted.dtype)
        return weighted / total.clamp(min=torch.finfo(weighted.dtype).tiny)  # no rows of the kind: Σ is 0
    if reduction == ROWS:
        return weighted / values.numel() if values.numel() else weighted * 0.0
    total = weights.sum()
    return weighted / total if values.numel() and total > 0 else weighted * 0.0


def _rows(logp: torch.Tensor, step: torch.Tensor | None):
    """What a per-row sum divides by: the batch's rows, or the step's (:func:`step_rows`)."""
    return logp.numel() if step is None else step[0].to(logp.dtype)


def sft_loss(
    logp: torch.Tensor, weights: torch.Tensor, step_rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted negative log-likelihood: Σ w·(−log π) / number of rows."""
    loss = (weights * -logp).sum() / _rows(logp, step_rows)
    stats = {"nll": (-logp).mean().detach()}
    return loss, stats


def sft_kl_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    weights: torch.Tensor,
    kl_coeff: float,
    step_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Imitation learning: Σ w·[−log π + β · π · (log π − log π_ref)] / number of rows."""
    log_ratio = logp - ref_logp
    kl_term = logp.exp() * log_ratio
    per_row = -logp + kl_coeff * kl_term
    loss = (weights * per_row).sum() / _rows(logp, step_rows)
    stats = {
        "nll": (-logp).mean().detach(),
        "kl": log_ratio.mean().detach(),
        "kl_term": kl_term.mean().detach(),
    }
    return loss, stats


def offline_po_loss(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    rewards: torch.Tensor,
    weights: torch.Tensor,
    is_game: torch.Tensor,
    kl_coeff: float,
    clip_range: float,
    sft_coeff: float,
    detach_advantage: bool = True,
    reduction: str = ROWS,
    step_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SPAG's offline policy optimisation with the SFT term on general instruction rows.

    ``is_game`` is a boolean mask: True for game rows (reward from self-play), False for sft rows.
    ``reduction`` is ``rows`` (Σ w·l / n per kind, the original's) or ``weights`` (Σ w·l / Σ w per kind).

    The advantage A = reward − β·(log π − log π_ref) is treated as a constant with respect to the
    gradient (``detach_advantage=True``, PPO-style): the KL penalty lowers the advantage of rows that drift
    from the reference, and the gradient is −A·∇r on the unclipped branch and 0 where the clip binds. The
    original code left log π attached inside A, which adds β·r·∇log π to the gradient; pass
    ``detach_advantage=False`` to reproduce that.
    """
    game = is_game.to(torch.bool)
    sft = ~game
    stats: dict[str, torch.Tensor] = {}

    g_logp, g_ref, g_w = logp[game], ref_logp[game], weights[game]
    log_ratio = g_logp - g_ref
    ratio = log_ratio.exp()
    advantage = rewards[game] - kl_coeff * log_ratio
    if detach_advantage:
        advantage = advantage.detach()
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    po_per_row = -torch.minimum(ratio * advantage, clipped * advantage)
    game_step = sft_step = None
    if step_rows is not None:
        game_step, sft_step = (step_rows[1], step_rows[3]), (step_rows[2], step_rows[4])
    po_term = _reduce(po_per_row, g_w, reduction, game_step)

    s_nll = -logp[sft]
    sft_term = _reduce(s_nll, weights[sft], reduction, sft_step)

    loss = po_term + sft_coeff * sft_term

    if game.any():
        stats["loss_po"] = po_term.detach()
        stats["kl"] = log_ratio.mean().detach()
        stats["ratio_mean"] = ratio.mean().detach()
        stats["clip_fraction"] = ((ratio - 1.0).abs() > clip_range).float().mean().detach()
        stats["advantage_mean"] = advantage.mean().detach()
    if sft.any():
        stats["loss_sft"] = sft_term.detach()
    return loss, stats


def compute_loss(
    method: str,
    logp: torch.Tensor,
    batch: dict[str, torch.Tensor],
    ref_logp: torch.Tensor | None,
    kl_coeff: float,
    clip_range: float,
    sft_coeff: float,
    detach_advantage: bool = True,
    reduction: str = ROWS,
    step_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch on ``method`` with the per-row tensors of a collated batch (weight, reward, is_game);
    ``step_rows``: divide by the whole step's rows (:func:`step_rows`), not the batch's."""
    weights = batch["weight"].to(logp.dtype)
    if method == SFT:
        return sft_loss(logp, weights, step_rows)
    if ref_logp is None:
        raise ValueError(f"method {method!r} needs reference log-probs")
    ref_logp = ref_logp.to(logp.dtype)
    if method == SFT_KL:
        return sft_kl_loss(logp, ref_logp, weights, kl_coeff, step_rows)
    if method == OFFLINE_PO:
        return offline_po_loss(
            logp,
            ref_logp,
            batch["reward"].to(logp.dtype),
            weights,
            batch["is_game"],
            kl_coeff,
            clip_range,
            sft_coeff,
            detach_advantage=detach_advantage,
            reduction=reduction,
            step_rows=step_rows,
        )
    raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
