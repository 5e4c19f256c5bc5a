"""The reliability probe as a table: each bad input or fault a user can make, through the recipes as a user runs them
(in process, through `trl_dpr.running.cli.run`, exactly what `python recipes/<stage>.py` and `trl-dpr` do) or through the Python
API. Every one must end with a message that says what was wrong and what to do, exit code 2, no traceback, and,
where the input could be checked beforehand, before any model weights were loaded."""

import copy
import importlib
import json
import re
from pathlib import Path

import pytest
import transformers
import yaml
from datasets import Dataset

from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.reference_manifest import mark_sft_complete
from trl_dpr.running.cli import run

from ..conftest import dpr_config, prompts_dataset, save_sft_output

ROOT = Path(__file__).resolve().parents[2]


class ModelLoaded(AssertionError):
    """Raised by every from_pretrained during a case that should have stopped earlier (not a user error: it surfaces)."""


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(cls, *args, **kwargs):
        raise ModelLoaded(f"{cls.__name__}.from_pretrained{args[:1]} ran before the input was checked")

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))


@pytest.fixture(scope="module")
def world(tmp_path_factory, tokenizer):
    """Folders and files the cases point at: a finished SFT output, broken ones, datasets good and bad."""
    root = tmp_path_factory.mktemp("probe")
    sft = save_sft_output(root / "sft", tokenizer)
    mark_sft_complete(sft)
    unfinished = root / "sft_unfinished"  # killed after π_ref was saved, before the final save
    save_sft_output(unfinished, tokenizer)
    for name in ("model.safetensors", "config.json"):
        (unfinished / name).unlink()
    truncated = root / "sft_truncated"  # a finished output whose weights were cut short afterwards
    save_sft_output(truncated, tokenizer)
    mark_sft_complete(truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    bare = root / "bare"  # a model without the recorded reference
    build_tiny_causal_lm(tokenizer).save_pretrained(bare)
    tokenizer.save_pretrained(bare)
    pad_past_vocab = root / "pad_past_vocab"  # its tokenizer pads with a token the model has no embedding row for
    build_tiny_causal_lm(tokenizer).save_pretrained(pad_past_vocab)
    extended = copy.deepcopy(tokenizer)
    extended.add_special_tokens({"pad_token": "<|newpad|>"})
    extended.save_pretrained(pad_past_vocab)
    (root / "not_a_model").mkdir()
    finished_dpr = root / "finished_dpr"
    finished_dpr.mkdir()
    (finished_dpr / "model.safetensors").write_text("weights of an earlier run")
    (finished_dpr / "trainer_state.json").write_text("{}")
    (root / "empty.jsonl").write_text("")
    (root / "text.jsonl").write_text(json.dumps({"text": "just text"}) + "\n")
    good = json.dumps({"prompt": "What is 2+2?", "completion": "4"})
    (root / "broken_line.jsonl").write_text(f'{good}\n{good}\n{{"prompt": "What is 3+3?", "compl\n{good}\n')
    (root / "prompts.jsonl").write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 2+2?"}]}) + "\n")
    (root / "prompt_answer.jsonl").write_text(
        json.dumps({"prompt": "Convert -40 °C to Fahrenheit.", "answer": "-40"}) + "\n"
    )
    (root / "mixed_prompts.jsonl").write_text(  # a string prompt, then a chat one
        json.dumps({"prompt": "What is 2+2?", "answer": "4"})
        + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": "What is 3+3?"}], "answer": "6"})
        + "\n"
    )
    (root / "no_answers.jsonl").write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": f"Hi {i}"}]}) + "\n" for i in range(2))
    )  # demonstrations with no assistant turn
    (root / "long_answers.jsonl").write_text(  # a demonstration of 600 tokens: longer than the tiny models' 512
        json.dumps(
            {
                "prompt": [{"role": "user", "content": "Count."}],
                "completion": [{"role": "assistant", "content": "7 " * 300}],
            }
        )
        + "\n"
    )
    conversation = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    (root / "conversations.jsonl").write_text("".join(json.dumps({"messages": conversation}) + "\n" for _ in range(4)))
    (root / "prompt_completion.jsonl").write_text(f"{good}\n" * 4)
    (root / "blocker").write_text("a file where a folder should be")
    (root / "holds_ref" / "checkpoint-3").mkdir(parents=True)  # a run's folder, one of whose checkpoints is π_ref
    (root / "not_a_mapping.yaml").write_text("- a\n- list\n")
    (root / "broken.yaml").write_text("learning_rate: 1.0e-6\nmax_steps: 10\n  output_dir: runs/x\n")  # stray indent
    return root


