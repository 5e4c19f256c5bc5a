"""The recipes' pipeline on 2 CPU processes (gloo): the `pipeline` layout of sharded_check.py under DDP
(`recipes/accelerate_configs/cpu_ddp.yaml`), or on its own:

    distributed_check.py OUTPUT_DIR

1. `whiten` of row slices on each process == `whiten` of the whole tensor on one process (rank 0 writes both).
2. SFT with ReferenceCheckpointCallback, then DPR: each process records the returns and advantages of its first
   generation batch (`advantages_rank{r}.pt`), and every process appends its rank to `writers.log` whenever it writes
   the reference manifest or a model card (only rank 0 should).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from huggingface_hub import ModelCard  # noqa: E402
from trl import ModelConfig, SFTConfig  # noqa: E402

import trl_dpr.algorithm as algorithm  # noqa: E402
import trl_dpr.reference_callback as reference_callback  # noqa: E402
from trl_dpr import DensePathConfig  # noqa: E402
from trl_dpr.embedded import (
    EMBEDDED_DATASET,  # noqa: E402
    EMBEDDED_MODEL,
)
from trl_dpr.running.pipeline import DPRScriptArguments, SFTScriptArguments, run_dpr, run_sft  # noqa: E402

COMMON = dict(
    bf16=False,
    use_cpu=True,
    report_to="none",
    gradient_checkpointing=False,
    seed=0,
    save_strategy="no",
    disable_tqdm=True,
    logging_steps=1,
)


def main():
    torch.set_num_threads(1)
    run_pipeline(Path(sys.argv[1]))


def run_pipeline(out: Path):
    sft_args = SFTConfig(
        output_dir=str(out / "sft"),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        max_length=128,
        **COMMON,
    )
    rank, world = sft_args.process_index, sft_args.world_size  # also sets up the gloo process group
    assert world == 2, f"expected 2 processes, got {world}"

    # 1. whitening statistics are global
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(4, 6, generator=generator) * 3 + 1
    mask = (torch.rand(4, 6, generator=generator) > 0.3).long()
    mine = algorithm.whiten(values[2 * rank : 2 * rank + 2], mask[2 * rank : 2 * rank + 2])
    gathered = [None, None]
    torch.distributed.all_gather_object(gathered, mine.tolist())
    if rank == 0:
        single = algorithm.whiten(values, mask, distributed=False)
        (out / "whiten.json").write_text(
            json.dumps({"distributed": gathered[0] + gathered[1], "single": single.tolist()})
        )

    # 2. record who writes, and the advantages actually computed
    def record_writer(kind):
        with open(out / "writers.log", "a") as f:
            f.write(f"{kind} {rank}\n")

    original_write_manifest, original_save = reference_callback.write_manifest, ModelCard.save
    reference_callback.write_manifest = lambda *a, **k: (record_writer("manifest"), original_write_manifest(*a, **k))[
        1
    ]
    ModelCard.save = lambda self, *a, **k: (record_writer("model_card"), original_save(self, *a, **k))[1]
    original_advantages, recorded = algorithm.dense_path_advantages, []

    def recording_advantages(dense_rewards, sft_logps, policy_logps, mask, **kwargs):
        result = original_advantages(dense_rewards, sft_logps, policy_logps, mask, **kwargs)
        if not recorded:
            recorded.append({"returns": result["returns"], "advantages": result["advantages"], "mask": mask})
            torch.save(recorded[0], out / f"advantages_rank{rank}.pt")
        return result

    algorithm.dense_path_advantages = recording_advantages

    run_sft(
        SFTScriptArguments(dataset_name=EMBEDDED_DATASET, num_train_samples=32),
        sft_args,
        ModelConfig(model_name_or_path=EMBEDDED_MODEL, dtype="float32"),
    )
    trainer = run_dpr(
        DPRScriptArguments(dataset_name=EMBEDDED_DATASET, num_train_samples=32),
        DensePathConfig(
            output_dir=str(out / "dpr"),
            max_steps=2,
            per_device_train_batch_size=3,
            max_completion_length=8,
            learning_rate=1e-4,
            kl_coef=0.1,
            **COMMON,
        ),
        ModelConfig(model_name_or_path=str(out / "sft"), dtype="float32"),
    )
    trainer.create_model_card()


if __name__ == "__main__":
    main()
