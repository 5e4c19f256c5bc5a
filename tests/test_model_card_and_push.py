"""What a DPR run writes for the Hub: a model card that names its SFT model, and no lock file in the push."""

from trl_dpr.hub import files_to_push

from .conftest import dpr_trainer


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
    assert "fine-tuned version of the SFT model `sft` (a local folder)" in card and str(tmp_path) not in card


def test_the_output_folder_lock_and_its_holder_are_not_pushed(tmp_path):
    for name in ("model.safetensors", ".trl_dpr.lock", ".trl_dpr.lock.json"):
        (tmp_path / name).write_text("x")
    assert files_to_push(tmp_path) == ["model.safetensors"]
