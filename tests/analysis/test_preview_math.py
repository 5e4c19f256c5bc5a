"""The preview's importance weighting against hand-computed numbers, a plain Python loop, and its λ limits."""

import math
import random

import pytest
import torch

from trl_dpr.analysis.preview import PreviewReport, bootstrap_mean_ci, preview_points, tilt_weights, tilted_quality


def loop_estimate(rewards, quality, lam):
    """Self-normalised importance weighting written out with Python floats, one prompt at a time."""
    out = []
    for row_r, row_q in zip(rewards, quality):
        n = len(row_r)
        top = max(row_r)
        raw = [math.exp((r - top) / lam) for r in row_r]
        total = sum(raw)
        w = [x / total for x in raw]
        q = sum(wi * qi for wi, qi in zip(w, row_q))
        kl = sum(wi * math.log(n * wi) for wi in w if wi > 0)
        ess = 1.0 / sum(wi * wi for wi in w)
        out.append((q, kl, ess))
    return out


def test_hand_computed_two_samples():
    # R = (0, log 3) at λ = 1: weights 1/4, 3/4 → quality 3/4, KL = ¼·log(½) + ¾·log(3/2), ESS = 1/(1/16 + 9/16) = 1.6
    out = tilted_quality(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 1.0]]), [1.0])
    assert out.quality.item() == pytest.approx(0.75)
    assert out.kl.item() == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5))
    assert out.ess.item() == pytest.approx(1.6)


def test_matches_a_float_loop_on_random_data():
    rng = random.Random(0)
    rewards = [[rng.gauss(0, 3) for _ in range(7)] for _ in range(5)]
    quality = [[float(rng.random() < 0.4) for _ in range(7)] for _ in range(5)]
    lambdas = [0.1, 0.5, 2.0, 10.0]
    out = tilted_quality(torch.tensor(rewards, dtype=torch.float64), torch.tensor(quality), lambdas)
    for i, lam in enumerate(lambdas):
        expected = loop_estimate(rewards, quality, lam)
        for p, (q, kl, ess) in enumerate(expected):
            assert out.quality[i, p].item() == pytest.approx(q, rel=1e-9, abs=1e-12)
            assert out.kl[i, p].item() == pytest.approx(kl, rel=1e-9, abs=1e-12)
            assert out.ess[i, p].item() == pytest.approx(ess, rel=1e-9)


def test_lambda_infinity_is_the_sft_policy():
    rewards = torch.tensor([[5.0, -1.0, 2.0, 0.0], [1.0, 1.0, 3.0, -7.0]])
    quality = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    out = tilted_quality(rewards, quality, [math.inf])
    assert out.quality[0].tolist() == pytest.approx([0.5, 0.5])
    assert out.kl[0].tolist() == pytest.approx([0.0, 0.0])
    assert out.ess[0].tolist() == pytest.approx([4.0, 4.0])


def test_lambda_zero_is_best_of_n_with_ties_split():
    rewards = torch.tensor([[5.0, -1.0, 2.0, 0.0], [3.0, 1.0, 3.0, -7.0]])
    quality = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    out = tilted_quality(rewards, quality, [0.0])
    assert out.quality[0].tolist() == pytest.approx([1.0, 0.5])  # argmax; two-way tie averages
    assert out.kl[0].tolist() == pytest.approx([math.log(4), math.log(4) - math.log(2)])
    assert out.ess[0].tolist() == pytest.approx([1.0, 2.0])


def test_small_and_large_lambda_approach_the_limits():
    rewards = torch.tensor([[5.0, -1.0, 2.0, 0.0]])
    quality = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    out = tilted_quality(rewards, quality, [1e-3, 1e6, 0.0, math.inf])
    assert out.quality[0].item() == pytest.approx(out.quality[2].item(), abs=1e-9)
    assert out.quality[1].item() == pytest.approx(out.quality[3].item(), abs=1e-5)
    assert out.kl[1].item() == pytest.approx(0.0, abs=1e-9)


def test_huge_rewards_do_not_overflow():
    out = tilted_quality(torch.tensor([[1000.0, 900.0]]), torch.tensor([[1.0, 0.0]]), [0.5])
    assert out.quality.item() == pytest.approx(1.0)
    assert torch.isfinite(out.kl).all()


def test_kl_grows_as_lambda_shrinks():
    rng = torch.Generator().manual_seed(1)
    rewards = torch.randn(20, 16, generator=rng) * 2
    out = tilted_quality(rewards, torch.zeros_like(rewards), [100.0, 10.0, 1.0, 0.1])
    assert (out.mean_kl[1:] >= out.mean_kl[:-1]).all()
    assert (out.ess.mean(1)[1:] <= out.ess.mean(1)[:-1]).all()