SFT_BASE = {
    "model_name_or_path": "trl_dpr/embedded-tiny-llama",
    "dtype": "float32",
    "dataset_name": "trl_dpr/embedded-demo",
    "num_train_samples": 16,
    "output_dir": "{root}/out_sft",
    "max_steps": 2,
    "per_device_train_batch_size": 4,
    "max_length": 64,
    "use_cpu": True,
    "bf16": False,
    "save_strategy": "no",
    "report_to": "none",
}
DPR_BASE = {
    "model_name_or_path": "{root}/sft",
    "dtype": "float32",
    "dataset_name": "trl_dpr/embedded-demo",
    "num_train_samples": 8,
    "output_dir": "{root}/out_dpr",
    "max_steps": 1,
    "per_device_train_batch_size": 4,
    "max_completion_length": 4,
    "use_cpu": True,
    "bf16": False,
    "save_strategy": "no",
    "report_to": "none",
}
EVAL_BASE = {
    "output_dir": "{root}/out_eval",
    "baseline": "SFT={root}/sft",
    "candidates": ["DPR={root}/sft"],
    "benchmarks": ["demo"],
    "demo_num_prompts": 2,
    "max_new_tokens": 4,
    "generation_backend": "transformers",
    "dtype": "float32",
    "judge": "exact",
}
PREVIEW_BASE = {
    "model_name_or_path": "{root}/sft",
    "dtype": "float32",
    "output_dir": "{root}/out_preview",
    "num_prompts": 2,
    "samples_per_prompt": 2,
    "min_ess": 1.0,
    "max_new_tokens": 4,
    "plot": False,
}
SELF_PLAY_BASE = {
    "model_name_or_path": "{root}/sft",
    "dtype": "float32",
    "dataset_name": "trl_dpr/embedded-demo",
    "num_train_samples": 4,
    "output_dir": "{root}/out_self_play",
    "max_steps": 1,
    "per_device_train_batch_size": 2,
    "max_new_tokens": 4,
    "max_length": 64,
    "use_cpu": True,
    "bf16": False,
    "save_strategy": "no",
    "report_to": "none",
}
BASES = {
    "sft": SFT_BASE,
    "dpr": DPR_BASE,
    "evaluate": EVAL_BASE,
    "preview": PREVIEW_BASE,
    "spin": SELF_PLAY_BASE,
    "gsil": SELF_PLAY_BASE,
}
REMOVE = object()

