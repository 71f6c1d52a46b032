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
    for lr, reward in zip([math.log(1.5), math.log(0.5), math.log(1.1), math.log(1.5)], [1.0, -1.0, 0.5, -1.0]):
        r = math.exp(lr)
        a = reward - BETA * lr
        clipped = min(max(r, 1 - EPS), 1 + EPS)
        if r * a <= clipped * a:
            out.append((-r * a, -a * r))  # unclipped branch: gradient −A·r
        else:
            out.append((-clipped * a, 0.0))  # clip binds: no gradient
    return out


def test_offline_po_branches_by_hand():
    rows = po_rows()
    terms = expected_po_terms(rows)
    # row 0: r = 1.5 > 1.2 with A > 0 -> clipped; row 1: r = 0.5 < 0.8 with A < 0 -> clipped;
    # row 2: r = 1.1 inside -> unclipped; row 3: r = 1.5 > 1.2 but A < 0 -> unclipped (min keeps r·A).
    assert [g == 0.0 for _, g in terms] == [True, True, False, False]
    w_game = [1.0, 2.0, 1.0, 0.5]
    po = sum(w * l for w, (l, _) in zip(w_game, terms)) / sum(w_game)
    sft_logp = [-0.7 + 0.3, -1.2 - 0.4]
    nll_sft = (1.0 * -sft_logp[0] + 3.0 * -sft_logp[1]) / (1.0 + 3.0)
    loss, stats = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA)
    assert loss.item() == pytest.approx(po + ALPHA * nll_sft, rel=1e-5)
    assert stats["loss_po"].item() == pytest.approx(po, rel=1e-5)
    assert stats["loss_sft"].item() == pytest.approx(nll_sft, rel=1e-5)
    assert stats["clip_fraction"].item() == pytest.approx(3 / 4)  # |r − 1| > ε for rows 0, 1, 3
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.1 + 1.5) / 4, rel=1e-5)
    assert stats["kl"].item() == pytest.approx(
        (math.log(1.5) + math.log(0.5) + math.log(1.1) + math.log(1.5)) / 4, rel=1e-5)

    loss.backward()
    grad = rows["logp"].grad.tolist()
    expected_game = [w / sum(w_game) * g for w, (_, g) in zip(w_game, terms)]
    expected_sft = [ALPHA * -1.0 / 4.0, ALPHA * -3.0 / 4.0]
    assert grad == pytest.approx(expected_game + expected_sft, rel=1e-5, abs=1e-7)


def test_offline_po_without_detaching_the_advantage_adds_the_kl_gradient():
    rows = po_rows()
    loss, _ = offline_po_loss(**rows, kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA, detach_advantage=False)
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
    po = sum(w * l for w, (l, _) in zip(w_game, expected_po_terms(rows))) / sum(w_game)
    assert loss.item() == pytest.approx(po, rel=1e-5)
    assert "loss_sft" not in stats and "loss_po" in stats


def test_offline_po_all_sft_batch_is_weighted_nll():
    logp = torch.tensor([-0.4, -1.6], requires_grad=True)
    loss, stats = offline_po_loss(
        logp=logp, ref_logp=torch.tensor([-0.7, -1.2]), rewards=torch.zeros(2),
        weights=torch.tensor([1.0, 3.0]), is_game=torch.tensor([False, False]),
        kl_coeff=BETA, clip_range=EPS, sft_coeff=ALPHA,
    )
    assert loss.item() == pytest.approx(ALPHA * (1.0 * 0.4 + 3.0 * 1.6) / 4.0)
    assert set(stats) == {"loss_sft"}
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-ALPHA * 1 / 4, -ALPHA * 3 / 4])


def test_compute_loss_dispatch():
    logp = torch.tensor([-1.0, -2.0])
    batch = {"weight": torch.tensor([1.0, 1.0]), "reward": torch.tensor([1.0, 0.0]),
             "is_game": torch.tensor([True, False])}
    ref = torch.tensor([-1.0, -2.0])
    assert compute_loss(SFT, logp, batch, None, 0.1, EPS, ALPHA)[0].item() == pytest.approx(1.5)
    assert compute_loss(SFT_KL, logp, batch, ref, 0.1, EPS, ALPHA)[0].item() == pytest.approx(1.5)
    # ratio 1, A = reward: game term −1, sft term α·2
    assert compute_loss(OFFLINE_PO, logp, batch, ref, BETA, EPS, ALPHA)[0].item() == pytest.approx(-1 + ALPHA * 2)
    with pytest.raises(ValueError, match="reference"):
        compute_loss(SFT_KL, logp, batch, None, 0.1, EPS, ALPHA)
    with pytest.raises(ValueError, match="unknown method"):
        compute_loss("ppo", logp, batch, ref, 0.1, EPS, ALPHA)
