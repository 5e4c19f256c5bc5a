"""Bad input is a clear error before any training compute: what was wrong, what was expected, how to fix it."""

import pytest
import torch
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.rewards import CheckpointDifference, SFTLogProb, WithSoftValue

from ..conftest import dpr_config as make_config
from ..conftest import prompts_dataset


def reward_model(tokenizer):
    return CheckpointRewardModel(build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1))


def test_a_dpr_dataset_without_prompts_fails_before_loading_anything(tokenizer, tmp_path):
    no_prompts = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(ValueError, match="no `prompt` column.*prompts_for_rl"):
        DensePathTrainer(reward_model=reward_model(tokenizer), args=make_config(tmp_path), train_dataset=no_prompts)


def test_an_unwritable_output_dir_fails_before_training(tokenizer, tmp_path):
    from trl_dpr.running.trainers import DPRRunTrainer  # the output folder's claim is a run service

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    args = make_config(tmp_path, output_dir=str(blocker / "run"))
    with pytest.raises(OSError, match="not writable"):
        DPRRunTrainer(
            reward_model=reward_model(tokenizer),
            args=args,
            train_dataset=prompts_dataset(),
            processing_class=tokenizer,
        )


def test_an_in_memory_sft_model_without_its_tokenizer_is_a_clear_error(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="π_SFT was given in memory.*processing_class"):
        DensePathTrainer(
            reward_model=reward_model(tokenizer), args=make_config(tmp_path), train_dataset=prompts_dataset()
        )


def test_a_reference_from_another_base_is_rejected(tokenizer):
    sft = build_tiny_causal_lm(tokenizer, hidden_size=32, seed=0)
    other = build_tiny_causal_lm(tokenizer, hidden_size=48, seed=1)  # same vocabulary, another model
    with pytest.raises(ValueError, match="hidden_size.*another base"):
        CheckpointRewardModel(sft, other)


def test_prompts_longer_than_the_limit_are_dropped_and_counted(tokenizer, tmp_path):
    long_prompt = [{"role": "user", "content": "What is 12+7? " * 30}]
    short_prompt = [{"role": "user", "content": "What is 1+2?"}]
    dataset = Dataset.from_dict({"prompt": [long_prompt, short_prompt, short_prompt, long_prompt]})
    trainer = DensePathTrainer(
        reward_model=reward_model(tokenizer),
        processing_class=tokenizer,
        train_dataset=dataset,
        args=make_config(tmp_path, max_prompt_length=32),
    )
    assert trainer.train_dataset.num_rows == 2
    assert trainer.num_dropped_prompts == {"train": 2}
    with pytest.raises(ValueError, match="Every train prompt is longer"):
        DensePathTrainer(
            reward_model=reward_model(tokenizer),
            processing_class=tokenizer,
            args=make_config(tmp_path, max_prompt_length=3),
            train_dataset=dataset,
        )


def test_a_prompt_and_completion_longer_than_the_models_context_are_refused_before_the_policy_loads(
    tokenizer, tmp_path, monkeypatch
):
    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)  # tiny Llamas: max_position_embeddings 512
    loads = []
    monkeypatch.setattr("trl_dpr.trainer.initial_policy", lambda *args, **kwargs: loads.append(args))
    with pytest.raises(ValueError) as error:
        DensePathTrainer(
            reward_model=str(sft),
            train_dataset=prompts_dataset(),
            args=make_config(tmp_path, max_prompt_length=100, max_completion_length=500),
        )
    assert str(error.value) == (
        "max_prompt_length 100 + max_completion_length 500 is more than π_SFT's context of 512 tokens "
        "(max_position_embeddings in its config.json): lower max_completion_length to at most 412."
    )
    assert loads == []  # the policy was never built
    DensePathConfig.check_fits_context(
        make_config(tmp_path, max_prompt_length=100, max_completion_length=412),
        build_tiny_causal_lm(tokenizer).config,
        "π_SFT",
    )  # 512 fits


def test_a_length_that_alone_fills_the_context_says_so_and_an_unbounded_one_is_not_counted(tokenizer):
    from trl_dpr.field_checks import check_fits_context

    config = build_tiny_causal_lm(tokenizer).config  # 512 positions
    check_fits_context(config, "m", {"max_prompt_length": None, "max_completion_length": 512}, "max_completion_length")
    with pytest.raises(ValueError) as error:
        check_fits_context(
            config, "m", {"max_prompt_length": 512, "max_completion_length": 8}, "max_completion_length"
        )
    assert str(error.value) == (
        "max_prompt_length 512 + max_completion_length 8 is more than m's context of 512 tokens (max_position_embeddings "
        "in its config.json): max_prompt_length alone fills it: shorten it first, or use a model with a longer context."
    )