def test_weights_sum_to_one():
    weights = tilt_weights(torch.randn(4, 9), 0.3)
    assert weights.sum(dim=1).tolist() == pytest.approx([1.0] * 4)


def test_bootstrap_interval_covers_the_mean_and_narrows_with_more_prompts():
    values = torch.tensor([[float(i % 3 == 0) for i in range(60)]])
    low, high = bootstrap_mean_ci(values)
    mean = values.mean().item()
    assert low.item() <= mean <= high.item()
    low_big, high_big = bootstrap_mean_ci(values.repeat(1, 10))
    assert (high_big - low_big).item() < (high - low).item()
    # A constant has a zero-width interval.
    low_c, high_c = bootstrap_mean_ci(torch.full((1, 30), 0.4))
    assert low_c.item() == pytest.approx(0.4) and high_c.item() == pytest.approx(0.4)


def test_preview_points_add_sft_and_best_of_n_and_pair_the_gain_with_sft():
    rewards = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]] * 10)
    quality = torch.tensor([[0.0, 1.0], [0.0, 1.0]] * 10)
    points = preview_points({"R": rewards}, quality, [1.0], num_resamples=300)
    assert [p.lam for p in points] == [math.inf, 1.0, 0.0]
    sft, one, best = points
    assert (sft.quality, sft.delta, sft.delta_ci_low, sft.delta_ci_high, sft.kl) == (0.5, 0.0, 0.0, 0.0, 0.0)
    # half the prompts put weight 3/4 on the good sample, half 1/4: the mean is 1/2 again, and so is its gain's centre.
    assert one.quality == pytest.approx(0.5) and one.delta == pytest.approx(0.0)
    assert one.delta_ci_low < 0.0 < one.delta_ci_high  # prompts disagree: the paired interval straddles 0
    assert best.quality == pytest.approx(0.5) and best.ess == pytest.approx(1.0)


def test_a_point_below_the_effective_sample_size_is_not_trusted_but_best_of_n_is_reported_as_it_is():
    rewards = torch.tensor([[0.0, 10.0, 0.0, 0.0]])
    points = preview_points(
        {"R": rewards}, torch.tensor([[0.0, 1.0, 0.0, 0.0]]), [100.0, 0.5], min_ess=2.0, num_resamples=50
    )
    trusted = {p.lam: p.trusted for p in points}
    assert trusted == {math.inf: True, 100.0: True, 0.5: False, 0.0: True}


def test_the_report_prints_an_untrusted_ess_rounded_down_never_at_the_threshold_it_missed():
    """ESS = (Σw)²/Σw² of 4 samples, one weighted e^0.02 at λ = 100, is just below 4 (3.9999): untrusted at min_ess 4,
    it reads 3.99, not 4.0 beside `trusted: no`; N = 5 samples can be trusted."""
    rewards = torch.tensor([[0.0, 2.0, 0.0, 0.0, 0.0]])
    points = preview_points({"R": rewards[:, :4]}, torch.zeros(1, 4), [100.0], min_ess=4.0, num_resamples=10)
    (point,) = [p for p in points if p.lam == 100.0]
    weights = [math.exp(0.02), 1.0, 1.0, 1.0]
    assert point.ess == pytest.approx(sum(weights) ** 2 / sum(w * w for w in weights)) and 3.99 < point.ess < 4
    assert not point.trusted
    assert "| 0.000 | 3.99 | no |" in PreviewReport("exact", 1, 4, points, 0.0, 0.0).markdown()
    points = preview_points({"R": rewards}, torch.zeros(1, 5), [100.0], min_ess=4.0, num_resamples=10)
    assert [p.trusted for p in points if p.lam == 100.0] == [True]


def test_the_report_summary_gives_the_slope_near_sft_and_the_best_trusted_point():
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0]] * 8)
    quality = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 8)
    points = preview_points({"R": rewards}, quality, [10.0, 1.0], min_ess=1.5, num_resamples=100)
    report = PreviewReport("exact", 8, 4, points, sft_quality=0.5, pass_at_n=1.0)
    first = next(p for p in points if p.lam == 10.0)
    assert report.slope("R") == pytest.approx(first.delta / first.kl)
    best = report.best("R")
    assert best.lam == 0.0 and best.quality == pytest.approx(1.0)
    (row,) = report.summary_rows()
    # identical prompts: the gain +0.5 has a zero-width interval, which excludes 0
    assert row["best_delta"] == pytest.approx(0.5) and row["best_delta_ci_low"] == pytest.approx(0.5)
    assert row["helps"] is True
