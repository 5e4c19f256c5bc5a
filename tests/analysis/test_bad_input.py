"""Bad input to the analysis (the preview, its importance weighting, the heatmaps and their callback) is a clear error
that says what was wrong, before any sampling or scoring."""

import pytest
import torch

from trl_dpr.analysis.heatmaps import heatmap_html
from trl_dpr.analysis.preview import PreviewConfig, tilted_quality
from trl_dpr.analysis.tracking import TokenHeatmapCallback

from .test_tracking import make_trainer


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"samples_per_prompt": 1}, "samples_per_prompt must be >= 2"),
        ({"kl_coefs": [1.0, -0.5]}, "kl_coef must be >= 0"),
        ({"variants": {"DPR": {"kl_coef": 1.0}}}, "unknown setting"),
        ({"quality": "pairwise"}, "needs evaluation_config"),
        ({"quality": "fluency"}, "quality must be one of"),
        ({"policies": ["runs/x"]}, "NAME=PATH"),
        ({"variants": {}}, "at least one reward variant"),
    ],
)
def test_bad_settings_are_refused_with_what_to_do(overrides, match):
    with pytest.raises(ValueError, match=match):
        PreviewConfig(**overrides)


@pytest.mark.parametrize(
    "rewards, quality, lambdas, message",
    [
        (torch.zeros(3), torch.zeros(3), [1.0], "prompts, samples_per_prompt"),
        (torch.zeros(2, 3), torch.zeros(2, 4), [1.0], "prompts, samples_per_prompt"),
        (torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2), [1.0], "finite"),
        (torch.zeros(1, 2), torch.zeros(1, 2), [-1.0], "λ must be >= 0"),
    ],
)
def test_bad_inputs_are_named(rewards, quality, lambdas, message):
    with pytest.raises(ValueError, match=message):
        tilted_quality(rewards, quality, lambdas)


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="2 prompts for 1"):
        heatmap_html([{"tokens": ["a"], "rewards": [0.1]}], ["p", "q"])
    with pytest.raises(ValueError, match="1 tokens but 2 rewards"):
        heatmap_html([{"tokens": ["a"], "rewards": [0.1, 0.2]}])


def test_the_callback_needs_a_dense_path_trainer_and_positive_settings(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    with pytest.raises(TypeError, match="DensePathTrainer"):
        TokenHeatmapCallback(object())
    with pytest.raises(ValueError, match="every_n_steps"):
        TokenHeatmapCallback(trainer, every_n_steps=0)
    with pytest.raises(ValueError, match="num_samples"):
        TokenHeatmapCallback(trainer, num_samples=0)
