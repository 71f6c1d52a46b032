"""The training objectives against values worked out by hand on small fixed tensors."""

import math

import pytest
import torch

from spag.train.losses import (
    OFFLINE_PO,
    SFT,
    SFT_KL,
    completion_logprobs,
    compute_loss,
    offline_po_loss,
    sft_kl_loss,
    sft_loss,
)

BETA, EPS, ALPHA = 0.2, 0.2, 0.5


def log_softmax_row(values):
    z = math.log(sum(math.exp(v) for v in values))
    return [v - z for v in values]


# --------------------------------------------------------------------------- completion log-likelihood


def fixed_batch():
    """Two rows, 5 positions, vocabulary of 3, left-padded.

    row 0: [pad, p, p, c, c]   prompt 2 tokens, completion 2 tokens (reply + eos)
    row 1: [pad, pad, p, c, c] ... completion of 2 as well, one prompt token
    """
    logits = torch.tensor(
        [
            [[9.0, -3.0, 4.0], [0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [0.5, 0.5, 2.0], [7.0, 7.0, 7.0]],
            [[5.0, 5.0, -5.0], [3.0, 1.0, 2.0], [2.0, 0.0, 1.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0]],
        ]
    )
    input_ids = torch.tensor([[2, 0, 1, 0, 2], [2, 2, 1, 2, 1]])
    completion_mask = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 1, 1]])
    return logits, input_ids, completion_mask


def test_completion_logprobs_by_hand():
    logits, ids, mask = fixed_batch()
    # row 0: token at 3 (id 0) from logits at 2; token at 4 (id 2) from logits at 3
    row0 = (log_softmax_row([1.0, 0.0, 0.0])[0] + log_softmax_row([0.5, 0.5, 2.0])[2]) / 2
    # row 1: token at 3 (id 2) from logits at 2; token at 4 (id 1) from logits at 3
    row1 = (log_softmax_row([2.0, 0.0, 1.0])[2] + log_softmax_row([0.0, 3.0, 0.0])[1]) / 2
    got = completion_logprobs(logits, ids, mask)
    assert got.tolist() == pytest.approx([row0, row1], abs=1e-6)


def test_prompt_and_padding_never_enter_the_loglikelihood():
    logits, ids, mask = fixed_batch()
    before = completion_logprobs(logits, ids, mask)
    # Change everything at prompt/pad positions that could matter: ids and the logits that predict them.
    logits2, ids2 = logits.clone(), ids.clone()
    logits2[:, :2] = torch.randn(2, 2, 3) * 10
    ids2[:, :3] = torch.tensor([[1, 2, 0], [0, 1, 2]])
    after = completion_logprobs(logits2, ids2, mask)
    assert torch.allclose(before, after)
    # A longer completion mask does change it: the mask is what decides.
    longer = mask.clone()
    longer[0, 2] = 1
    assert not torch.allclose(completion_logprobs(logits, ids, longer)[0], before[0])


def test_logits_of_the_last_positions_only_give_the_same_result():
    logits, ids, mask = fixed_batch()
    full = completion_logprobs(logits, ids, mask)
    kept = completion_logprobs(logits[:, -3:], ids, mask)  # longest completion (2) + 1
    assert torch.allclose(full, kept)


# --------------------------------------------------------------------------------------- imitation


def test_sft_loss_is_weighted_sum_over_number_of_rows():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    weights = torch.tensor([1.0, 3.0])
    loss, stats = sft_loss(logp, weights)
    assert loss.item() == pytest.approx((1 * 1 + 3 * 2) / 2)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.5, -1.5])
    assert stats["nll"].item() == pytest.approx(1.5)


def test_sft_kl_loss_by_hand():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    ref = torch.tensor([-1.5, -1.0])
    weights = torch.tensor([1.0, 2.0])
    loss, stats = sft_kl_loss(logp, ref, weights, kl_coeff=0.1)
    row0 = 1.0 + 0.1 * math.exp(-1.0) * 0.5
    row1 = 2.0 + 0.1 * math.exp(-2.0) * -1.0
    assert loss.item() == pytest.approx((1.0 * row0 + 2.0 * row1) / 2, rel=1e-6)
    assert stats["kl"].item() == pytest.approx((0.5 - 1.0) / 2)
    loss.backward()
    # d/dlogp [−l + β e^l (l − l_ref)] = −1 + β e^l (l − l_ref + 1), times w / N
    expected = [w / 2 * (-1 + 0.1 * math.exp(l) * (l - r + 1)) for w, l, r in ((1, -1, -1.5), (2, -2, -1))]
    assert logp.grad.tolist() == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------------------ offline policy opt.


