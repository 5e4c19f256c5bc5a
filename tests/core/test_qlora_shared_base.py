"""QLoRA layout: π_SFT, π_ref and the policy as three adapters on ONE 4-bit base (bitsandbytes on CPU)."""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from trl_dpr import CheckpointRewardModel, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.reference_manifest import ReferenceManifest, write_manifest
from trl_dpr.rewards import reward_from_settings

from ..conftest import dpr_config as make_config
from ..conftest import prompts_dataset
from .test_token_rewards import make_batch

QUANTIZED = dict(
    quantization_config=BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    ),
    dtype=torch.float32,
    device_map=None,
)


@pytest.fixture(scope="module")
def adapter_sft_output(tmp_path_factory, tokenizer):
    """What a QLoRA SFT run leaves: the SFT adapter, the reference adapter in dpr_reference/, the manifest."""
    root = tmp_path_factory.mktemp("qlora")
    base_dir = root / "base"
    build_tiny_causal_lm(tokenizer, hidden_size=64, seed=0).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    sft_dir = root / "sft"
    for seed, folder in ((1, sft_dir), (2, sft_dir / "dpr_reference")):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(base_dir)
        # init_lora_weights=False: random A and B, so each adapter really changes the model
        config = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
        get_peft_model(base, config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    write_manifest(sft_dir, ReferenceManifest("dpr_reference", 0.5, 5, 10, is_adapter=True, base_model=str(base_dir)))
    return root


def base_weight_bytes(*models):
    """Bytes of distinct (by storage) non-adapter tensors across models: the base weights actually in memory."""
    seen, total = set(), 0
    for model in models:
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if "lora_" in name:
                continue
            key = tensor.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += tensor.untyped_storage().nbytes()
    return total


def separate_models(root):
    sft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(root / "base", **QUANTIZED), root / "sft")
    ref = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(root / "base", **QUANTIZED), root / "sft" / "dpr_reference"
    )
    return sft, ref


@pytest.mark.parametrize("eliminate_value", [True, False])
def test_adapter_switch_scoring_equals_separate_models(adapter_sft_output, tokenizer, eliminate_value):
    shared = CheckpointRewardModel.from_pretrained(
        str(adapter_sft_output / "sft"),
        reward=reward_from_settings({} if eliminate_value else {"dense_reward": "trl_dpr.rewards:WithSoftValue"}),
        **QUANTIZED,
    )
    assert shared.sft_model is shared.ref_model and (shared.sft_adapter, shared.ref_adapter) == ("sft", "ref")
    sft, ref = separate_models(adapter_sft_output)
    separate = CheckpointRewardModel(
        sft, ref, reward_from_settings({} if eliminate_value else {"dense_reward": "trl_dpr.rewards:WithSoftValue"})
    )
    # Same 4-bit kernel on both sides: in eval mode bitsandbytes (CPU) switches to a repacked bf16 inference kernel,
    # about 1e-3 off the training kernel the shared base uses (see CheckpointRewardModel._activated).
    sft.train(), ref.train()
    _, _, batch = make_batch(tokenizer)
    shared_rewards, separate_rewards = shared.token_rewards(*batch), separate.token_rewards(*batch)
    assert torch.allclose(shared_rewards, separate_rewards, atol=1e-4)
    assert shared_rewards.abs().max() > 1e-2  # the two adapters really differ: the comparison is not vacuous


def test_policy_and_both_scorers_hold_one_base(adapter_sft_output, tokenizer, tmp_path):
    reward_model = CheckpointRewardModel.from_pretrained(str(adapter_sft_output / "sft"), **QUANTIZED)
    trainer = DensePathTrainer(
        reward_model=reward_model,
        args=make_config(tmp_path),
        train_dataset=prompts_dataset(),
        processing_class=tokenizer,
    )
    assert trainer.model is reward_model.sft_model and set(trainer.model.peft_config) == {"sft", "ref", "default"}
    one_base = base_weight_bytes(AutoModelForCausalLM.from_pretrained(adapter_sft_output / "base", **QUANTIZED))
    assert base_weight_bytes(trainer.model, reward_model.sft_model, reward_model.ref_model) == one_base
    sft, ref = separate_models(adapter_sft_output)
    policy = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(adapter_sft_output / "base", **QUANTIZED),
        adapter_sft_output / "sft",
        is_trainable=True,
    )
    assert base_weight_bytes(policy, sft, ref) == 3 * one_base  # the layout without sharing


