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
        ({"samples_per_prompt": 4}, r"samples_per_prompt 4 is not more than min_ess 4: .* samples_per_prompt >= 5 "),
        ({"samples_per_prompt": 8, "min_ess": 8.5}, r"samples_per_prompt 8 is not more than min_ess 8.5: .* >= 9 "),
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


class ModelWouldLoad(Exception):
    """Raised where π_SFT would load: every check before it passed."""


def longest_held_out_prompt(tokenizer, num_prompts: int) -> int:
    """The tokens of the longest of the preview's held-out prompts as the model reads it (chat template)."""
    from trl_dpr.data import prompt_and_demonstration
    from trl_dpr.embedded.task import EMBEDDED_DATASET, held_out_split

    prompts = [prompt_and_demonstration(row, EMBEDDED_DATASET)[0] for row in held_out_split(num_prompts, 0)]
    rendered = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    return max(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in rendered)


@pytest.mark.parametrize("fits", [False, True])
def test_samples_past_the_sft_models_context_are_refused_before_it_loads(tokenizer, tmp_path, monkeypatch, fits):
    import trl_dpr.reward_model
    from trl_dpr.analysis.preview import run_preview

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)  # tiny Llamas: 512 positions
    longest = longest_held_out_prompt(tokenizer, 4)

    def from_pretrained(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.reward_model.CheckpointRewardModel, "from_pretrained", from_pretrained)
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"),
        num_prompts=4,
        max_new_tokens=512 - longest + (0 if fits else 1),
        plot=False,
    )
    with pytest.raises(ModelWouldLoad if fits else ValueError) as error:
        run_preview(config, str(sft), show_progress=False)
    if not fits:
        assert str(error.value) == (
            f"the longest prompt {longest} + max_new_tokens {513 - longest} is more than {sft}'s context of 512 tokens "
            f"(max_position_embeddings in its config.json): lower max_new_tokens to at most {512 - longest}."
        )


def test_a_policy_with_a_shorter_context_than_sft_names_the_value_that_fits_both(tokenizer, tmp_path):
    from trl_dpr.analysis.preview import run_preview
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    longest = longest_held_out_prompt(tokenizer, 4)
    policy = tmp_path / "dpr"  # 20 positions of room for an answer: the tightest
    build_tiny_causal_lm(tokenizer, max_positions=longest + 20).save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"), num_prompts=4, max_new_tokens=32, policies=[f"DPR={policy}"], plot=False
    )
    with pytest.raises(ValueError) as error:
        run_preview(config, str(sft), show_progress=False)
    assert str(error.value) == (
        f"the longest prompt {longest} + max_new_tokens 32 is more than policy DPR's context of {longest + 20} tokens "
        "(max_position_embeddings in its config.json): lower max_new_tokens to at most 20."
    )


def test_a_preview_variant_whose_reference_is_the_sft_model_itself_is_refused_before_a_model_loads(
    tokenizer, tmp_path, monkeypatch
):
    """A variant `ref_model_name_or_path:` naming π_SFT scores r̂ ≡ 0: refused before sampling, as in training."""
    import trl_dpr.reward_model
    from trl_dpr.analysis.preview import run_preview

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    monkeypatch.setattr(
        trl_dpr.reward_model.CheckpointRewardModel, "from_pretrained", lambda *a, **k: pytest.fail("a model loaded")
    )
    config = PreviewConfig(
        output_dir=str(tmp_path / "preview"), num_prompts=4, variants={"DPR": {"ref_model_name_or_path": str(sft)}}
    )
    with pytest.raises(ValueError, match=r"is π_SFT itself .* would be 0 on every token"):
        run_preview(config, str(sft), show_progress=False)
    assert not (tmp_path / "preview").exists()