def po_rows():
    """Four game rows that exercise each branch of the clipped objective, and two sft rows."""
    log_ratios = [math.log(1.5), math.log(0.5), math.log(1.1), math.log(1.5)]
    rewards = [1.0, -1.0, 0.5, -1.0]
    ref = torch.tensor([-2.0, -1.0, -3.0, -1.5, -0.7, -1.2])
    logp = ref + torch.tensor(log_ratios + [0.3, -0.4])
    return {
        "logp": logp.clone().requires_grad_(True),
        "ref_logp": ref,
        "rewards": torch.tensor(rewards + [0.0, 0.0]),
        "weights": torch.tensor([1.0, 2.0, 1.0, 0.5, 1.0, 3.0]),
        "is_game": torch.tensor([True, True, True, True, False, False]),
    }


def expected_po_terms(rows):
    """Per game row: (loss, d loss / d logp) worked out branch by branch, advantage held constant."""
    out = []
    for lr, reward in zip(
        [math.log(1.5), math.log(0.5), math.log(1.1), math.log(1.5)], [1.0, -1.0, 0.5, -1.0]
    ):
        r = math.exp(lr)
        a = reward - BETA * lr
        clipped = min(max(r, 1 - EPS), 1 + EPS)
        if r * a <= clipped * a:
            out.append((-r * a, -a * r))  # unclipped branch: gradient −A·r
        else:
            out.append((-clipped * a, 0.0))  # clip binds: no gradient
    return out


def test_offline_po_weights_reduction_by_hand():
    rows = po_rows()
    terms = expected_po_terms(rows)
    # row 0: r = 1.5 > 1.2 with A > 0 -> clipped; row 1: r = 0.5 < 0.8 with A < 0 -> clipped;
    # row 2: r = 1.1 inside -> unclipped; row 3: r = 1.5 > 1.2 but A < 0 -> unclipped (min keeps r·A).
    assert [g == 0.0 for _, g in terms] == [True, True, False, False]
    w_game = [1.0, 2.0, 1.0, 0.5]
    po = sum(w * l for w, (l, _) in zip(w_game, terms)) / sum(w_game)
    sft_logp = [-0.7 + 0.3, -1.2 - 0.4]
    nll_sft = (1.0 * -sft_logp[0] + 3.0 * -sft_logp[1]) / (1.0 + 3.0)
    loss, stats = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, reduction="weights")
    assert loss.item() == pytest.approx(po + ALPHA * nll_sft, rel=1e-5)
    assert stats["loss_po"].item() == pytest.approx(po, rel=1e-5)
    assert stats["loss_sft"].item() == pytest.approx(nll_sft, rel=1e-5)
    assert stats["clip_fraction"].item() == pytest.approx(3 / 4)  # |r − 1| > ε for rows 0, 1, 3
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.1 + 1.5) / 4, rel=1e-5)
    assert stats["kl"].item() == pytest.approx(
        (math.log(1.5) + math.log(0.5) + math.log(1.1) + math.log(1.5)) / 4, rel=1e-5
    )

    loss.backward()
    grad = rows["logp"].grad.tolist()
    expected_game = [w / sum(w_game) * g for w, (_, g) in zip(w_game, terms)]
    expected_sft = [ALPHA * -1.0 / 4.0, ALPHA * -3.0 / 4.0]
    assert grad == pytest.approx(expected_game + expected_sft, rel=1e-5, abs=1e-7)


def test_offline_po_without_detaching_the_advantage_adds_the_kl_gradient():
    rows = po_rows()
    loss, _ = offline_po_loss(
        **rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, detach_advantage=False, reduction="weights"
    )
    loss.backward()
    # unclipped row 2 (r = 1.1): d/dl [−r·A] = −r·A + β·r
    r, a = 1.1, 0.5 - BETA * math.log(1.1)
    w_game = [1.0, 2.0, 1.0, 0.5]
    assert rows["logp"].grad[2].item() == pytest.approx(1.0 / sum(w_game) * (-r * a + BETA * r), rel=1e-5)


