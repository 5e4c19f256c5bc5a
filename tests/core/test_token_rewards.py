"""CheckpointRewardModel.token_rewards against plain, unpadded forwards of each sequence (the independent reference)."""

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trl_dpr import CheckpointRewardModel
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.reference_manifest import MANIFEST_NAME, ReferenceManifest, write_manifest
from trl_dpr.rewards import CheckpointDifference, SFTLogProb, WithSoftValue, reward_from_settings
from trl_dpr.scoring import completion_logprobs

ARCHITECTURES = ["llama", "qwen2", "gpt2"]  # gpt2: absolute positions, so wrong position ids show up


def make_batch(tokenizer):
    """Prompts of different lengths (left-padded); completions with and without EOS (right-padded)."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompts = [[5, 9, 14, 20, 31], [7, 8], [40, 41, 42]]
    completions = [[50, 51, eos], [60, 61, 62, 63, 64], [70, eos]]  # row 1 was cut at the length limit
    width_p = max(map(len, prompts))
    width_c = max(map(len, completions))
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([c + [pad] * (width_c - len(c)) for c in completions])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width_c - len(c)) for c in completions])
    return prompts, completions, (prompt_ids, prompt_mask, completion_ids, completion_mask)


def reference_statistics(model, prompt, completion):
    """float64 log-softmax of an unpadded forward: per completion token (log π, logit, V(s_t)) and V after the last."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].double()
    log_probs = logits.log_softmax(-1)
    values = logits.logsumexp(-1)
    rows = []
    for t, token in enumerate(completion):
        position = len(prompt) + t - 1  # the state before token t is scored at the previous position
        rows.append((log_probs[position, token].item(), logits[position, token].item(), values[position].item()))
    final_value = values[len(prompt) + len(completion) - 1].item()
    return rows, final_value


# The recipe keys of the paper's ablations (wo/Baseline: no π_ref; w/V: the potential kept), by (baseline, eliminated V).
ABLATION_SETTINGS = {
    (True, True): {},
    (False, True): {"dense_reward": "trl_dpr.rewards:SFTLogProb"},
    (True, False): {"dense_reward": "trl_dpr.rewards:WithSoftValue"},
    (False, False): {
        "dense_reward": "trl_dpr.rewards:WithSoftValue",
        "dense_reward_kwargs": {"reward": "trl_dpr.rewards:SFTLogProb"},
    },
}


def expected_rewards(sft, ref, prompts, completions, eos, use_baseline, eliminate_value):
    width = max(map(len, completions))
    expected = torch.zeros(len(prompts), width, dtype=torch.float64)
    for b, (prompt, completion) in enumerate(zip(prompts, completions)):
        sft_rows, sft_final_value = reference_statistics(sft, prompt, completion)
        ref_rows, _ = reference_statistics(ref, prompt, completion)
        for t in range(len(completion)):
            if eliminate_value:
                reward = sft_rows[t][0]
            else:
                # log π + V(s_t) − V(s_{t+1}) = logit − V(s_{t+1}); V after EOS is 0, a truncated end bootstraps.
                if t + 1 < len(completion):
                    next_value = sft_rows[t + 1][2]
                else:
                    next_value = 0.0 if completion[-1] == eos else sft_final_value
                reward = sft_rows[t][1] - next_value
            if use_baseline:
                reward -= ref_rows[t][0]
            expected[b, t] = reward
    return expected


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("use_baseline,eliminate_value", [(True, True), (False, True), (True, False), (False, False)])
def test_token_rewards_equal_unpadded_log_softmax(tokenizer, architecture, use_baseline, eliminate_value):
    sft = build_tiny_causal_lm(tokenizer, architecture, seed=0).eval()
    ref = build_tiny_causal_lm(tokenizer, architecture, seed=1).eval()
    reward = reward_from_settings(
        ABLATION_SETTINGS[use_baseline, eliminate_value]
    )  # the ablations by their recipe keys
    reward_model = CheckpointRewardModel(sft, ref, reward)
    prompts, completions, batch = make_batch(tokenizer)
    rewards = reward_model.token_rewards(*batch)
    expected = expected_rewards(sft, ref, prompts, completions, tokenizer.eos_token_id, use_baseline, eliminate_value)
    assert rewards.dtype == torch.float32
    assert not rewards.requires_grad
    assert torch.allclose(rewards.double(), expected, atol=1e-5), (rewards, expected)
    completion_mask = batch[3]
    assert torch.all(rewards[completion_mask == 0] == 0.0)


