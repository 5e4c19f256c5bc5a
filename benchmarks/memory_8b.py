"""Peak GPU memory and throughput of QLoRA DPR steps on a Llama-3.1-8B-shaped model: one shared 4-bit base with three
adapters (policy, π_SFT, π_ref) against three separate 4-bit models.

    python benchmarks/memory_8b.py                       # GPU: 8B shape, random weights (no download), 1024 + 1024 tokens
    python benchmarks/memory_8b.py --tiny --device cpu   # the same code path on a tiny model (checks the script)
    python benchmarks/memory_8b.py --shape llama-3.2-1b  # a 1B Llama shape: loads in seconds

The random bf16 base is written once to `--workdir` (16 GB for the 8B shape), then loaded in 4-bit (NF4, double
quantisation, bf16 compute) like the QLoRA recipes. π_SFT and π_ref are random LoRA adapters (r=64, all linear layers)
saved as an SFT output with its `dpr_reference/`. Each layout runs in its own subprocess: peak memory is
`torch.cuda.max_memory_allocated` over the training steps (CPU: peak resident memory), throughput is generated plus
scored tokens per second. Each record also holds `trl_dpr.running.memory.plan`'s prediction for the same configuration
(`planned_peak_bytes`, without its margin, and `measured_over_planned`): the check of the memory plan's formulas. On
CPU the ratio says nothing (resident memory counts the Python process, the plan counts GPU tensors).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

LAYOUTS = ("shared_base", "three_models")
LLAMA_31_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=4096,
    rope_theta=500000.0,
    tie_word_embeddings=False,
)
LLAMA_32_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=4096,
    rope_theta=500000.0,
    tie_word_embeddings=False,
)
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=512,
    tie_word_embeddings=False,
)

SHAPES = {"tiny": TINY, "llama-3.2-1b": LLAMA_32_1B, "llama-3.1-8b": LLAMA_31_8B}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="a tiny Llama instead of the 8B shape (= --shape tiny)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    parser.add_argument("--prompt-length", type=int, default=1024)
    parser.add_argument("--completion-length", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument(
        "--generation",
        choices=["generate", "continuous_batching"],
        default="generate",
        help="one `generate` call per rollout batch, or transformers' continuous batching (the recipes')",
    )
    parser.add_argument(
        "--generation-batch-size",
        type=int,
        help="rollout batch (default --batch-size); larger: "
        "each rollout feeds rollout / batch optimizer steps, and --steps / --warmup count rollouts",
    )
    parser.add_argument(
        "--num-blocks", type=int, default=1024, help="continuous batching: paged-cache blocks of 256 tokens"
    )
    parser.add_argument("--max-batch-tokens", type=int, default=4096, help="continuous batching: tokens per forward")
    parser.add_argument("--fast-generation", action="store_true", help="DensePathConfig(fast_generation=True)")
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="continuous batching with CUDA graphs (transformers_continuous_batching_config use_cuda_graph: true; "
        "transformers leaves them off under SDPA, which needs an attention mask)",
    )
    parser.add_argument(
        "--gpu-memory-gib",
        type=float,
        help="cap this process's CUDA memory (torch.cuda.set_per_process_memory_fraction): a smaller card",
    )
    parser.add_argument("--prepare-only", action="store_true", help="write the random checkpoints, run nothing")
    parser.add_argument("--label", help="a name for this run in the JSON line (default: the generation settings)")
    parser.add_argument("--workdir", default="runs/benchmarks/memory_8b")
    parser.add_argument("--only", choices=LAYOUTS, help=argparse.SUPPRESS)
    parser.add_argument("--output", default="benchmarks/results/memory_8b.jsonl")
    args = parser.parse_args(argv)
    args.shape = "tiny" if args.tiny else args.shape
    args.tiny = args.shape == "tiny"
    return args


def shape_folder(args) -> Path:
    return Path(args.workdir) / ("tiny" if args.tiny else f"{args.shape}-shape")


def prepare_checkpoints(args) -> Path:
    """Random base (bf16) + random SFT / reference LoRA adapters, written as an SFT output. Done once."""
    root = shape_folder(args)
    if (root / "sft" / "dpr_reference.json").is_file():  # before the imports: a later run's parent stays light
        return root
    import torch
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from trl_dpr.reference_manifest import ReferenceManifest, write_manifest

    shape = SHAPES[args.shape]
    vocab = {f"t{i}": i for i in range(shape["vocab_size"] - 2)} | {
        "<pad>": shape["vocab_size"] - 2,
        "<eos>": shape["vocab_size"] - 1,
    }
    backend = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", padding_side="left"
    )
    config = LlamaConfig(**shape, pad_token_id=vocab["<pad>"], eos_token_id=vocab["<eos>"], bos_token_id=None)
    device = "cuda" if args.device == "cuda" else "cpu"
    with torch.device(device):
        base = LlamaForCausalLM(config).to(torch.bfloat16)
    base.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    base.name_or_path = base.config._name_or_path = str((root / "base").resolve())  # the adapters record it
    lora = LoraConfig(r=8 if args.tiny else 64, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    for seed, folder in ((1, root / "sft"), (2, root / "sft" / "dpr_reference")):
        torch.manual_seed(seed)
        adapter = get_peft_model(base, lora)
        adapter.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        base = adapter.unload()  # the plain base again, for the next adapter
    write_manifest(
        root / "sft", ReferenceManifest("dpr_reference", 0.5, 1, 2, is_adapter=True, base_model=str(root / "base"))
    )
    del base
    return root


def quantization_kwargs(args):
    import torch
    from transformers import BitsAndBytesConfig

    compute = torch.bfloat16 if args.device == "cuda" else torch.float32
    return dict(
        quantization_config=BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute,
        ),
        dtype=compute,
        device_map={"": 0} if args.device == "cuda" else None,
    )


def run_one(args) -> dict:
    import torch
    from datasets import Dataset
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer

    root = shape_folder(args)
    if args.gpu_memory_gib and args.device == "cuda":  # what a card of that size leaves this process
        torch.cuda.set_per_process_memory_fraction(
            args.gpu_memory_gib * 2**30 / torch.cuda.get_device_properties(0).total_memory
        )
    tokenizer = AutoTokenizer.from_pretrained(root / "base")
    prompt = " ".join(f"t{i % 500}" for i in range(args.prompt_length))
    rollout = args.generation_batch_size or args.batch_size
    per_rollout = rollout // args.batch_size  # optimizer steps per rollout batch
    dataset = Dataset.from_dict({"prompt": [prompt] * max(64, rollout * (args.steps + args.warmup))})
    continuous = args.generation == "continuous_batching"
    config = DensePathConfig(
        output_dir=str(root / f"dpr-{args.only}"),
        per_device_train_batch_size=args.batch_size,
        generation_batch_size=rollout,
        max_steps=(args.steps + args.warmup) * per_rollout,
        max_completion_length=args.completion_length,
        learning_rate=1e-6,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        gradient_checkpointing=True,
        disable_tqdm=True,
        generation_kwargs={"min_new_tokens": args.completion_length},
        reward_token_chunk_size=512,
        fast_generation=args.fast_generation,
        use_transformers_continuous_batching=continuous,
        transformers_continuous_batching_config={
            "num_blocks": args.num_blocks,
            "max_batch_tokens": args.max_batch_tokens,
            "max_memory_percent": 0.8,
            **({"use_cuda_graph": True} if args.cuda_graph else {}),
        }
        if continuous
        else None,
        torch_empty_cache_steps=1 if continuous else None,
    )
    kwargs = quantization_kwargs(args)
    if args.only == "shared_base":
        reward_model = CheckpointRewardModel.from_pretrained(str(root / "sft"), **kwargs)
        trainer = DensePathTrainer(
            reward_model=reward_model, args=config, train_dataset=dataset, processing_class=tokenizer
        )
    else:

        def adapter_model(folder, trainable):
            return PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(root / "base", **kwargs), folder, is_trainable=trainable
            )

        reward_model = CheckpointRewardModel(
            adapter_model(root / "sft", False), adapter_model(root / "sft" / "dpr_reference", False)
        )
        trainer = DensePathTrainer(
            model=adapter_model(root / "sft", True),
            reward_model=reward_model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )

    times = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *unused, **kw):
            if args.device == "cuda":
                torch.cuda.synchronize()
                if len(times) == args.warmup * per_rollout:
                    torch.cuda.reset_peak_memory_stats()
            elif len(times) == args.warmup * per_rollout:
                Path("/proc/self/clear_refs").write_text("5")
            self.start = time.perf_counter()

        def on_step_end(self, *unused, **kw):
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    trainer.add_callback(StepTimer())
    trainer.train()
    card = reserved = None
    if args.device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        card = torch.cuda.get_device_properties(0).total_memory
    else:
        peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    warm = args.warmup * per_rollout
    measured = times[warm:]
    # Tokens a step processed (prompt + completion, as TRL counts them in `num_tokens`) over the steps' time: whole
    # rollouts only, so the steps that generate and the ones that reuse the rollout are both in.
    seen = [(entry["step"], entry["num_tokens"]) for entry in trainer.state.log_history if "num_tokens" in entry]
    tokens = seen[-1][1] - max([count for step, count in seen if step <= warm], default=0)  # logged when generating
    steps = [entry for entry in trainer.state.log_history if "step_time" in entry][warm:]
    profile = {
        name: sum(entry.get(f"timing/{name}") or 0.0 for entry in steps) / len(steps)  # amortised per step
        for name in ("generation", "scoring", "update")
    }
    memory_plan = planned_plan(args, config, trainer.model.config)
    planned = memory_plan.total_bytes - memory_plan.margin.bytes
    return {
        "layout": args.only,
        "label": args.label or label(args),
        "peak_memory_bytes": peak,
        "peak_reserved_bytes": reserved,
        "card_memory_bytes": card,
        "card_memory_used": reserved / card if card else None,
        "median_step_seconds": statistics.median(measured),
        "mean_step_seconds": sum(measured) / len(measured),
        "tokens_per_second": tokens / sum(measured),
        "step_profile_seconds": profile,
        "planned_peak_bytes": planned,
        "planned_peak_phase": memory_plan.peak_phase,
        "planned_phase_bytes": {phase: memory_plan.phase_bytes(phase) for phase in memory_plan.phases},
        "planned_static_bytes": memory_plan.static_bytes,
        "measured_over_planned": peak / planned,
        "rollout_batch": rollout,
        "batch": args.batch_size,
        "prompt_length": args.prompt_length,
        "completion_length": args.completion_length,
        "measured_steps": len(measured),
    }


def label(args) -> str:
    rollout = args.generation_batch_size or args.batch_size
    if args.generation == "continuous_batching":
        name = f"continuous batching, rollout {rollout}, {args.num_blocks} blocks" + (
            ", CUDA graphs" if args.cuda_graph else ""
        )
    else:
        name = f"one generate call at batch {rollout}" + (", static cache" if args.fast_generation else "")
    return name + (f", capped at {args.gpu_memory_gib:g} GiB" if args.gpu_memory_gib else "")


def planned_plan(args, config, model_config):
    """`trl_dpr.running.memory.plan` for this run (prompts of exactly --prompt-length tokens)."""
    from trl import ModelConfig

    from trl_dpr.running.memory import plan

    config.max_prompt_length = args.prompt_length
    model_args = ModelConfig(
        load_in_4bit=True,
        use_bnb_nested_quant=True,
        use_peft=True,
        lora_r=8 if args.tiny else 64,
        lora_target_modules=["all-linear"],
    )
    memory_plan = plan(
        config, model_config, model_args, shared_base=args.only == "shared_base", gpu_memory_gib=args.gpu_memory_gib
    )
    print(memory_plan.table(), file=sys.stderr)
    return memory_plan


def main(argv=None):
    args = parse_args(argv)
    if args.only:
        print(json.dumps(run_one(args)))
        return
    root = prepare_checkpoints(args)
    if args.prepare_only:
        print(f"checkpoints ready in {root}")
        return
    results = {}
    for layout in args.layouts:
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--only", layout]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            raise RuntimeError(f"{layout} failed:\n{done.stderr[-4000:]}")
        results[layout] = json.loads(done.stdout.strip().splitlines()[-1])
    summary = {
        "date": date.today().isoformat(),
        "hardware": (__import__("torch").cuda.get_device_name(0) if args.device == "cuda" else platform.machine()),
        "command": "python benchmarks/memory_8b.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "shape": {"tiny": "tiny", "llama-3.2-1b": "Llama-3.2-1B", "llama-3.1-8b": "Llama-3.1-8B"}[args.shape],
        "versions": versions(),
        "results": results,
    }
    if len(results) == 2:
        summary["peak_memory_ratio_shared_over_three"] = (
            results["shared_base"]["peak_memory_bytes"] / results["three_models"]["peak_memory_bytes"]
        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "a") as f:
        f.write(json.dumps(summary) + "\n")
    for layout, result in results.items():
        profile = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in result["step_profile_seconds"].items())
        print(
            f"{layout:13s} {result['label']}: peak {result['peak_memory_bytes'] / 2**30:.2f} GiB (plan "
            f"{result['planned_peak_bytes'] / 2**30:.2f} GiB without margin, measured / planned "
            f"{result['measured_over_planned']:.2f})   {result['tokens_per_second']:.0f} tokens/s   step: {profile}"
        )
    if "peak_memory_ratio_shared_over_three" in summary:
        print(f"peak memory shared / three models = {summary['peak_memory_ratio_shared_over_three']:.3f}")


def versions() -> dict:
    """The versions a GPU image and this suite may differ in (transformers 5.17 there, 5.24 here)."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes")}


if __name__ == "__main__":
    main()
