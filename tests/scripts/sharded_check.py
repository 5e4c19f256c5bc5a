"""A few DPR steps on tiny models under one engine, recording what `tests/end_to_end/test_sharded.py` compares across engines.

    sharded_check.py ENGINE OUTPUT_DIR MODELS_DIR [LAYOUT,...]   ENGINE: single | ddp | fsdp | zero3
                                                                  LAYOUT: models (default) | shared_base | third
                                                                          | pipeline | spin

`single` is one CPU process (forked from the test process by tests/end_to_end/test_sharded.py); `ddp`, `fsdp` and `zero3` are two CPU processes
(gloo) under `recipes/accelerate_configs/cpu_ddp.yaml` / `fsdp_cpu.yaml` / `zero3_cpu.yaml`. LAYOUT `models`: π_SFT
and π_ref are two models (MODELS_DIR/sft, MODELS_DIR/ref) and the policy a third; `shared_base`: MODELS_DIR/adapters/sft
is a LoRA SFT output with its reference adapter, so π_SFT, π_ref and the policy are three adapters on one base,
scored through the policy's own (wrapped) model; `third`: a user's reward read off a third checkpoint
(MODELS_DIR/teacher, r̂ = log π_teacher − log π_ref), given by name as `models={"teacher": ...}`; `pipeline`: the
recipes' SFT → DPR on the embedded task (distributed_check.py: global whitening, who writes what); `spin`: the SPIN
recipe for two iterations from MODELS_DIR/spin_sft (π_t gathered for generation, a fresh DeepSpeed accelerator for
each iteration). The global batch is the same (4 prompts per
step) and generation is greedy, so every engine samples the same completions and takes the same SGD steps. Several
layouts, comma-separated, run one after the other in the same processes (one launch: the start-up of the processes,
seconds each, is most of a launch), each with its own trainer and accelerator state, into OUTPUT_DIR/LAYOUT/. Each rank
writes `rank{r}.pt`: its rows of the first batch (ids, masks, dense rewards, KL reference, log π_old, advantages),
how its scorers are held (local vs full parameter counts, FSDP units) and the largest difference between its
scorers' (gathered) weights and the weights on disk. Rank 0 writes `final.pt`, the trained policy's full weights.

FSDP on CPU: accelerate 1.15 enables FSDP only for accelerator devices (`AcceleratorState` sets it for MULTI_GPU,
MULTI_XPU, ..., never for MULTI_CPU, and its launcher gives FSDP processes no `use_cpu`). `enable_fsdp_on_cpu` makes
the one decision AcceleratorState makes for those devices, for MULTI_CPU; everything after it (accelerate's FSDP2
preparation of the policy, TRL's `prepare_fsdp` of the scorers, transformers' loading) is the real code.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from accelerate.state import AcceleratorState, PartialState  # noqa: E402
from accelerate.utils import DistributedType  # noqa: E402
from datasets import Dataset  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

import trl_dpr.algorithm as algorithm  # noqa: E402
from trl_dpr import CheckpointRewardModel, DensePathConfig, DensePathTrainer  # noqa: E402

GLOBAL_BATCH = 4


class TeacherMinusReference:
    """A reward from a third checkpoint: r̂_t = log π_teacher(a_t|s_t) − log π_ref(a_t|s_t)."""

    model_names = ("teacher", "ref")

    def __call__(self, scored):
        return (scored.logps["teacher"] - scored.logps["ref"]) * scored.completion_mask


def enable_fsdp_on_cpu() -> None:
    original = AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            # Every AcceleratorState() copies PartialState's fields again: set the type in both shared states.
            PartialState._shared_state["distributed_type"] = self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin

    AcceleratorState.__init__ = init


def prompts(n: int = 16) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(n)]})


def scorer_facts(model, engine: str, disk: dict) -> dict:
    """How a scorer is held on this rank, and the largest gap between its full weights and the weights on disk."""
    local = full = 0
    gap = 0.0
    if engine == "zero3":
        import deepspeed

        params = list(model.parameters())
        local = sum(p.ds_tensor.numel() for p in params)
        full = sum(p.ds_numel for p in params)
        with deepspeed.zero.GatheredParameters(params):
            weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    else:
        weights = {}
        for name, p in model.named_parameters():
            if isinstance(p, DTensor):
                local += p.to_local().numel()
                weights[name] = p.full_tensor().detach()
            else:
                local += p.numel()
                weights[name] = p.detach()
            full += weights[name].numel()
    for name, tensor in weights.items():
        if name in disk:
            gap = max(gap, (tensor.float() - disk[name].float()).abs().max().item())
    units = sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP"))
    return {"local": local, "full": full, "gap_to_disk": gap, "fsdp_units": units}


def fresh_accelerator_state() -> None:
    """Drop the finished layout's accelerator state (accelerate refuses a second DeepSpeed `Accelerator` in one
    process; the process group is kept), as `trl_dpr.lfd.self_play` does between iterations."""
    from accelerate.state import GradientState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    engine, out, models = argv[0], Path(argv[1]), Path(argv[2])
    layouts = argv[3].split(",") if len(argv) > 3 else ["models"]
    torch.set_num_threads(1)
    if engine == "fsdp":
        enable_fsdp_on_cpu()
    if engine == "zero3":
        from without_shm_op import skip_shm_op  # tests/scripts/: no g++ build of DeepSpeed's CPU op (a minute)

        skip_shm_op()
    for i, layout in enumerate(layouts):
        if i:
            fresh_accelerator_state()
        (out / layout).mkdir(parents=True, exist_ok=True)
        if layout == "pipeline":
            from distributed_check import run_pipeline  # tests/scripts/

            run_pipeline(out / layout)
        elif layout == "spin":
            run_spin(out / layout, models / "spin_sft")
        else:
            run_layout(engine, out / layout, models, layout)


def run_spin(out: Path, sft: Path) -> None:
    """recipes/spin.py's main on the demo recipe, small: 6 prompts, 2 iterations, 6 new tokens."""
    from trl_dpr.scripts.spin import main as spin_main

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    spin_main(
        [
            "--config",
            str(recipes / "demo" / "spin.yaml"),
            "--model_name_or_path",
            str(sft),
            "--sft_config",
            "",
            "--evaluation_config",
            "",
            "--output_dir",
            str(out / "spin"),
            "--num_train_samples",
            "6",
            "--num_iterations",
            "2",
            "--max_new_tokens",
            "6",
            "--per_device_train_batch_size",
            "2",
            "--generation_batch_size",
            "2",
            "--use_cpu",
            "false",
            "--ddp_backend",
            "gloo",
        ]
    )