# (id, recipe, YAML changes (REMOVE deletes a key), extra command line, message the user must get, before any model)
CASES = [
    # -- the YAML itself
    ("unknown key", "dpr", {"learnig_rate": 1e-4}, [], r"Unknown key.*learnig_rate.*did you mean learning_rate", True),
    ("renamed key", "sft", {"torch_dtype": "bfloat16"}, [], r"torch_dtype \(renamed: use `dtype`\)", True),
    ("removed key", "evaluate", {"judge_backoff_s": 2}, [], r"judge_backoff_s \(removed: the openai client", True),
    (
        "a training key in an evaluation YAML",
        "evaluate",
        {"overwrite_output_dir": True},
        [],
        r"overwrite_output_dir \(a key of the training recipes only: sft, dpr, spin, gsil\)",
        True,
    ),
    (
        "renamed evaluation keys",
        "dpr",
        {"num_eval_samples": 10},
        [],
        r"num_eval_samples \(renamed.*demo_num_prompts",
        True,
    ),
    (
        "missing config file",
        "dpr",
        None,
        ["--config", "no/such/recipe.yaml"],
        r"'no/such/recipe.yaml' not found",
        True,
    ),
    (
        "config not a mapping",
        "dpr",
        None,
        ["--config", "{root}/not_a_mapping.yaml"],
        r"must contain a YAML mapping",
        True,
    ),
    (
        "YAML syntax error",
        "dpr",
        None,
        ["--config", "{root}/broken.yaml"],
        r"broken\.yaml, line 3, column 13: not valid YAML",
        True,
    ),
    # -- every value against its dataclass field: type, choices, sign (RecipeParser.check_value)
    (
        "dtype not a dtype",
        "sft",
        {"dtype": "float33"},
        [],
        r"dtype: 'float33' is not one of \['auto', 'bfloat16'",
        True,
    ),
    ("evaluate: dtype not a dtype", "evaluate", {"dtype": "fp32"}, [], r"dtype: 'fp32' is not one of", True),
    (
        "negative max_steps",
        "dpr",
        {"max_steps": -5},
        [],
        r"max_steps: -5 is negative; expected >= 0 \(or -1, its default\)",
        True,
    ),
    (
        "negative max_steps on the command line",
        "sft",
        {},
        ["--max_steps", "-3"],
        r"max_steps: -3 is negative.*\(command line\)",
        True,
    ),
    (
        "learning_rate null",
        "dpr",
        {"learning_rate": None},
        [],
        r"learning_rate: null is not allowed; expected a number",
        True,
    ),
    (
        "learning_rate a word",
        "sft",
        {"learning_rate": "fast"},
        [],
        r"learning_rate: 'fast' is a string; expected a number",
        True,
    ),
    (
        "prompts mixing strings and messages for a π_SFT with no messages record",
        "dpr",
        {"dataset_name": "{root}/mixed_prompts.jsonl", "num_train_samples": 2},
        [],
        r"mixed_prompts\.jsonl mixes string prompts and chat messages, and no `trl-dpr sft` record",
        True,
    ),
    ("fractional step count", "dpr", {"max_steps": 2.5}, [], r"max_steps: 2\.5 is float; expected an integer", True),
    ("boolean as a number", "dpr", {"bf16": 3}, [], r"bf16: 3 is int; expected true or false", True),
    ("NaN learning rate", "dpr", {"learning_rate": float("nan")}, [], r"learning_rate: NaN", True),
    ("preview: negative seed", "preview", {"seed": -1}, [], r"seed: -1 is negative", True),
    # -- keys TRL has that the recipes do not use: refused, not ignored
    (
        "test split",
        "dpr",
        {"dataset_test_split": "validation"},
        [],
        r"dataset_test_split: 'validation' is not used",
        True,
    ),
    (
        "streaming",
        "sft",
        {"dataset_streaming": True},
        [],
        r"dataset_streaming: True is not used.*streaming is not supported",
        True,
    ),
    (
        "eval_strategy without an eval set",
        "dpr",
        {},
        ["--eval_strategy", "steps"],
        r"eval_strategy: 'steps' is not used.*no eval_dataset",
        True,
    ),
    # -- values out of range
    (
        "completions past the model's context",
        "dpr",
        {"max_completion_length": 20000},
        [],
        r"max_completion_length 20000 is more than .*sft's context of 512 tokens \(max_position_embeddings.*"
        r"lower max_completion_length to at most 512",
        True,
    ),
    (
        "packed SFT sequences past the model's context",
        "sft",
        {"max_length": 1000, "packing": True},
        [],
        r"max_length 1000 is more than trl_dpr/embedded-tiny-llama's context of 512 tokens \(max_position_embeddings "
        r"in its config.json\): lower max_length to at most 512\.",
        True,
    ),
    (
        "answers past the model's context",
        "evaluate",
        {"max_new_tokens": 1000},
        [],
        r"the longest demo prompt \d+ \+ max_new_tokens 1000 is more than model SFT's context of 512 tokens "
        r"\(max_position_embeddings in its config.json\): lower max_new_tokens to at most \d+\.",
        True,
    ),
    (
        "preview: samples past the model's context",
        "preview",
        {"max_new_tokens": 1000},
        [],
        r"the longest prompt \d+ \+ max_new_tokens 1000 is more than .*sft's context of 512 tokens "
        r"\(max_position_embeddings in its config.json\): lower max_new_tokens to at most \d+\.",
        True,
    ),
    (
        "spin: answers past the model's context",
        "spin",
        {"max_new_tokens": 1000},
        [],
        r"the longest prompt \d+ \+ max_new_tokens 1000 is more than .*sft's context of 512 tokens "
        r"\(max_position_embeddings in its config.json\): lower max_new_tokens to at most \d+\.",
        True,
    ),
    (
        "gsil: demonstration pairs cut past the model's context",
        "gsil",
        {"dataset_name": "{root}/long_answers.jsonl", "num_train_samples": 1, "max_length": 1024},
        [],
        r"max_length 1024 is more than .*sft's context of 512 tokens \(max_position_embeddings in its config.json\): "
        r"lower max_length to at most 512\. The longest prompt \+ demonstration is \d+ tokens: cut at max_length "
        r"1024, it still reaches past the context\.",
        True,
    ),
    ("num_generations 0", "dpr", {"num_generations": 0}, [], r"num_generations must be >= 1", True),
    (
        "max_completion_length 0",
        "dpr",
        {"max_completion_length": 0},
        [],
        r"max_completion_length must be a positive",
        True,
    ),
    ("max_prompt_length 0", "dpr", {"max_prompt_length": 0}, [], r"max_prompt_length must be a positive", True),
    ("gamma 0", "dpr", {"gamma": 0.0}, [], r"gamma must be in \(0, 1\]", True),
    ("gamma above 1", "dpr", {"gamma": 1.5}, [], r"gamma must be in \(0, 1\]", True),
    ("negative kl_coef", "dpr", {"kl_coef": -1.0}, [], r"kl_coef: -1\.0 is negative; expected >= 0", True),
    ("temperature 0", "dpr", {"temperature": 0.0}, [], r"temperature must be > 0", True),
    ("unknown granularity", "dpr", {"reward_granularity": "episode"}, [], r"reward_granularity", True),
    ("two KL penalties", "dpr", {"beta": 0.04}, [], r"stack two KL penalties", True),
    (
        "scale_rewards is a no-op",
        "dpr",
        {"scale_rewards": "batch"},
        [],
        r"scale_rewards: 'batch' is not used: DPR whitens",
        True,
    ),
    (
        "reward_weights for functions a recipe has not",
        "dpr",
        {"reward_weights": [1.0, 1.0]},
        [],
        r"reward_weights has 2 entries but DensePathTrainer needs 1",
        True,
    ),
    (
        "reward_funcs: a module that does not import",
        "dpr",
        {"reward_funcs": ["my_chex.right_answer"]},
        [],
        r"reward_funcs 'my_chex\.right_answer': cannot import 'my_chex' .*a dotted import path",
        True,
    ),
    (
        "reward_funcs: not a function",
        "dpr",
        {"reward_funcs": ["trl_dpr.rewards:REWARD_FUNC_FORMS"]},
        [],
        r"trl_dpr\.rewards\.REWARD_FUNC_FORMS is a str, not a function",
        True,
    ),
    (
        "reward_funcs: weights of another length",
        "dpr",
        {"reward_funcs": ["think_format_reward"], "reward_weights": [1.0, 1.0, 1.0]},
        [],
        r"reward_weights has 3 entries but DensePathTrainer needs 2",
        True,
    ),
    (
        "reward_funcs: an argument the prompts have no column for",
        "dpr",
        {"reward_funcs": ["trl_dpr.embedded.task.is_correct"]},
        [],
        r"Reward function is_correct needs 'response', which train_dataset has no column for",
        True,
    ),
    (
        "zero train samples (DPR)",
        "dpr",
        {"num_train_samples": 0},
        [],
        r"num_train_samples must be a positive number",
        True,
    ),
    (
        "zero train samples (SFT)",
        "sft",
        {"num_train_samples": 0},
        [],
        r"num_train_samples must be a positive number",
        True,
    ),
    (
        "heatmaps of no rollouts",
        "dpr",
        {"heatmap_steps": 10, "heatmap_samples": 0},
        [],
        r"heatmap_samples must be at least 1",
        True,
    ),
    (
        "more samples than rows",
        "sft",
        {"num_train_samples": 10**7},
        [],
        r"num_train_samples: 10000000 is more than the 6000 rows of 'trl_dpr/embedded-demo' \(split 'train'\): lower "
        r"it to at most 6000\.",
        True,
    ),
    ("alpha 0", "sft", {"reference_fraction": 0.0}, [], r"strictly between 0 and 1", True),
    ("alpha above 1", "sft", {"reference_fraction": 1.5}, [], r"strictly between 0 and 1", True),
    ("max_length 0", "sft", {"max_length": 0}, [], r"max_length must be a positive", True),
    (
        "checkpoint pushes",
        "dpr",
        {"push_to_hub": True, "hub_strategy": "all_checkpoints"},
        [],
        r"hub_strategy='all_checkpoints'",
        True,
    ),
    ("push while offline", "sft", {"push_to_hub": True, "hub_model_id": "me/x"}, [], r"HF_HUB_OFFLINE", True),
    # -- data
    *[
        (
            f"a broken jsonl line ({stage})",
            stage,
            {"dataset_name": "{root}/broken_line.jsonl", REMOVE: ["num_train_samples"] if stage != "preview" else []},
            [],
            r"broken_line\.jsonl:3 is not a JSON object \(Unterminated string",
            True,
        )
        for stage in ("sft", "dpr", "preview")
    ],
    (
        "empty jsonl",
        "sft",
        {"dataset_name": "{root}/empty.jsonl", REMOVE: ["num_train_samples"]},
        [],
        r"empty\.jsonl' is empty",
        True,
    ),
    (
        "missing data file",
        "sft",
        {"dataset_name": "{root}/nowhere.jsonl"},
        [],
        r"nowhere\.jsonl' does not exist",
        True,
    ),
    (
        "a split on a single data file (SFT)",
        "sft",
        {"dataset_name": "{root}/text.jsonl", "dataset_train_split": "nosuch"},
        [],
        r"The split 'nosuch' \(dataset_train_split\) is not in '.*text\.jsonl': a single file is all of split 'train'",
        True,
    ),
    (
        "a split on a single data file (DPR)",
        "dpr",
        {"dataset_name": "{root}/prompts.jsonl"},
        ["--dataset_train_split", "test"],
        r"The split 'test' \(dataset_train_split\) is not in '.*prompts\.jsonl'",
        True,
    ),
    (
        "a data file of another format",
        "sft",
        {"dataset_name": "{root}/not_a_mapping.yaml"},
        [],
        r"not_a_mapping\.yaml' is not a \.json, \.jsonl, \.csv or \.parquet file",
        True,
    ),
    (
        "text-only data for SFT",
        "sft",
        {"dataset_name": "{root}/text.jsonl", REMOVE: ["num_train_samples"]},
        [],
        r"SFT needs a `messages` column",
        True,
    ),
    (
        "a pad token past the model's vocabulary (SFT)",
        "sft",
        {"model_name_or_path": "{root}/pad_past_vocab"},
        [],
        r"pad_past_vocab's tokenizer pads with '<\|newpad\|>' \(id (\d+)\), past the model's vocabulary of \1 tokens",
        True,
    ),
    (
        "prompt_completion declared, conversations given (SFT)",
        "sft",
        {
            "dataset_name": "{root}/conversations.jsonl",
            "dataset_format": "prompt_completion",
            REMOVE: ["num_train_samples"],
        },
        [],
        r"dataset_format: prompt_completion needs `completion` and `prompt` columns, but .*conversations\.jsonl' has "
        r"\['messages'\]",
        True,
    ),
    (
        "messages declared, prompt_completion given (SFT)",
        "sft",
        {
            "dataset_name": "{root}/prompt_completion.jsonl",
            "dataset_format": "messages",
            REMOVE: ["num_train_samples"],
        },
        [],
        r"dataset_format: messages needs `messages` column, but .*prompt_completion\.jsonl' has \['completion', 'prompt'\]",
        True,
    ),
    (
        "messages declared, prompts given (DPR)",
        "dpr",
        {"dataset_name": "{root}/prompt_answer.jsonl", "dataset_format": "messages", REMOVE: ["num_train_samples"]},
        [],
        r"dataset_format: messages needs `messages` column, but .*prompt_answer\.jsonl' has \['answer', 'prompt'\]",
        True,
    ),
    (
        "text-only data for DPR",
        "dpr",
        {"dataset_name": "{root}/text.jsonl", REMOVE: ["num_train_samples"]},
        [],
        r"has no prompts: its columns are \['text'\]",
        True,
    ),
    (
        "demonstrations without an assistant turn",
        "sft",
        {"dataset_name": "{root}/no_answers.jsonl", REMOVE: ["num_train_samples"]},
        [],
        r"2 of 2 `messages` rows of .*no_answers\.jsonl' have no assistant turn \(one has roles \['user'\]\)",
        True,
    ),
    (
        "prompts with answers for SFT",
        "sft",
        {"dataset_name": "{root}/prompt_answer.jsonl", REMOVE: ["num_train_samples"]},
        [],
        r"SFT needs a `messages` column.*a `prompt` \+ `answer` file is for the preview, DPR and evaluation",
        True,
    ),
    (
        "openorca format without its columns",
        "sft",
        {"dataset_format": "openorca"},
        [],
        r"openorca needs `question` and `response`",
        True,
    ),
    (
        "Hub dataset while offline",
        "sft",
        {"dataset_name": "nobody/no-such-dataset"},
        [],
        r"Could not load dataset 'nobody/no-such-dataset'",
        True,
    ),
    # -- folders
    (
        "missing SFT folder (absolute)",
        "dpr",
        {"model_name_or_path": "{root}/no_such_sft"},
        [],
        r"the folder '.*no_such_sft' does not exist",
        True,
    ),
    (
        "missing base model (absolute)",
        "sft",
        {"model_name_or_path": "{root}/no_such_base"},
        [],
        r"the folder '.*no_such_base' does not exist",
        True,
    ),
    (
        "Hub model while offline",
        "sft",
        {"model_name_or_path": "nobody/no-such-model"},
        [],
        r"neither a local folder nor in the Hugging Face cache",
        True,
    ),
    (
        "folder without a model",
        "dpr",
        {"model_name_or_path": "{root}/not_a_model"},
        [],
        r"not a finished SFT output: no final model",
        True,
    ),
    (
        "evaluate: folder without a model",
        "evaluate",
        {"candidates": ["DPR={root}/not_a_model"]},
        [],
        r"holds no model",
        True,
    ),
    (
        "SFT output without its reference",
        "dpr",
        {"model_name_or_path": "{root}/bare"},
        [],
        r"dpr_reference\.json is missing",
        False,
    ),
    (
        "unfinished SFT output",
        "dpr",
        {"model_name_or_path": "{root}/sft_unfinished"},
        [],
        r"not a finished SFT output: no final model",
        True,
    ),
    (
        "truncated SFT weights",
        "dpr",
        {"model_name_or_path": "{root}/sft_truncated"},
        [],
        r"model\.safetensors has \d+ bytes, \d+ were written",
        True,
    ),
    (
        "sft_config writing elsewhere",
        "dpr",
        {"sft_config": "demo/sft.yaml"},
        [],
        r"writes the SFT model to 'runs/demo/sft' but DPR starts from.*own SFT output.*--sft_config \"\"",
        True,
    ),
    (
        "reward class without model_names",
        "dpr",
        {"dense_reward": "tests.user_rewards.my_rewards:NotAReward"},
        [],
        r"my_rewards:NotAReward is not a DenseReward: it needs `model_names`",
        True,
    ),
    (
        "reward kwargs that are not a mapping",
        "dpr",
        {"dense_reward": "trl_dpr.rewards:CheckpointDifference"},
        ["--dense_reward_kwargs", "clip 1.0"],
        r"'clip 1.0' is not a mapping.*key=value",
        True,
    ),
    ("unwritable output_dir", "dpr", {"output_dir": "{root}/blocker/run"}, [], r"not writable", True),
    (
        "fresh run over a finished run",
        "dpr",
        {"output_dir": "{root}/finished_dpr"},
        [],
        r"already holds a run.*Resume it",
        True,
    ),
    (
        "DPR into its SFT output, overwriting",
        "dpr",
        {"output_dir": "{root}/sft", "overwrite_output_dir": True},
        [],
        r"output_dir '[^']*/sft' is π_SFT, the SFT output \(model_name_or_path\).*another output_dir",
        True,
    ),
    (
        "DPR over a folder whose checkpoint is its π_ref",
        "dpr",
        {"output_dir": "{root}/holds_ref", "ref_model_name_or_path": "{root}/holds_ref/checkpoint-3"},
        ["--overwrite_output_dir", "true"],
        r"output_dir '[^']*/holds_ref' holds π_ref \('[^']*/holds_ref/checkpoint-3'\)",
        True,
    ),
    (
        "SPIN into its SFT output, overwriting",
        "spin",
        {"output_dir": "{root}/sft", "overwrite_output_dir": True},
        [],
        r"output_dir '[^']*/sft' is π_0, the SFT output",
        True,
    ),
    (
        "resume with nothing to resume",
        "sft",
        {"resume_from_checkpoint": True},
        [],
        r"holds no complete checkpoint",
        False,
    ),
    (
        "resume from a missing folder",
        "sft",
        {"resume_from_checkpoint": "{root}/no_such_checkpoint"},
        [],
        r"Cannot resume",
        False,
    ),
    (
        "missing evaluation YAML",
        "dpr",
        {"evaluation_config": "{root}/no_such_eval.yaml"},
        [],
        r"no_such_eval\.yaml' not found",
        True,
    ),
    (
        "judge key missing",
        "dpr",
        {"evaluation_config": "{root}/eval_openai.yaml"},
        [],
        r"OPENAI_TEST_KEY_UNSET.*not set",
        True,
    ),
    # -- evaluation and preview
    (
        "evaluate: missing candidate",
        "evaluate",
        {"candidates": ["DPR={root}/no_such_dpr"]},
        [],
        r"Model DPR: the folder .* does not exist",
        True,
    ),
    ("evaluate: unwritable output", "evaluate", {"output_dir": "{root}/blocker/eval"}, [], r"not writable", True),
    (
        "evaluate: exact judge off the task",
        "evaluate",
        {"benchmarks": ["lima"]},
        [],
        r"judge: exact compares answers with the right ones",
        True,
    ),
    (
        "evaluate: your prompts without a check",
        "evaluate",
        {"benchmarks": ["jsonl"], "jsonl_path": "{root}/prompt_answer.jsonl"},
        [],
        r"judge: exact on benchmarks: \[jsonl\] needs to know a right answer",
        True,
    ),
    (
        "evaluate: a check that does not import",
        "evaluate",
        {
            "benchmarks": ["jsonl"],
            "jsonl_path": "{root}/prompt_answer.jsonl",
            "answer_check": "no_such_checks:fahrenheit",
        },
        [],
        r"answer_check 'no_such_checks:fahrenheit': cannot import",
        True,
    ),
    (
        "preview: prompts without answers",
        "preview",
        {"dataset_name": "{root}/prompts.jsonl", "num_prompts": 1},
        [],
        r"quality: exact needs an `answer` column.*has prompts only",
        True,
    ),
    ("evaluate: candidate not NAME=PATH", "evaluate", {"candidates": ["{root}/sft"]}, [], r"must be NAME=PATH", True),
    (
        "evaluate: a key in the config",
        "evaluate",
        {"env": {"OPENAI_API_KEY": "sk-123"}},
        [],
        r"Secrets never go in config files",
        True,
    ),
    (
        "preview: one sample per prompt",
        "preview",
        {"samples_per_prompt": 1},
        [],
        r"samples_per_prompt must be >= 2",
        True,
    ),
    (
        "preview: no reference recorded",
        "preview",
        {"model_name_or_path": "{root}/bare"},
        [],
        r"dpr_reference\.json is missing",
        True,
    ),
    ("preview: pairwise without a judge", "preview", {"quality": "pairwise"}, [], r"needs evaluation_config", True),
]


