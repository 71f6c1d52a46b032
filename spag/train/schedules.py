"""Learning-rate schedules beyond the HF Trainer's own.

``cosine`` and ``linear`` are the HF Trainer's (warm-up over ``warmup_ratio`` of the steps, then a cosine
or a straight line down to 0). ``warmup_decay`` and ``warmup_decay_ds013`` are DeepSpeed's ``WarmupDecayLR``,
which the original code actually ran: its DeepSpeed config carried that scheduler, which takes precedence
over the Trainer's ``--lr_scheduler_type cosine``. With the values the HF integration fills in (minimum 0,
maximum the learning rate, W = the warm-up steps, T = the training steps) and DeepSpeed's default warm-up
type (logarithmic; the original did not set another), the scheduler's factor on the learning rate at its
iteration i is

    log(i + 1) / log(W)                 for i < W       (0 at i = 0, 1 at i = W − 1)
    max(0, (T − i) / max(1, T − W))     afterwards      (a straight line down to 0 at i = T)

DeepSpeed steps the scheduler after each optimiser step, so optimiser step k (1, 2, ...) runs at the factor
of i = k − 2 for k >= 2. What the first step runs at depends on the DeepSpeed version:

- ``warmup_decay``: DeepSpeed 0.15.3 and later set the rate at the scheduler's creation, to the minimum
  (factor 0): the first two steps run at rate 0.
- ``warmup_decay_ds013``: the original pinned DeepSpeed 0.13.1, whose scheduler did not touch the rate at
  creation, so the first step ran at the optimiser's own rate, the full learning rate; the second at 0.
  (DeepSpeed's commit 85b7469, "Add first Step in LR Schedulers", #6597, first released in 0.15.3,
  changed this.)

With W = 1 there is no warm-up (DeepSpeed itself would divide by log 1 = 0): the factor is 1 until the decay.
"""

from __future__ import annotations

import math

from spag.config import WARMUP_DECAY, WARMUP_DECAY_DS013

DEEPSPEED_SCHEDULES = (WARMUP_DECAY, WARMUP_DECAY_DS013)


def warmup_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """The factor of DeepSpeed's WarmupDecayLR (logarithmic warm-up) at its iteration ``step``."""
    if step < warmup_steps:
        return math.log(step + 1) / math.log(warmup_steps) if warmup_steps > 1 else 1.0
    return max(0.0, (total_steps - step) / max(1.0, total_steps - warmup_steps))


def step_factor(schedule: str, done: int, warmup_steps: int, total_steps: int) -> float:
    """The factor the optimiser step after ``done`` steps runs at, under ``schedule`` (a DeepSpeed one)."""
    if done == 0:  # before DeepSpeed has stepped its scheduler
        return 1.0 if schedule == WARMUP_DECAY_DS013 else 0.0
    return warmup_decay_factor(done - 1, warmup_steps, total_steps)


def warmup_decay_schedule(optimizer, warmup_steps: int, total_steps: int, schedule: str = WARMUP_DECAY):
    """A torch LambdaLR whose step k runs at :func:`step_factor` of ``schedule`` after k − 1 steps."""
    from torch.optim.lr_scheduler import LambdaLR

    if schedule not in DEEPSPEED_SCHEDULES:
        raise ValueError(f"not a DeepSpeed schedule: {schedule!r}")
    return LambdaLR(optimizer, lambda done: step_factor(schedule, done, warmup_steps, total_steps))
