"""What the core's (trl_dpr's top-level modules) internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.config:ActivationCheckpointingAlias": r"""
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", FutureWarning)
    ...     SFTRecipeConfig("runs/sft", gradient_checkpointing=False, use_cpu=True).gradient_checkpointing
    False
""",
    "trl_dpr.config:SFTRecipeConfig": r"""
    >>> SFTRecipeConfig("runs/sft", max_length=160, use_cpu=True).gradient_checkpointing  # TRL's default
    True
""",
    "trl_dpr.config:refuse_unused_fields": r"""
    >>> refuse_unused_fields(DensePathConfig("runs/dpr", bf16=False))  # every one at its default
""",
    "trl_dpr.config:unused_parent_fields": r"""
    >>> unused_parent_fields(GRPOConfig, {"scale_rewards": "DPR whitens its returns"})
    {'scale_rewards': (('group',), 'DPR whitens its returns')}
""",
    "trl_dpr.data:check_chat_template": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["hi"]); tok.chat_template = None
    >>> check_chat_template(tok, Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]]}), "chats")
    Traceback (most recent call last):
    ...
    ValueError: chats holds chat messages but the tokenizer ... has no chat template. ...
""",
    "trl_dpr.data:check_prompt_dataset": r"""
    >>> check_prompt_dataset(Dataset.from_dict({"question": ["2+2?"]}), "train_dataset")
    Traceback (most recent call last):
    ...
    ValueError: train_dataset has no `prompt` column (columns: ['question']). ...
""",
    "trl_dpr.data:check_sft_dataset": r"""
    >>> check_sft_dataset(Dataset.from_dict({"text": ["hi"]}), "my-data")
    Traceback (most recent call last):
    ...
    ValueError: Dataset 'my-data' has columns ['text']; SFT needs a `messages` column ...
""",
    "trl_dpr.data:drop_long_prompts": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["short long prompt"])
    >>> kept, dropped = drop_long_prompts(Dataset.from_dict({"prompt": ["short", "long " * 50]}), tok, 10)
    >>> kept.num_rows, dropped
    (1, 1)
""",
    "trl_dpr.data:split_at_last_answer": r"""
    >>> split_at_last_answer([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], "toy")
    ([{'role': 'user', 'content': '2+2?'}], {'role': 'assistant', 'content': '4'})
    >>> split_at_last_answer([{"role": "user", "content": "2+2?"}], "toy")
    Traceback (most recent call last):
    ...
    ValueError: A `messages` row of 'toy' does not end with an assistant turn after a prompt (...): give each ...
""",
    "trl_dpr.data:load_demonstrations": r"""
    >>> rows = Dataset.from_dict({"prompt": ["1+1?", "2+2?"], "completion": ["2", "4"]})
    >>> load_demonstrations("my-rows", num_samples=1, rows=rows).num_rows
    1
""",
    "trl_dpr.data:openorca_to_conversation": r"""
    >>> row = {"system_prompt": "You are helpful.", "question": "2+2?", "response": "4"}
    >>> openorca_to_conversation(row)["prompt"]
    [{'role': 'system', 'content': 'You are helpful.'}, {'role': 'user', 'content': '2+2?'}]
""",
    "trl_dpr.data:prompts_for_rl": r"""
    >>> ds = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
    >>> prompts_for_rl(ds, "toy")[0]["prompt"] == [{"role": "user", "content": "hi"}]
    True
""",
    "trl_dpr.field_checks:unused_field_problem": r"""
    >>> unused_field_problem("dataset_streaming", True, (False,), "streaming is not supported")
    'dataset_streaming: True is not used: streaming is not supported. Remove it or set it to False'
    >>> unused_field_problem("loss_type", "sigmoid", (["sigmoid"],), "the loss is SPIN's own") is None
    True
""",
    "trl_dpr.reference_callback:check_reference_fraction": r"""
    >>> check_reference_fraction(0.5)
    0.5
    >>> check_reference_fraction(1)
    Traceback (most recent call last):
    ...
    ValueError: reference_fraction α must be strictly between 0 and 1, got 1: ...
""",
    "trl_dpr.reference_manifest:ReferenceManifest": r"""
    >>> m = ReferenceManifest(path="dpr_reference", fraction=0.5, step=50, total_steps=100)
    >>> m.step / m.total_steps
    0.5
""",
    "trl_dpr.reference_manifest:check_model_source": r"""
    >>> check_model_source("runs/nowhere/sft", "Model SFT")
    Traceback (most recent call last):
    ...
    FileNotFoundError: Model SFT: the folder 'runs/nowhere/sft' does not exist. ...
""",
    "trl_dpr.reference_manifest:files_problem": r"""
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp()); _ = (folder / "a.bin").write_bytes(b"12")
    >>> files_problem(folder, {"a.bin": 4})
    'a.bin has 2 bytes, 4 were written'
""",
    "trl_dpr.reference_manifest:mark_sft_complete": r"""
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("config.json", "model.safetensors", "tokenizer.json"): _ = (d / name).write_text("{}")
    >>> mark_sft_complete(d).name, sft_output_problem(d) is None
    ('sft_complete.json', True)
""",
    "trl_dpr.reference_manifest:parse_manifest": r"""
    >>> parse_manifest('{"path": "dpr_reference", "fraction": 0.5, "step": 5, "total_steps": 10}', "x.json").step
    5
""",
    "trl_dpr.reference_manifest:resolve_reference": r"""
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); _ = write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10))
    >>> os.makedirs(os.path.join(d, "dpr_reference"))
    >>> resolve_reference(d)[1].endswith("dpr_reference")
    True
""",
    "trl_dpr.reference_manifest:sft_output_problem": r"""
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "dpr_reference.json").write_text("{}")
    >>> sft_output_problem(d)
    'no final model (model.safetensors or adapter_model.safetensors): the SFT stage did not finish its final save'