def case_argv(world, recipe, changes, extra):
    text = lambda value: value.replace("{root}", str(world)) if isinstance(value, str) else value  # noqa: E731
    if changes is None:
        return [text(a) for a in extra]
    values = json.loads(json.dumps(BASES[recipe]))
    for key in changes.get(REMOVE, []):
        values.pop(key)
    values.update({k: v for k, v in changes.items() if k is not REMOVE})
    values = {k: ([text(x) for x in v] if isinstance(v, list) else text(v)) for k, v in values.items()}
    path = world / f"case-{abs(hash(json.dumps(values, sort_keys=True, default=str)))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return ["--config", str(path), *[text(a) for a in extra]]


@pytest.mark.parametrize("case, recipe, changes, extra, message, before_loading", CASES, ids=[c[0] for c in CASES])
def test_a_user_mistake_is_a_message_not_a_traceback(
    world, capsys, monkeypatch, request, case, recipe, changes, extra, message, before_loading
):
    (world / "eval_openai.yaml").write_text(
        yaml.safe_dump(
            {
                **{
                    k: v.replace("{root}", str(world)) if isinstance(v, str) else v
                    for k, v in EVAL_BASE.items()
                    if k != "candidates"
                },
                "candidates": ["DPR=x"],
                "benchmarks": ["alpaca_eval"],
                "judge": "openai",
                "judge_api_key_env": "OPENAI_TEST_KEY_UNSET",
            }
        )
    )
    monkeypatch.delenv("OPENAI_TEST_KEY_UNSET", raising=False)
    if before_loading:
        request.getfixturevalue("no_model_loading")
    module = importlib.import_module(f"trl_dpr.scripts.{recipe}")
    with pytest.raises(SystemExit) as stop:
        run(module.main, case_argv(world, recipe, changes, extra))
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert "Traceback" not in err and "--debug" in err
    assert re.search(message, err, flags=re.S), err


