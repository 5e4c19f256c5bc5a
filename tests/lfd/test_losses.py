"""SPIN's and GSIL's losses (`trl_dpr.lfd.losses`) against hand computations in plain Python floats."""

import doctest
import math

import pytest
import torch

import trl_dpr.lfd.losses
from trl_dpr.lfd.losses import GSIL_LOSSES, gsil_discriminator, gsil_loss, spin_loss

# Four examples: (log π_θ(y), log π_θ(y'), log π_t(y), log π_t(y')) for the demonstration y and the own answer y'.
EXAMPLES = [
    (-1.0, -3.0, -2.0, -2.0),
    (-10.0, -4.0, -9.5, -4.5),
    (-7.25, -7.25, -7.25, -7.25),
    (-3.0, -60.0, -80.0, -2.0),
]


def as_tensors(examples=EXAMPLES):
    return [torch.tensor(column, dtype=torch.float64) for column in zip(*examples)]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def softplus(x: float) -> float:  # log(1 + e^x), without overflow
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


# The GSIL loss pairs written out from the paper's definitions, one float at a time: (ℓ₁ on y, ℓ₋₁ on y').
GSIL_BY_HAND = {
    "bernoulli": (lambda f: softplus(-f), lambda f: softplus(f)),  # −log σ(f), −log σ(−f)
    "brier": (lambda f: (1.0 - sigmoid(f)) ** 2, lambda f: sigmoid(f) ** 2),
    "hinge": (lambda f: max(0.0, 1.0 - f), lambda f: max(0.0, 1.0 + f)),
    "kliep": (lambda f: -f, lambda f: math.exp(f)),
    "lsif": (lambda f: -math.exp(f), lambda f: 0.5 * math.exp(f) ** 2),
}


# ---- SPIN -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_spin_sigmoid_loss_is_log_one_plus_exp_of_minus_beta_times_the_log_ratio_gap(beta):
    expected = []
    for pr, pg, rr, rg in EXAMPLES:
        gap = (pr - rr) - (pg - rg)
        expected.append(softplus(-beta * gap))  # log(1 + e^{−βΔ})
    got = spin_loss(*as_tensors(), beta=beta, loss_type="sigmoid")
    assert got.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_spin_hinge_loss_is_max_of_zero_and_one_minus_beta_times_the_gap(beta):
    expected = [max(0.0, 1.0 - beta * ((pr - rr) - (pg - rg))) for pr, pg, rr, rg in EXAMPLES]
    assert spin_loss(*as_tensors(), beta=beta, loss_type="hinge").tolist() == pytest.approx(expected, abs=1e-12)


def test_spin_loss_is_log_two_when_the_policy_is_still_the_reference():
    same = torch.tensor([-4.0, -9.0])
    assert spin_loss(same, same, same, same).tolist() == pytest.approx([math.log(2)] * 2)


def test_spin_hand_computed_example():
    # Δ = (−1 + 2) − (−3 + 2) = 2, β = 0.5: log(1 + e^{−1}) = 0.313262; hinge max(0, 1 − 1) = 0.
    args = [torch.tensor([v]) for v in (-1.0, -3.0, -2.0, -2.0)]
    assert spin_loss(*args, beta=0.5).item() == pytest.approx(0.3132617, abs=1e-6)
    assert spin_loss(*args, beta=0.5, loss_type="hinge").item() == 0.0


def test_spin_loss_does_not_overflow_on_large_gaps():
    args = [torch.tensor([v]) for v in (0.0, -1e4, 0.0, 0.0)]  # βΔ = 1000: the loss is ~0, not nan
    assert spin_loss(*args).item() == pytest.approx(0.0, abs=1e-12)
    args = [torch.tensor([v]) for v in (-1e4, 0.0, 0.0, 0.0)]  # βΔ = −1000: the loss is ~1000
    assert spin_loss(*args).item() == pytest.approx(1000.0)


