"""Learning-rate schedules beyond the HF Trainer's own.

``cosine`` and ``linear`` are the HF Trainer's (warm-up over ``warmup_ratio`` of the steps, then a cosine
or a straight line down to 0). ``warmup_decay`` is what the original code actually ran: its DeepSpeed
config carried a ``WarmupDecayLR`` scheduler, which takes precedence over the Trainer's
``--lr_scheduler_type cosine``. With the values the HF integration fills in (minimum 0, maximum the
learning rate, W = the warm-up steps, T = the training steps) and DeepSpeed's default warm-up type
(logarithmic; the original did not set another), the factor on the learning rate after s optimiser steps is

    log(s + 1) / log(W)                 for s < W       (0 at the first step, 1 at s = W − 1)
    max(0, (T − s) / max(1, T − W))     afterwards      (a straight line down to 0 at s = T)

With W = 1 there is no warm-up: the first step runs at the full rate (DeepSpeed itself would divide by
log 1 = 0). Optimiser step k (1, 2, ...) runs at the factor of s = k − 1, so the first step's rate is 0.
"""

from __future__ import annotations

import math

COSINE = "cosine"
LINEAR = "linear"
WARMUP_DECAY = "warmup_decay"
LR_SCHEDULERS = (COSINE, LINEAR, WARMUP_DECAY)


def warmup_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """The learning-rate factor of DeepSpeed's WarmupDecayLR (logarithmic warm-up) after ``step`` steps."""
    if step < warmup_steps:
        return math.log(step + 1) / math.log(warmup_steps) if warmup_steps > 1 else 1.0
    return max(0.0, (total_steps - step) / max(1.0, total_steps - warmup_steps))


def warmup_decay_schedule(optimizer, warmup_steps: int, total_steps: int):
    """A torch LambdaLR that follows :func:`warmup_decay_factor`."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, lambda step: warmup_decay_factor(step, warmup_steps, total_steps))