@pytest.mark.parametrize(
    ("rope", "context"),
    [
        ({"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
        ({}, 32768),  # no scaling: max_position_embeddings
    ],
)
def test_a_qwen2_config_with_yarn_rope_scaling_counts_its_scaled_context(rope, context):
    """Qwen2.5's documented 128K: max_position_embeddings 32768 and YaRN factor 4 of original 32768."""
    from transformers import Qwen2Config

    from trl_dpr.field_checks import check_fits_context

    config = Qwen2Config(max_position_embeddings=32768, **rope)
    check_fits_context(config, "qwen", {"max_length": context}, "max_length")
    with pytest.raises(ValueError) as error:
        check_fits_context(config, "qwen", {"max_length": context + 1}, "max_length")
    source = (
        "its rope scaling: factor 4.0 × original_max_position_embeddings 32768"
        if rope
        else "max_position_embeddings in its config.json"
    )
    assert str(error.value) == (
        f"max_length {context + 1} is more than qwen's context of {context} tokens ({source}): lower max_length to at "
        f"most {context}."
    )


def test_a_scaled_context_shorter_than_max_position_embeddings_does_not_lower_it():
    """Llama 3.1: 131072 positions, llama3 scaling of factor 8 over the original 8192 (65536)."""
    from transformers import LlamaConfig

    from trl_dpr.field_checks import check_fits_context

    scaling = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    config = LlamaConfig(
        max_position_embeddings=131072, rope_scaling=scaling | {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    )
    check_fits_context(config, "llama", {"max_length": 131072}, "max_length")
    with pytest.raises(ValueError, match=r"context of 131072 tokens \(max_position_embeddings in its config.json\)"):
        check_fits_context(config, "llama", {"max_length": 131073}, "max_length")


def test_max_prompt_length_must_be_positive():
    with pytest.raises(ValueError, match="max_prompt_length"):
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, max_prompt_length=0)


def test_an_empty_completion_scores_zero_and_does_not_crash(tokenizer):
    prompt_ids = torch.tensor([[5, 6], [7, 8]])
    completion_ids = torch.tensor([[9, 10], [0, 0]])
    completion_mask = torch.tensor([[1, 1], [0, 0]])  # the second completion is empty
    rewards = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0),
        build_tiny_causal_lm(tokenizer, seed=1),
        WithSoftValue(CheckpointDifference()),
    ).token_rewards(prompt_ids, torch.ones_like(prompt_ids), completion_ids, completion_mask)
    assert torch.equal(rewards[1], torch.zeros(2))
    assert torch.isfinite(rewards).all()


def test_score_text_rejects_an_empty_completion_without_eos(tokenizer):
    model = reward_model(tokenizer)
    model.processing_class = tokenizer
    with pytest.raises(ValueError, match="empty"):
        model.score_text(["What is 1+2?"], [""], append_eos=False)


def test_an_adapter_that_does_not_name_its_base_is_a_clear_error(tokenizer, tmp_path):
    import json

    from peft import LoraConfig, get_peft_model

    sft_dir = tmp_path / "sft"
    get_peft_model(build_tiny_causal_lm(tokenizer), LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(
        sft_dir
    )
    config = json.loads((sft_dir / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = None
    (sft_dir / "adapter_config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(sft_dir)
    with pytest.raises(ValueError, match="does not name the base model"):
        CheckpointRewardModel.from_pretrained(str(sft_dir), reward=SFTLogProb())


@pytest.mark.parametrize("ref", ["the same folder", "a link to the folder", "a folder linking its weights"])
def test_a_reference_that_is_the_sft_model_itself_is_refused_before_loading(tokenizer, tmp_path, monkeypatch, ref):
    """π_ref = π_SFT makes r̂ = log π_SFT − log π_ref exactly 0: refused before a model loads, however it is named."""
    import trl.trainer.utils

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    if ref == "the same folder":
        named = sft
    elif ref == "a link to the folder":
        named = tmp_path / "sft-link"
        named.symlink_to(sft)
    else:
        named = tmp_path / "ref"
        named.mkdir()
        for file in sft.iterdir():
            if file.is_file():
                (named / file.name).symlink_to(file)
    monkeypatch.setattr(trl.trainer.utils, "create_model_from_path", lambda *a, **k: pytest.fail("a model loaded"))
    with pytest.raises(
        ValueError,
        match=r"ref_model_name_or_path '.*' is π_SFT itself \('.*sft'\): r̂ = log π_SFT − "
        r"log π_ref would be 0 on every token\. Leave ref_model_name_or_path unset",
    ):
        CheckpointRewardModel.from_pretrained(str(sft), ref_model_name_or_path=str(named))


def test_a_named_reference_checkpoint_is_loaded_and_named_in_the_model_card(tokenizer, tmp_path):
    from types import SimpleNamespace as NS

    from trl_dpr.running.model_card import CARD_HYPERPARAMETERS, dpr_model_card_section

    from ..conftest import save_sft_output

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    scorer = CheckpointRewardModel.from_pretrained(str(sft), ref_model_name_or_path=str(sft / "dpr_reference"))
    assert scorer.reference_manifest is None and scorer.ref_model_name_or_path == str(sft / "dpr_reference")
    args = NS(output_dir=str(tmp_path / "dpr"), max_steps=1, **{name: 0 for name in CARD_HYPERPARAMETERS})
    section = dpr_model_card_section(args, scorer)
    assert "- **π_ref**: the checkpoint `dpr_reference` (a local folder) (`ref_model_name_or_path`)." in section
    recorded = CheckpointRewardModel.from_pretrained(str(sft))  # π_ref from the manifest: its α line names it
    assert "**π_ref**" not in dpr_model_card_section(args, recorded) and recorded.ref_model_name_or_path is None