def test_the_table_covers_every_recipe_and_at_least_fifty_cases():
    assert len(CASES) >= 50 and {c[1] for c in CASES} == set(BASES)


# ---- silent wrong results, through the Python API ---------------------------------------------------------------------


def test_an_empty_prompt_set_is_refused_not_trained_on(tokenizer, tmp_path):
    reward_model = CheckpointRewardModel(
        build_tiny_causal_lm(tokenizer, seed=0), build_tiny_causal_lm(tokenizer, seed=1)
    )
    with pytest.raises(ValueError, match="train_dataset is empty"):
        DensePathTrainer(
            reward_model=reward_model, args=dpr_config(tmp_path), train_dataset=Dataset.from_dict({"prompt": []})
        )
    assert not (tmp_path / "dpr" / "model.safetensors").exists()


def test_a_reference_saved_without_its_tokenizer_is_loaded_with_a_warning_that_says_what_was_not_checked(
    tokenizer, tmp_path, caplog
):
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (sft / "dpr_reference" / name).unlink(missing_ok=True)
    with caplog.at_level("WARNING"):
        CheckpointRewardModel.from_pretrained(str(sft))
    assert "saved without its tokenizer files" in caplog.text and "vocabulary size" in caplog.text


def test_the_config_checks_hold_for_python_users_too():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        DensePathConfig(output_dir="unused", report_to="none", bf16=False, temperature=0.0)
    with pytest.raises(ValueError, match="train_dataset has no `prompt` column"):
        from trl_dpr.data import check_prompt_dataset

        check_prompt_dataset(prompts_dataset().rename_column("prompt", "question"), "train_dataset")