""",
    "trl_dpr.reference_manifest:write_manifest": r"""
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10)).name
    'dpr_reference.json'
""",
    "trl_dpr.reward_loading:FrozenModels": r"""
    >>> sorted(FrozenModels(nn.Linear(1, 1), None, processing_class=None).scorer_kwargs())[:3]
    ['models', 'processing_class', 'ref_adapter']
""",
    "trl_dpr.rewards:build_dense_reward": r"""
    >>> type(build_dense_reward("trl_dpr.rewards:CheckpointDifference")).__name__
    'CheckpointDifference'
""",
    "trl_dpr.rewards:check_dense_reward": r"""
    >>> check_dense_reward(object(), "x")
    Traceback (most recent call last):
    ...
    TypeError: x is not a DenseReward: it needs `model_names` (a tuple of model names such as ('sft', 'ref')) and must be callable on ScoredCompletions, returning [B, T] rewards.
""",
    "trl_dpr.rewards:check_models_given": r"""
    >>> check_models_given(CheckpointDifference(), [])  # π_SFT and π_ref are the scorer's own
""",
    "trl_dpr.rewards:describe_reward": r"""
    >>> describe_reward(WithSoftValue(SFTLogProb()))
    'WithSoftValue(reward=SFTLogProb)'
""",
    "trl_dpr.rewards:frozen_model_names": r"""
    >>> frozen_model_names(SFTLogProb()), frozen_model_names(CheckpointDifference())
    (('sft',), ('sft', 'ref'))
""",
    "trl_dpr.rewards:reward_from_settings": r"""
    >>> reward_from_settings({}), reward_from_settings({"dense_reward": "trl_dpr.rewards:SFTLogProb"})
    (CheckpointDifference(), SFTLogProb())
    >>> reward_from_settings({"dense_reward": "trl_dpr.rewards:WithSoftValue"})
    WithSoftValue(reward=CheckpointDifference())
""",
    "trl_dpr.rewards:reward_label": r"""
    >>> reward_label(SFTLogProb())
    'r̂_t = log π_SFT(a_t|s_t) (wo/Baseline ablation: no reference checkpoint)'
""",
    "trl_dpr.rewards:same_reward": r"""
    >>> same_reward(WithSoftValue(SFTLogProb()), WithSoftValue(SFTLogProb())), same_reward(SFTLogProb(), CheckpointDifference())
    (True, False)
""",
    "trl_dpr.rollout_logprobs:SampledTokenLogprobs": r"""
    >>> import torch
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["ab ba"]); model = build_tiny_causal_lm(tok).eval()
    >>> with SampledTokenLogprobs(model) as recorder:
    ...     out = model.generate(torch.tensor([[5, 6]]), do_sample=True, max_new_tokens=3, top_k=0)
    >>> [len(row) for row in recorder.logprobs(out[:, 2:].tolist())]
    [3]
    >>> with SampledTokenLogprobs(model) as recorder:  # 2 beams: 2 rows per output, reordered: not recorded
    ...     out = model.generate(torch.tensor([[5, 6]]), num_beams=2, max_new_tokens=3)
    >>> recorder.logprobs(out[:, 2:].tolist()) is None
    True
""",
    "trl_dpr.scoring:check_temperature": r"""
    >>> check_temperature(0.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be > 0 (the paper samples at 1.0), got 0.0: DPR's reward and its KL term are for sampled completions, scored at log softmax(logits / T).
""",
    "trl_dpr.scoring:check_token_chunk_size": r"""
    >>> check_token_chunk_size(0, "reward_token_chunk_size")
    Traceback (most recent call last):
    ...
    ValueError: reward_token_chunk_size must be a positive number of tokens (memory ∝ chunk × vocab × 4 bytes), got 0.
""",
    "trl_dpr.scoring:completion_logprobs": r"""
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=2)).eval()
    >>> logps, _, _ = completion_logprobs(lm, torch.tensor([[5, 6]]), torch.ones(1, 2), torch.tensor([[7]]), torch.ones(1, 1))
    >>> logps.shape
    torch.Size([1, 1])
""",
    "trl_dpr.token_batches:PaddedBatch": r"""
    >>> batch = pad_batch([[5]], [[6, 7]], pad_token_id=0)
    >>> [t.shape[1] for t in batch.as_tuple()]
    [1, 1, 2, 2]
""",
    "trl_dpr.token_batches:ends_with_eos": r"""
    >>> ids, mask = torch.tensor([[5, 2, 0], [5, 6, 7], [0, 0, 0]]), torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    >>> ends_with_eos(ids, mask, eos_ids=[2, 0])  # ended, cut at the limit, empty
    tensor([ True, False, False])
""",
    "trl_dpr.token_batches:eos_token_ids": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["abc"])
    >>> eos_token_ids(build_tiny_causal_lm(tok), tok) == [tok.eos_token_id]
    True
""",
    "trl_dpr.token_batches:pad_batch": r"""
    >>> batch = pad_batch([[5, 6], [7]], [[8], [9, 10, 11]], pad_token_id=0)
    >>> batch.prompt_ids.tolist(), batch.completion_mask.tolist()
    ([[5, 6], [0, 7]], [[1, 0, 0], [1, 1, 1]])
""",
    "trl_dpr.token_batches:pad_prompts": r"""
    >>> ids, mask = pad_prompts([[5, 6], [7]], pad_token_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [0, 7]], [[1, 1], [0, 1]])
""",
    "trl_dpr.token_batches:render_prompts": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["hi there"])
    >>> ids = render_prompts(tok, [[{"role": "user", "content": "hi"}]])
    >>> tok.decode(ids[0])
    '<|user|>hi<|end|><|assistant|>'
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