def test_reference_is_sensitive_to_position_ids_under_left_padding(tokenizer):
    # Guard for the test above: for an absolute-position model, scoring the padded batch with default positions
    # (0..L-1, counting the padding) gives different log-probs, so the exactness test would catch that bug.
    model = build_tiny_causal_lm(tokenizer, "gpt2", seed=0).eval()
    _, _, (prompt_ids, prompt_mask, completion_ids, completion_mask) = make_batch(tokenizer)
    correct, _, _ = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad():
        naive = model(input_ids, attention_mask=attention_mask).logits.log_softmax(-1)
    p = prompt_ids.size(1)
    naive = naive[:, p - 1 : -1].gather(2, completion_ids[..., None]).squeeze(2) * completion_mask
    assert (naive - correct).abs().max() > 1e-3


def test_rewards_are_float32_for_a_bfloat16_model(tokenizer):
    sft = build_tiny_causal_lm(tokenizer, "llama", seed=0).to(torch.bfloat16)
    ref = build_tiny_causal_lm(tokenizer, "llama", seed=1).to(torch.bfloat16)
    _, _, batch = make_batch(tokenizer)
    rewards = CheckpointRewardModel(sft, ref).token_rewards(*batch)
    assert rewards.dtype == torch.float32
    assert torch.all(rewards[batch[3] == 0] == 0.0)


def test_chunk_size_and_micro_batching_do_not_change_rewards(tokenizer):
    sft = build_tiny_causal_lm(tokenizer, "qwen2", seed=0)
    ref = build_tiny_causal_lm(tokenizer, "qwen2", seed=1)
    _, _, batch = make_batch(tokenizer)
    whole = CheckpointRewardModel(sft, ref, WithSoftValue(CheckpointDifference())).token_rewards(*batch)
    chunked = CheckpointRewardModel(sft, ref, WithSoftValue(CheckpointDifference()), token_chunk_size=2)(
        *batch, batch_size=1
    ).rewards
    assert torch.allclose(whole, chunked, atol=1e-6)


class LargestVocabActivation(TorchDispatchMode):
    """Records the most rows of any vocabulary-wide float tensor an op produces (views of the LM head excluded)."""

    def __init__(self, vocab_size, weights):
        super().__init__()
        self.vocab_size, self.most_rows = vocab_size, 0
        self.weight_storages = {w.untyped_storage().data_ptr() for w in weights}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if (
                isinstance(tensor, torch.Tensor)
                and tensor.is_floating_point()
                and tensor.dim() >= 1
                and tensor.shape[-1] == self.vocab_size
                and tensor.untyped_storage().data_ptr() not in self.weight_storages
            ):
                self.most_rows = max(self.most_rows, tensor.numel() // self.vocab_size)
        return out


def test_scoring_never_materialises_batch_by_sequence_by_vocab_logits(tokenizer):
    sft = build_tiny_causal_lm(tokenizer, "llama", seed=0)
    ref = build_tiny_causal_lm(tokenizer, "llama", seed=1)
    _, _, batch = make_batch(tokenizer)
    with LargestVocabActivation(sft.config.vocab_size, [sft.lm_head.weight, ref.lm_head.weight]) as probe:
        CheckpointRewardModel(sft, ref, token_chunk_size=2).token_rewards(*batch)
    # The logits exist two tokens at a time, never for the whole [B, T] batch.
    assert probe.most_rows == 2


def test_one_forward_per_model_per_batch(tokenizer):
    sft = build_tiny_causal_lm(tokenizer, "llama", seed=0)
    ref = build_tiny_causal_lm(tokenizer, "llama", seed=1)
    calls = {"sft": 0, "ref": 0}
    sft.model.register_forward_hook(lambda *_: calls.__setitem__("sft", calls["sft"] + 1))
    ref.model.register_forward_hook(lambda *_: calls.__setitem__("ref", calls["ref"] + 1))
    _, _, batch = make_batch(tokenizer)
    CheckpointRewardModel(sft, ref, WithSoftValue(CheckpointDifference())).token_rewards(*batch)
    assert calls == {"sft": 1, "ref": 1}


def test_vocabulary_mismatch_is_an_error_at_construction(tokenizer):
    other_tokenizer = build_tokenizer(["completely different words zzz"], vocab_size=300)
    sft = build_tiny_causal_lm(tokenizer, "llama", seed=0)
    ref = build_tiny_causal_lm(other_tokenizer, "llama", seed=1)
    assert sft.config.vocab_size != ref.config.vocab_size
    with pytest.raises(ValueError, match="different vocabularies"):
        CheckpointRewardModel(sft, ref)


def test_tokenizer_mismatch_is_an_error_at_construction(tokenizer):
    # Same vocabulary size, different token ↔ id mapping: two non-special tokens swap ids.
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    state = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = state["model"]["vocab"]
    a, b = "a", "b"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    other = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(state)), pad_token="<|pad|>", eos_token="<|end|>"
    )
    assert len(other) == len(tokenizer) and other.get_vocab() != tokenizer.get_vocab()
    sft = build_tiny_causal_lm(tokenizer, "llama", seed=0)
    ref = build_tiny_causal_lm(tokenizer, "llama", seed=1)
    with pytest.raises(ValueError, match="different tokenizers"):
        CheckpointRewardModel(sft, ref, processing_class=tokenizer, ref_processing_class=other)