class ModelWouldLoad(Exception):
    """Raised where the model would be built: every check before it passed."""


@pytest.mark.parametrize(
    ("max_length", "packed", "fits"), [(65, "packing", False), (65, "padding_free", False), (64, "packing", True)]
)
def test_packed_sft_sequences_past_the_base_models_context_are_refused_before_it_loads(
    tokenizer, tmp_path, monkeypatch, max_length, packed, fits
):
    from trl import ModelConfig, SFTConfig

    import trl_dpr.running.pipeline
    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    base = tmp_path / "base"  # a model of 64 positions
    build_tiny_causal_lm(tokenizer, max_positions=64).save_pretrained(base)
    tokenizer.save_pretrained(base)

    def build_trainer(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.running.pipeline, "SafeSFTTrainer", build_trainer)
    training_args = SFTConfig(
        output_dir=str(tmp_path / "sft"), max_length=max_length, use_cpu=True, bf16=False, report_to="none"
    )
    setattr(training_args, packed, True)
    script_args = SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4)
    with pytest.raises(ModelWouldLoad if fits else ValueError) as error:
        run_sft(script_args, training_args, ModelConfig(model_name_or_path=str(base), dtype="float32"))
    if not fits:
        assert str(error.value) == (
            f"max_length 65 is more than {base}'s context of 64 tokens (max_position_embeddings in its config.json): "
            "lower max_length to at most 64."
        )