def test_offline_po_all_game_batch_has_no_sft_term():
    rows = po_rows()
    game_only = {k: v[:4] for k, v in rows.items() if k != "logp"}
    logp = rows["logp"].detach()[:4].clone().requires_grad_(True)
    loss, stats = offline_po_loss(logp=logp, **game_only, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA)
    w_game = [1.0, 2.0, 1.0, 0.5]
    po = sum(w * l for w, (l, _) in zip(w_game, expected_po_terms(rows))) / len(w_game)
    assert loss.item() == pytest.approx(po, rel=1e-5)
    assert "loss_sft" not in stats and "loss_po" in stats


def test_offline_po_all_sft_batch_is_weighted_nll():
    logp = torch.tensor([-0.4, -1.6], requires_grad=True)
    loss, stats = offline_po_loss(
        logp=logp,
        ref_logp=torch.tensor([-0.7, -1.2]),
        rewards=torch.zeros(2),
        weights=torch.tensor([1.0, 3.0]),
        is_game=torch.tensor([False, False]),
        kl_coeff=BETA,
        clip_range=EPS,
        sft_coeff=ALPHA,
        reduction="weights",
    )
    assert loss.item() == pytest.approx(ALPHA * (1.0 * 0.4 + 3.0 * 1.6) / 4.0)
    assert set(stats) == {"loss_sft"}
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-ALPHA * 1 / 4, -ALPHA * 3 / 4])


def test_compute_loss_dispatch():
    logp = torch.tensor([-1.0, -2.0])
    batch = {
        "weight": torch.tensor([1.0, 1.0]),
        "reward": torch.tensor([1.0, 0.0]),
        "is_game": torch.tensor([True, False]),
    }
    ref = torch.tensor([-1.0, -2.0])
    assert compute_loss(SFT, logp, batch, None, 0.1, EPS, ALPHA)[0].item() == pytest.approx(1.5)
    assert compute_loss(SFT_KL, logp, batch, ref, 0.1, EPS, ALPHA)[0].item() == pytest.approx(1.5)
    # ratio 1, A = reward: game term −1, sft term α·2
    assert compute_loss(OFFLINE_PO, logp, batch, ref, BETA, EPS, ALPHA)[0].item() == pytest.approx(
        -1 + ALPHA * 2
    )
    with pytest.raises(ValueError, match="reference"):
        compute_loss(SFT_KL, logp, batch, None, 0.1, EPS, ALPHA)
    with pytest.raises(ValueError, match="unknown method"):
        compute_loss("ppo", logp, batch, ref, 0.1, EPS, ALPHA)


# ---------------------------------------------------------------- offline policy opt.: reduction "rows"


def test_offline_po_rows_reduction_by_hand():
    """The default: each term is Σ w·l over its rows divided by how many rows of that kind the batch has."""
    rows = po_rows()
    terms = expected_po_terms(rows)
    w_game, w_sft = [1.0, 2.0, 1.0, 0.5], [1.0, 3.0]
    po = sum(w * l for w, (l, _) in zip(w_game, terms)) / 4
    nll_sft = (1.0 * (0.7 - 0.3) + 3.0 * (1.2 + 0.4)) / 2
    loss, stats = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA)
    assert loss.item() == pytest.approx(po + ALPHA * nll_sft, rel=1e-5)
    assert stats["loss_po"].item() == pytest.approx(po, rel=1e-5)
    assert stats["loss_sft"].item() == pytest.approx(nll_sft, rel=1e-5)
    loss.backward()
    expected = [w / 4 * g for w, (_, g) in zip(w_game, terms)] + [ALPHA * -w / 2 for w in w_sft]
    assert rows["logp"].grad.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_offline_po_rows_reduction_keeps_the_scale_of_the_weights():
    # Doubling every weight doubles the loss under "rows"; under "weights" it changes nothing.
    rows, doubled = po_rows(), po_rows()
    doubled["weights"] = doubled["weights"] * 2
    for reduction, factor in (("rows", 2.0), ("weights", 1.0)):
        base, _ = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, reduction=reduction)
        twice, _ = offline_po_loss(
            **doubled, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, reduction=reduction
        )
        assert twice.item() == pytest.approx(factor * base.item(), rel=1e-6)


def test_offline_po_rows_reduction_with_the_advantage_attached_by_hand():
    rows = po_rows()
    loss, _ = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, detach_advantage=False)
    loss.backward()
    grad = rows["logp"].grad
    # unclipped rows 2 (r = 1.1) and 3 (r = 1.5, A < 0): d/dl [−r·A] = −r·A + β·r, times w / n_game
    for i, (r, reward, w) in {2: (1.1, 0.5, 1.0), 3: (1.5, -1.0, 0.5)}.items():
        a = reward - BETA * math.log(r)
        assert grad[i].item() == pytest.approx(w / 4 * (-r * a + BETA * r), rel=1e-5)
    # clipped rows 0 and 1: −clip(r)·A still depends on log π through A: gradient w / n · clip(r) · β
    for i, (clipped, w) in {0: (1 + EPS, 1.0), 1: (1 - EPS, 2.0)}.items():
        assert grad[i].item() == pytest.approx(w / 4 * clipped * BETA, rel=1e-5)