def test_scoring_is_one_forward_of_the_model_itself_with_its_forward_left_in_place(tokenizer):
    model = build_tiny_causal_lm(tokenizer, "llama", seed=0).eval()
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    _, _, (prompt_ids, prompt_mask, completion_ids, completion_mask) = make_batch(tokenizer)
    completion_logprobs(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, with_values=True, temperatures=(1.0, 0.7)
    )
    assert len(calls) == 1 and "forward" not in vars(model) and not model.model._forward_hooks


def test_baseline_requires_a_reference_model(tokenizer):
    with pytest.raises(ValueError, match="π_ref"):
        CheckpointRewardModel(build_tiny_causal_lm(tokenizer), None)
    CheckpointRewardModel(build_tiny_causal_lm(tokenizer), None, SFTLogProb())  # wo/Baseline needs none


def test_right_padded_prompts_are_rejected(tokenizer):
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    prompt_ids = torch.tensor([[5, 6, 0]])
    prompt_mask = torch.tensor([[1, 1, 0]])
    with pytest.raises(ValueError, match="left-padded"):
        CheckpointRewardModel(sft, ref).token_rewards(prompt_ids, prompt_mask, torch.tensor([[7]]), torch.ones(1, 1))


def test_score_text_returns_every_token_with_the_reward_token_rewards_gives(tokenizer):
    sft, ref = build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    reward_model = CheckpointRewardModel(sft, ref, processing_class=tokenizer)
    prompt = [{"role": "user", "content": "What is 12+7?"}]
    [scored] = reward_model.score_text([prompt], ["12+7=19"])
    assert "".join(scored["tokens"]) == "12+7=19" + tokenizer.eos_token
    prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
    prompt_ids = torch.tensor([prompt_ids["input_ids"]])
    completion_ids = torch.tensor([scored["token_ids"]])
    direct = reward_model.token_rewards(
        prompt_ids, torch.ones_like(prompt_ids), completion_ids, torch.ones_like(completion_ids)
    )
    assert scored["rewards"] == pytest.approx(direct[0].tolist(), abs=1e-6)
    assert scored["total"] == pytest.approx(sum(scored["rewards"]), abs=1e-5)


def save_sft_run(tmp_path, tokenizer, with_manifest=True):
    sft_dir = tmp_path / "sft"
    build_tiny_causal_lm(tokenizer, seed=0).save_pretrained(sft_dir)
    tokenizer.save_pretrained(sft_dir)
    build_tiny_causal_lm(tokenizer, seed=1).save_pretrained(sft_dir / "dpr_reference")
    tokenizer.save_pretrained(sft_dir / "dpr_reference")
    if with_manifest:
        write_manifest(sft_dir, ReferenceManifest("dpr_reference", fraction=0.5, step=5, total_steps=10))
    return sft_dir


def test_from_pretrained_finds_the_reference_through_the_manifest(tmp_path, tokenizer):
    sft_dir = save_sft_run(tmp_path, tokenizer)
    reward_model = CheckpointRewardModel.from_pretrained(str(sft_dir))
    assert reward_model.reference_manifest.step == 5
    reference = build_tiny_causal_lm(tokenizer, seed=1)
    assert torch.equal(reward_model.ref_model.lm_head.weight, reference.lm_head.weight)
    _, _, batch = make_batch(tokenizer)
    explicit = CheckpointRewardModel.from_pretrained(str(sft_dir), str(sft_dir / "dpr_reference"))
    assert torch.allclose(reward_model.token_rewards(*batch), explicit.token_rewards(*batch))


def test_from_pretrained_without_manifest_names_what_is_missing(tmp_path, tokenizer):
    sft_dir = save_sft_run(tmp_path, tokenizer, with_manifest=False)
    with pytest.raises(FileNotFoundError, match=MANIFEST_NAME):
        CheckpointRewardModel.from_pretrained(str(sft_dir))
    CheckpointRewardModel.from_pretrained(str(sft_dir), reward=SFTLogProb())  # wo/Baseline needs no reference


def test_from_pretrained_with_a_dangling_manifest_names_the_missing_folder(tmp_path, tokenizer):
    sft_dir = save_sft_run(tmp_path, tokenizer)
    (sft_dir / MANIFEST_NAME).write_text(
        json.dumps({**json.loads((sft_dir / MANIFEST_NAME).read_text()), "path": "gone"})
    )
    with pytest.raises(FileNotFoundError, match="gone"):
        CheckpointRewardModel.from_pretrained(str(sft_dir))