def save_remote_code_model(folder, tokenizer, max_positions: int):
    """A model folder whose config is code of its own (`auto_map`): transformers reads it only with trust_remote_code."""
    folder.mkdir()
    tokenizer.save_pretrained(folder)
    (folder / "configuration_ctx.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass CtxConfig(PretrainedConfig):\n    model_type = 'ctx'\n"
    )
    config = {"model_type": "ctx", "auto_map": {"AutoConfig": "configuration_ctx.CtxConfig"}}
    (folder / "config.json").write_text(json.dumps(config | {"max_position_embeddings": max_positions}))
    return folder


def test_model_config_of_reads_a_remote_code_config_only_when_trusted(tokenizer, tmp_path):
    from trl_dpr.field_checks import model_config_of

    folder = save_remote_code_model(tmp_path / "ctx", tokenizer, max_positions=64)
    assert model_config_of(str(folder)) is None  # unreadable without loading more: not checked here
    assert model_config_of(str(folder), trust_remote_code=True).max_position_embeddings == 64


def save_adapter(folder, base) -> str:
    """A LoRA output as PEFT saves it: adapter_config.json naming its base, no config.json."""
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 8}))
    return str(folder)


def test_model_config_of_reads_an_adapter_folders_base_as_the_model_loads_it(tokenizer, tmp_path):
    """A folder with only adapter_config.json resolves to its base's config; a base whose config is code of its own
    only when trusted. A folder with neither: None, or, when the caller says what named it, an error."""
    from trl_dpr.field_checks import model_config_of

    base = tmp_path / "base"
    build_tiny_causal_lm(tokenizer, max_positions=64).save_pretrained(base)
    assert model_config_of(save_adapter(tmp_path / "lora", base)).max_position_embeddings == 64
    remote = save_adapter(tmp_path / "lora-ctx", save_remote_code_model(tmp_path / "ctx", tokenizer, max_positions=96))
    assert model_config_of(remote) is None
    assert model_config_of(remote, trust_remote_code=True).max_position_embeddings == 96
    (tmp_path / "empty").mkdir()
    assert model_config_of(str(tmp_path / "empty")) is None
    with pytest.raises(
        ValueError, match=r"^x.yaml's model_name_or_path is the folder .*empty', which holds no config"
    ):
        model_config_of(str(tmp_path / "empty"), where="x.yaml's model_name_or_path")