# ---- GSIL -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", GSIL_LOSSES)
@pytest.mark.parametrize(("beta", "shift"), [(0.1, 0.0), (1.0, 0.0), (0.01, 2.0)])
def test_gsil_loss_matches_its_definition_on_each_example(loss_type, beta, shift):
    on_demonstration, on_own_answer = GSIL_BY_HAND[loss_type]
    expected_real, expected_generated = [], []
    for pr, pg, rr, rg in EXAMPLES:
        expected_real.append(on_demonstration(beta * (pr - rr) + shift))
        expected_generated.append(on_own_answer(beta * (pg - rg) + shift))
    total, real, generated = gsil_loss(*as_tensors(), beta=beta, loss_type=loss_type, shift=shift)
    assert real.tolist() == pytest.approx(expected_real, rel=1e-12, abs=1e-12)
    assert generated.tolist() == pytest.approx(expected_generated, rel=1e-12, abs=1e-12)
    assert total.tolist() == pytest.approx(
        [a + b for a, b in zip(expected_real, expected_generated)], rel=1e-12, abs=1e-12
    )


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [  # f(y) = 1, f(y') = −1 (β = 1, no shift), each value worked out by hand
        ("bernoulli", 2 * 0.3132617),  # 2·log(1 + e^{−1})
        ("brier", 2 * 0.0723295),  # (1 − σ(1))² + σ(−1)² = 2 · 0.268941²
        ("hinge", 0.0),  # max(0, 1 − 1) + max(0, 1 − 1)
        ("kliep", -1.0 + 0.3678794),  # −1 + e^{−1}
        ("lsif", -2.7182818 + 0.5 * 0.1353353),  # −e + ½ e^{−2}
    ],
)
def test_gsil_hand_computed_example(loss_type, expected):
    args = [torch.tensor([v]) for v in (-1.0, -3.0, -2.0, -2.0)]
    assert gsil_loss(*args, beta=1.0, loss_type=loss_type)[0].item() == pytest.approx(expected, abs=1e-6)


def test_gsil_discriminator_is_beta_times_the_log_ratio_plus_the_shift():
    f = gsil_discriminator(torch.tensor([-1.0, -4.0]), torch.tensor([-2.0, -2.0]), beta=0.5, shift=0.25)
    assert f.tolist() == [0.5 * 1.0 + 0.25, 0.5 * -2.0 + 0.25]


def test_gsil_bernoulli_loss_is_two_log_two_when_the_policy_is_still_the_reference():
    same = torch.tensor([-4.0])
    assert gsil_loss(same, same, same, same)[0].item() == pytest.approx(2 * math.log(2))


@pytest.mark.parametrize("loss_type", GSIL_LOSSES)
def test_gsil_gradient_raises_the_demonstration_and_lowers_the_own_answer(loss_type):
    policy_real = torch.tensor([-5.0], requires_grad=True)
    policy_generated = torch.tensor([-5.0], requires_grad=True)
    # f = 0 on both, except hinge's flat zone: f(y) = 0 is inside max(0, 1 − f)'s slope, f(y') = 0 inside max(0, 1 + f)'s
    loss = gsil_loss(
        policy_real, policy_generated, torch.tensor([-5.0]), torch.tensor([-5.0]), beta=1.0, loss_type=loss_type
    )[0]
    loss.sum().backward()
    assert policy_real.grad.item() < 0 < policy_generated.grad.item()


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge"])
def test_spin_gradient_raises_the_demonstration_and_lowers_the_own_answer(loss_type):
    policy_real = torch.tensor([-5.0], requires_grad=True)
    policy_generated = torch.tensor([-5.0], requires_grad=True)
    spin_loss(
        policy_real, policy_generated, torch.tensor([-5.0]), torch.tensor([-5.0]), loss_type=loss_type
    ).sum().backward()
    assert policy_real.grad.item() < 0 < policy_generated.grad.item()


# ---- bad input ------------------------------------------------------------------------------------------------------


def test_docstring_examples_run():
    result = doctest.testmod(trl_dpr.lfd.losses)
    assert result.failed == 0 and result.attempted > 0