def test_offline_po_rows_reduction_on_an_all_sft_batch():
    logp = torch.tensor([-0.4, -1.6], requires_grad=True)
    loss, _ = offline_po_loss(
        logp=logp,
        ref_logp=torch.tensor([-0.7, -1.2]),
        rewards=torch.zeros(2),
        weights=torch.tensor([1.0, 3.0]),
        is_game=torch.tensor([False, False]),
        kl_coeff=BETA,
        clip_range=EPS,
        sft_coeff=ALPHA,
    )
    assert loss.item() == pytest.approx(ALPHA * (1.0 * 0.4 + 3.0 * 1.6) / 2)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-ALPHA * 1 / 2, -ALPHA * 3 / 2])


def original_offline_po(logp, ref_logp, rewards, weights, sft_mask, kl_coeff, clip_range, sft_coeff):
    """The original code's SPAG loss (Linear95/SPAG trainers.py), restated independently from its formula:

        ppo_i = −min(A_i·ρ_i, A_i·clip(ρ_i)),  ρ_i = exp(log π_i − log π_ref,i),  A_i = r_i − β(log π_i − log π_ref,i)
        loss  = α · Σ_i m_i·w_i·(−log π_i) / Σ m  +  Σ_i (1 − m_i)·w_i·ppo_i / Σ (1 − m)

    with m the sft mask, each term 0 when its kind is absent, and nothing detached.
    """
    m = sft_mask.to(logp.dtype)
    kl = logp - ref_logp
    rho = torch.exp(kl)
    adv = rewards - kl_coeff * kl
    ppo = -torch.minimum(adv * rho, adv * torch.clip(rho, 1 - clip_range, 1 + clip_range))
    n_game, n_sft = (1 - m).sum(), m.sum()
    sft = (-logp * m * weights).sum() / n_sft if n_sft > 0 else n_sft
    game = (ppo * (1 - m) * weights).sum() / n_game if n_game > 0 else n_game
    return sft_coeff * sft + game


@pytest.mark.parametrize("seed", range(20))
def test_offline_po_rows_attached_equals_the_original_loss_and_gradient(seed):
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 12, (1,), generator=gen))
    ref = -torch.rand(n, generator=gen, dtype=torch.float64) * 3
    logp = ref + (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5)  # ratios from 0.6 to 1.65
    rewards = torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1
    weights = torch.rand(n, generator=gen, dtype=torch.float64) * 4
    # seeds 0 and 1: an all-game and an all-sft batch; otherwise a random mix
    is_game = (
        torch.ones(n) if seed == 0 else torch.zeros(n) if seed == 1 else torch.rand(n, generator=gen) < 0.6
    )
    is_game = is_game.to(torch.bool)
    rewards = torch.where(is_game, rewards, torch.zeros_like(rewards))
    beta, eps, alpha = 0.2, 0.2, 0.5

    ours_logp = logp.clone().requires_grad_(True)
    ours, _ = offline_po_loss(
        ours_logp, ref, rewards, weights, is_game, beta, eps, alpha, reduction="rows", detach_advantage=False
    )
    ours.backward()
    theirs_logp = logp.clone().requires_grad_(True)
    theirs = original_offline_po(theirs_logp, ref, rewards, weights, ~is_game, beta, eps, alpha)
    theirs.backward()

    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-12)
    assert torch.allclose(ours_logp.grad, theirs_logp.grad, rtol=1e-12, atol=1e-12)


def six_to_one_game_rows():
    """Rows of 6 attacker-won and 1 defender-won games, with the rewards and role weights of spag.rewards.build."""
    from spag.rewards.build import role_weights, utterance_rewards

    games = [
        ("attacker", 1),
        ("attacker", 2),
        ("attacker", 3),
        ("attacker", 1),
        ("attacker", 2),
        ("attacker", 3),
        ("defender", 2),
    ]
    w_attacker, w_defender = role_weights(6, 1)
    rows = []
    for role, moves in games:
        for reward in utterance_rewards(moves, 0.8):
            rows.append((role, reward, w_attacker if role == "attacker" else w_defender))
    return rows