def test_sft_checks_a_remote_code_base_models_context_with_the_recipes_trust_remote_code(
    tokenizer, tmp_path, monkeypatch
):
    from trl import ModelConfig, SFTConfig

    import trl_dpr.running.pipeline
    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    base = save_remote_code_model(tmp_path / "base", tokenizer, max_positions=64)

    def build_trainer(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.running.pipeline, "SafeSFTTrainer", build_trainer)
    training_args = SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_length=65,
        packing=True,
        trust_remote_code=True,
        use_cpu=True,
        bf16=False,
        report_to="none",
    )
    script_args = SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4)
    with pytest.raises(ValueError, match=r"max_length 65 is more than .*'s context of 64 tokens"):
        run_sft(script_args, training_args, ModelConfig(model_name_or_path=str(base), dtype="float32"))


def test_an_unpacked_sft_max_length_past_the_context_only_truncates_and_is_a_warning(
    tokenizer, tmp_path, monkeypatch, caplog
):
    """Without packing, max_length caps truncation only: TRL's default 1024 on a 512-token model trains the demo."""
    from trl import ModelConfig, SFTConfig

    import trl_dpr.running.pipeline
    from trl_dpr.running.pipeline import SFTScriptArguments, run_sft

    base = tmp_path / "base"  # a model of 64 positions
    build_tiny_causal_lm(tokenizer, max_positions=64).save_pretrained(base)
    tokenizer.save_pretrained(base)

    def build_trainer(*args, **kwargs):
        raise ModelWouldLoad

    monkeypatch.setattr(trl_dpr.running.pipeline, "SafeSFTTrainer", build_trainer)
    training_args = SFTConfig(
        output_dir=str(tmp_path / "sft"), max_length=1024, use_cpu=True, bf16=False, report_to="none"
    )
    script_args = SFTScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4)
    with pytest.raises(ModelWouldLoad), caplog.at_level("WARNING", logger="trl_dpr.running.pipeline"):
        run_sft(script_args, training_args, ModelConfig(model_name_or_path=str(base), dtype="float32"))
    assert [record.getMessage() for record in caplog.records if record.name == "trl_dpr.running.pipeline"] == [
        f"max_length 1024 is more than {base}'s context of 64 tokens (max_position_embeddings in its config.json): "
        "lower max_length to at most 64. Not packed: only an example longer than the context would reach past it."
    ]


# A recipe launched by `accelerate launch` directly (not through `trl-dpr`, which checks this before launching): its
# device and precision must be what accelerate launched it with (its ACCELERATE_* environment), or it stops before
# anything loads. (environment accelerate gave the process, YAML changes, the one line)
LAUNCH_MISMATCHES = [
    (
        {"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_USE_CPU": "True"},
        {},
        r"The recipe trains in fp32 but accelerate launch sets mixed_precision: bf16; change one of them: --bf16 true "
        r"\(the recipe\), or --mixed_precision no \(accelerate launch\)",
    ),
    (
        {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "False"},
        {},
        r"trains on the CPU \(use_cpu: true\) but accelerate launch is set up for the GPU",
    ),
    (
        {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_CPU": "True"},
        {"bf16": True, "fp16": True},
        r"At most one of fp16 and bf16 can be True",
    ),  # transformers' own check, while parsing
    ({}, {"use_cpu": False}, r"trains on the GPU \(use_cpu: false\) but no GPU is visible here: set --use_cpu true"),
]


@pytest.mark.parametrize("recipe", ["sft", "dpr"])
@pytest.mark.parametrize(
    ("environment", "changes", "message"),
    LAUNCH_MISMATCHES,
    ids=["fp32 recipe, bf16 launch", "CPU recipe, GPU launch", "bf16 and fp16", "GPU recipe, no GPU"],
)
def test_a_launched_recipe_on_another_device_or_precision_than_its_launcher_stops_before_loading(
    world, tmp_path, capsys, monkeypatch, no_model_loading, recipe, environment, changes, message
):
    import torch

    if not environment and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for name in ("ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    argv = case_argv(world, recipe, {**changes, "output_dir": str(tmp_path / "out")}, [])
    with pytest.raises(SystemExit) as stop:
        run(importlib.import_module(f"trl_dpr.scripts.{recipe}").main, argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err and re.search(message, err), err
    assert not (tmp_path / "out").exists()  # stopped before its output folder was claimed


def test_a_launched_recipe_that_agrees_with_its_launcher_passes_the_check(monkeypatch):
    from trl_dpr.running.placement import LaunchPlacement, check_launched_run
    from trl_dpr.scripts.dpr import make_parser

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    launch = LaunchPlacement.from_environment()
    training_args = make_parser().parse_args_and_config(["--config", "recipes/demo/dpr.yaml"])[1]
    assert str(check_launched_run(training_args, launch)) == "CPU, fp32"


@pytest.mark.parametrize(
    ("declared", "kept"), [("messages", ["messages"]), ("prompt_completion", ["completion", "prompt"])]
)
def test_the_declared_dataset_format_is_the_form_trained_on(tmp_path, declared, kept):
    """A file with both forms: the one `dataset_format` names is what SFT reads (the other was read before)."""
    from trl_dpr.data import load_demonstrations

    row = {
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        "prompt": "3+3?",
        "completion": "6",
    }
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert sorted(load_demonstrations(str(path), dataset_format=declared).column_names) == kept