def test_training_moves_only_the_policy_adapter(adapter_sft_output, tokenizer, tmp_path):
    reward_model = CheckpointRewardModel.from_pretrained(str(adapter_sft_output / "sft"), **QUANTIZED)
    _, _, batch = make_batch(tokenizer)
    rewards_before = reward_model.token_rewards(*batch)
    trainer = DensePathTrainer(
        reward_model=reward_model,
        processing_class=tokenizer,
        train_dataset=prompts_dataset(),
        args=make_config(tmp_path, max_steps=2, learning_rate=1e-2),
    )
    model = trainer.model
    policy_start = {n: p.detach().clone() for n, p in model.named_parameters() if ".default." in n}
    # the policy starts as π_SFT (TRL keeps the trainable adapter of a quantized model in bf16, as QLoRA does)
    for name, policy_weight in policy_start.items():
        sft_weight = model.get_parameter(name.replace(".default.", ".sft."))
        assert torch.equal(policy_weight.float(), sft_weight.to(policy_weight.dtype).float())
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if ".default." not in n}
    trainer.train()

    assert any(not torch.equal(policy_start[n], model.get_parameter(n)) for n in policy_start)
    assert all(torch.equal(frozen[n], model.get_parameter(n)) for n in frozen)  # base, sft and ref untouched
    assert torch.allclose(reward_model.token_rewards(*batch), rewards_before, atol=1e-6)  # the reward did not drift
    assert [n for n, p in model.named_parameters() if p.requires_grad] == list(policy_start)

    trainer.save_model()
    saved = tmp_path / "dpr"
    assert json.loads((saved / "adapter_config.json").read_text())["r"] == 4
    assert not (saved / "sft").exists() and not (saved / "ref").exists()  # only the policy adapter is the output


def test_merging_and_unmerging_an_adapter_changes_a_4bit_base(adapter_sft_output):
    """Why vLLM is refused below: TRL's vLLM weight sync merges the policy adapter into the base and unmerges it."""
    from bitsandbytes.functional import dequantize_4bit

    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(adapter_sft_output / "base", **QUANTIZED), adapter_sft_output / "sft"
    )
    layer = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    before = dequantize_4bit(layer.weight.data, layer.weight.quant_state).clone()
    model.merge_adapter()
    model.unmerge_adapter()
    after = dequantize_4bit(layer.weight.data, layer.weight.quant_state)
    assert (after - before).abs().max() > 1e-3  # re-quantized twice: not the base it was


def test_vllm_with_a_quantized_shared_base_is_refused_before_vllm_starts(adapter_sft_output, tokenizer, tmp_path):
    reward_model = CheckpointRewardModel.from_pretrained(str(adapter_sft_output / "sft"), **QUANTIZED)
    with pytest.raises(ValueError, match="re-quantizing the base each time"):
        DensePathTrainer(
            reward_model=reward_model,
            args=make_config(tmp_path, use_vllm=True),
            train_dataset=prompts_dataset(),
            processing_class=tokenizer,
        )
    assert set(reward_model.sft_model.peft_config) == {"sft", "ref"}  # refused before the policy adapter was added


@pytest.mark.slow  # 4-bit bitsandbytes training on CPU (≈ 2.5 s)
def test_continuous_batching_trains_the_quantized_shared_base_off_policy(adapter_sft_output, tokenizer, tmp_path):
    """The QLoRA recipes' generation: transformers' continuous batching (bounded paged KV cache) on the 4-bit base,
    rollout batch 8 over 2 micro-batches, so GRPO computes log π_old itself for DPR's KL term."""
    reward_model = CheckpointRewardModel.from_pretrained(str(adapter_sft_output / "sft"), **QUANTIZED)
    args = make_config(
        tmp_path,
        use_transformers_continuous_batching=True,
        generation_batch_size=8,
        kl_coef=0.1,
        max_steps=2,
        transformers_continuous_batching_config={"num_blocks": 16, "max_batch_tokens": 64, "page_size": 16},
    )
    trainer = DensePathTrainer(
        reward_model=reward_model, args=args, train_dataset=prompts_dataset(), processing_class=tokenizer
    )
    batches = []
    generate_and_score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(generate_and_score(inputs)) or batches[-1]
    trainer.train()

    assert len(batches) == 1 and batches[0]["completion_ids"].shape[0] == 8  # one rollout of 8 for the two steps
    assert batches[0]["old_per_token_logps"] is not None  # off-policy: GRPO's own forward of the policy
    # The policy starts as π_SFT: at the first step log π_old − log π_SFT is 0 up to rounding, although the two come
    # from different forwards (GRPO's, through the policy adapter, which TRL keeps in bf16 on a quantized base; the
    # reward model's, through the fp32 `sft` adapter). Measured: 1.2e-4 per token.
    assert abs(trainer.state.log_history[0]["kl_sft/per_token"]) < 1e-3