def run_layout(engine: str, out: Path, models: Path, layout: str) -> None:
    shared_base = layout == "shared_base"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = DensePathConfig(
        output_dir=str(out / "dpr"),
        per_device_train_batch_size=GLOBAL_BATCH // world,
        max_steps=2,
        max_completion_length=6,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        warmup_steps=0,
        kl_coef=0.1,
        generation_kwargs={"do_sample": False},
        seed=0,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        bf16=False,
        gradient_checkpointing=False,
        # ZeRO-3 runs with use_cpu false (DeepSpeed's CPU accelerator; accelerate turns DeepSpeed off under use_cpu)
        # and gloo: without a backend, accelerate sees no GPU and sets up no process group of its own.
        use_cpu=engine != "zero3",
        ddp_backend="gloo" if engine == "zero3" else None,
    )
    rank = args.process_index
    assert args.world_size == world, (args.world_size, world)

    if shared_base:
        reward_model = CheckpointRewardModel.from_pretrained(str(models / "adapters" / "sft"), dtype=torch.float32)
    elif layout == "third":
        reward_model = CheckpointRewardModel.from_pretrained(
            str(models / "sft"),
            str(models / "ref"),
            reward=TeacherMinusReference(),
            model_paths={"teacher": str(models / "teacher")},
            dtype=torch.float32,
        )
    else:
        reward_model = CheckpointRewardModel.from_pretrained(
            str(models / "sft"), str(models / "ref"), dtype=torch.float32
        )
    recorded = {}
    original_advantages = algorithm.dense_path_advantages

    def recording_advantages(dense_rewards, sft_logps, policy_logps, mask, **kwargs):
        result = original_advantages(dense_rewards, sft_logps, policy_logps, mask, **kwargs)
        if "rewards" not in recorded:
            recorded.update(
                rewards=dense_rewards,
                kl_reference=sft_logps,
                old_logps=policy_logps,
                mask=mask,
                returns=result["returns"],
                advantages=result["advantages"],
            )
        return result

    algorithm.dense_path_advantages = recording_advantages
    trainer = DensePathTrainer(model=None, reward_model=reward_model, args=args, train_dataset=prompts())
    assert trainer.is_fsdp_enabled == (engine == "fsdp") and trainer.is_deepspeed_enabled == (engine == "zero3")

    for name in () if shared_base else ("sft", "ref"):  # shared base: the scorers are the policy's model, below
        disk = load_file(models / name / "model.safetensors")
        scorer = getattr(trainer.reward_model, f"{name}_model")
        recorded[f"{name}_scorer"] = scorer_facts(scorer, engine, disk)
    if layout == "third":
        disk = load_file(models / "teacher" / "model.safetensors")
        recorded["teacher_scorer"] = scorer_facts(trainer.reward_model.extra_models["teacher"], engine, disk)

    generate_and_score = trainer._generate_and_score_completions

    def recording_batch(inputs):
        output = generate_and_score(inputs)
        if "prompt_ids" not in recorded:
            recorded.update(
                {k: output[k].cpu() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
            )
        return output

    trainer._generate_and_score_completions = recording_batch
    try:
        trainer.train()
    finally:
        algorithm.dense_path_advantages = original_advantages
    recorded["policy"] = scorer_facts(trainer.model, engine, {})  # the trained policy: sharded too
    if shared_base:
        assert (
            trainer.reward_model.sft_model
            is trainer.reward_model.ref_model
            is trainer.accelerator.unwrap_model(trainer.model_wrapped)
        )
    torch.save(recorded, out / f"rank{rank}.pt")

    state = trainer.accelerator.get_state_dict(trainer.model_wrapped)  # the DeepSpeed engine under ZeRO-3
    if rank == 0:
        torch.save({k: v.detach().float().cpu() for k, v in state.items()}, out / "final.pt")


if __name__ == "__main__":
    main()