def expected_gradient_mass(rows, batch_size, reduction):
    """Per role, the policy-gradient weight −∂loss/∂log π summed over its rows, averaged over every batch of
    ``batch_size`` rows (all combinations: the exact expectation under uniform sampling), at π = π_ref."""
    import itertools

    mass = {"attacker": 0.0, "defender": 0.0}
    batches = list(itertools.combinations(range(len(rows)), batch_size))
    for batch in batches:
        logp = torch.full((batch_size,), -1.0, dtype=torch.float64, requires_grad=True)
        loss, _ = offline_po_loss(
            logp,
            torch.full((batch_size,), -1.0, dtype=torch.float64),
            torch.tensor([rows[i][1] for i in batch], dtype=torch.float64),
            torch.tensor([rows[i][2] for i in batch], dtype=torch.float64),
            torch.ones(batch_size, dtype=torch.bool),
            BETA,
            EPS,
            ALPHA,
            reduction=reduction,
        )
        loss.backward()
        for position, i in enumerate(batch):
            mass[rows[i][0]] -= logp.grad[position].item()
    return {role: value / len(batches) for role, value in mass.items()}


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_six_to_one_roles_each_get_half_of_the_policy_gradient_under_the_default_reduction(batch_size):
    rows = six_to_one_game_rows()
    mass = expected_gradient_mass(rows, batch_size, "rows")
    total = mass["attacker"] + mass["defender"]
    assert mass["attacker"] / total == pytest.approx(0.5, rel=1e-9)
    assert mass["defender"] / total == pytest.approx(0.5, rel=1e-9)


def test_six_to_one_weights_reduction_loses_the_role_balance_on_single_role_batches():
    # With one row per batch the role weight cancels: the defender's share falls to its share of reward, 1/7.
    mass = expected_gradient_mass(six_to_one_game_rows(), 1, "weights")
    assert mass["defender"] / (mass["attacker"] + mass["defender"]) == pytest.approx(1 / 7, rel=1e-9)


# --------------------------------------------------- micro-batches of varying size (batch_rebalance)


@pytest.mark.parametrize(
    ("method", "reduction"), [(SFT, "rows"), (SFT_KL, "rows"), (OFFLINE_PO, "rows"), (OFFLINE_PO, "weights")]
)
def test_a_steps_uneven_micro_batches_with_its_rows_give_the_loss_and_gradient_of_one_batch(
    method, reduction
):
    """Seven rows of both kinds dealt into micro-batches of 1, 2 and 4 rows (one without sft rows, as
    batch_rebalance may deal them): each divided by the step's rows (step_rows) and averaged over the three,
    as the Trainer does, they give the loss and gradient of one batch of the seven. Each micro-batch's
    own counts give another loss: the rows of the small batches would weigh more."""
    from spag.train.losses import step_rows

    generator = torch.Generator().manual_seed(0)
    logp = (-torch.rand(7, generator=generator) * 3).requires_grad_()
    batch = {
        "weight": torch.tensor([1.0, 0.5, 2.0, 1.0, 1.5, 0.25, 1.0]),
        "reward": torch.tensor([1.0, -1.0, 0.5, 0.0, 1.0, -0.5, 0.0]),
        "is_game": torch.tensor([True, True, False, True, False, True, False]),
    }
    ref_logp = logp.detach() + 0.1 * torch.randn(7, generator=generator)

    def loss_of(rows, step=None):
        part = {key: value[rows] for key, value in batch.items()}
        return compute_loss(
            method, logp[rows], part, ref_logp[rows], BETA, EPS, ALPHA, reduction=reduction, step_rows=step
        )[0]

    whole = loss_of(list(range(7)))
    (whole_grad,) = torch.autograd.grad(whole, logp)
    parts = [[3], [0, 5], [1, 2, 4, 6]]
    assert not batch["is_game"][[0, 5]].logical_not().any()  # the middle one has no sft row
    shares = step_rows([{key: value[rows] for key, value in batch.items()} for rows in parts]) / len(parts)
    split = sum(loss_of(rows, shares) for rows in parts) / len(parts)
    (split_grad,) = torch.autograd.grad(split, logp)
    assert split.item() == pytest.approx(whole.item(), abs=1e-6)
    assert torch.allclose(split_grad, whole_grad, atol=1e-6)
    own = sum(loss_of(rows) for rows in parts) / len(parts)
    assert abs(own.item() - whole.item()) > 1e-3
