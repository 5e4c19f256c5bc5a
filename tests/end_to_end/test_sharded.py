"""FSDP2 and ZeRO-3 (and DDP) on two CPU processes (gloo) through a real `accelerate launch`: the same DPR as one process.

Two layouts: π_SFT and π_ref as two models (the full fine-tuning layout), and as two LoRA adapters sharing one base with
the policy adapter (the adapter layout, `add_policy_adapter`), where scoring goes through the policy's own sharded /
wrapped model. Each engine trains 2 DPR steps on tiny models (global batch 4, greedy generation, SGD) and is compared with one
process on the same batches: the completions are the same tokens, the dense rewards and advantages of every row are
the same numbers, and so are the final weights. Float32; the only difference between the runs is the order of the
gradient all-reduce / reduce-scatter sums, so the final weights agree to ~1e-8 (tolerance 1e-6, against weight
changes of ~0.1 from the two steps). The rewards are also checked against an unpadded float64 forward of the models on
disk: scoring the sharded scorers gathers their embeddings and LM head correctly.

The DDP launch also runs the recipes' SFT → DPR (the `pipeline` layout): whitening over both processes, and only the
main process writing π_ref's manifest and the model cards.
"""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from trl_dpr.algorithm import whiten
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

from ..conftest import CORPUS, Run, run_launch, save_sft_output
from ..reference import strip_padding, unpadded_logprobs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "scripts" / "sharded_check.py"
CONFIGS = {"ddp": "cpu_ddp.yaml", "fsdp": "fsdp_cpu.yaml", "zero3": "zero3_cpu.yaml"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """models/{sft,ref,teacher}: tiny Llamas; models/adapters/sft: a LoRA SFT output (+ dpr_reference/) on
    models/adapters/base; models/spin_sft: an SFT output for SPIN."""
    from peft import LoraConfig, get_peft_model

    from trl_dpr.embedded.tiny_lm import build_tokenizer
    from trl_dpr.reference_manifest import ReferenceManifest, write_manifest

    root = tmp_path_factory.mktemp("models")
    tokenizer = build_tokenizer(CORPUS)
    for name, seed in (("sft", 0), ("ref", 1), ("teacher", 2), ("adapters/base", 0)):
        build_tiny_causal_lm(tokenizer, seed=seed).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    adapters = root / "adapters"
    for seed, folder in ((1, adapters / "sft"), (2, adapters / "sft" / "dpr_reference")):
        torch.manual_seed(seed)
        config = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
        get_peft_model(AutoModelForCausalLM.from_pretrained(adapters / "base"), config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    write_manifest(
        adapters / "sft",
        ReferenceManifest("dpr_reference", 0.5, 5, 10, is_adapter=True, base_model=str(adapters / "base")),
    )
    save_sft_output(root / "spin_sft", tokenizer)
    return root


# The layouts each engine is checked on: all of them run in one launch per engine (process start-up, seconds per
# process, is most of the cost of a launch), the single process on those the sharded runs are compared with.
LAYOUTS = {
    "single": ("models", "shared_base"),
    "ddp": ("shared_base", "pipeline"),
    "fsdp": ("models", "shared_base", "third"),
    "zero3": ("models", "shared_base", "third", "spin"),
}


def _sharded_check():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import sharded_check
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return sharded_check


def launch(engine: str, out: Path, models: Path, layouts: tuple[str, ...]) -> dict:
    """`accelerate launch` of sharded_check.py under `engine`, running `layouts` in turn; per layout, what it recorded.
    The single process the engines are compared with is sharded_check.py's main in a process forked from this one
    (tests/conftest.py's `Run`: no launcher, no new imports)."""
    argv = [engine, str(out), str(models), ",".join(layouts)]
    if engine == "single":
        single = Run(_sharded_check().main, argv, log=out / "single.log")
        assert single.wait(600) == 0, single.stderr()[-4000:]
    else:
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(ROOT / "recipes" / "accelerate_configs" / CONFIGS[engine]),
            str(SCRIPT),
            *argv,
        ]
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "TORCH_EXTENSIONS_DIR": str(out / "torch_extensions"),
        }
        result = run_launch(command, cwd=ROOT, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
    runs = {}
    for layout in layouts:
        if layout in ("pipeline", "spin"):  # what distributed_check.py / the SPIN recipe wrote: its folder
            runs[layout] = out / layout
            continue
        ranks = sorted((out / layout).glob("rank*.pt"))
        runs[layout] = {
            "ranks": [torch.load(r, weights_only=False) for r in ranks],
            "final": torch.load(out / layout / "final.pt"),
        }
    return runs


@pytest.fixture(scope="module")
def launched(models, tmp_path_factory):
    """`launched(engine)[layout]`: what each rank recorded, each engine launched once (on first use) for its layouts."""
    runs = {}

    def run(engine: str) -> dict:
        if engine not in runs:
            if engine == "zero3":
                pytest.importorskip(
                    "deepspeed", reason="ZeRO-3 needs the deepspeed extra: pip install -e '.[deepspeed]'"
                )
            try:
                runs[engine] = launch(engine, tmp_path_factory.mktemp(engine), models, LAYOUTS[engine])
            except AssertionError as failure:  # one failed launch fails its tests once, not once per test
                runs[engine] = failure
        if isinstance(runs[engine], AssertionError):
            raise runs[engine]
        return runs[engine]

    return run


def rows(run: dict, key: str) -> list[list]:
    """Per sequence, the unpadded values of `key` (completion positions), across ranks in rank order."""
    out = []
    for rank in run["ranks"]:
        for values, mask in zip(rank[key], rank["completion_mask"]):
            out.append(strip_padding(values, mask))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fsdp", "zero3"])
def test_two_sharded_processes_train_like_one_process(engine, models, launched):
    sharded, whole = launched(engine)["models"], launched("single")["models"]

    # The scorers and the policy are sharded, not whole copies: each process holds about half of every model.
    for rank in sharded["ranks"]:
        for model in ("sft_scorer", "ref_scorer", "policy"):
            facts = rank[model]
            assert facts["local"] < 0.6 * facts["full"], (model, facts)
        # Every process's scorers hold the weights on disk (fsdp_cpu_ram_efficient_loading leaves none empty).
        assert rank["sft_scorer"]["gap_to_disk"] == 0.0 and rank["ref_scorer"]["gap_to_disk"] == 0.0
    assert_same_training(sharded, whole)
    assert_rewards_are_the_models_on_disk(sharded, models / "sft", models / "ref")
    # Training moved the policy: the runs agree on weights that changed (by up to ~0.16), not on two untouched models.
    initial = load_file(models / "sft" / "model.safetensors")
    assert max((w - initial[n]).abs().max().item() for n, w in whole["final"].items()) > 0.05


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp", "zero3"])
def test_shared_base_adapters_score_through_the_wrapped_policy_like_one_process(engine, models, launched):
    sharded, whole = launched(engine)["shared_base"], launched("single")["shared_base"]
    for rank in sharded["ranks"]:  # one model holds policy, π_SFT and π_ref: sharded except under DDP
        facts = rank["policy"]
        assert (facts["local"] < 0.6 * facts["full"]) == (engine != "ddp"), facts
    assert_same_training(sharded, whole)

    # Only the policy adapter trained: the base and the π_SFT / π_ref adapters are the files they were loaded from,
    # and the policy adapter moved away from the π_SFT adapter it started as.
    adapters = models / "adapters"
    final = sharded["final"]
    base = load_file(adapters / "base" / "model.safetensors")
    for name, files in (("sft", adapters / "sft"), ("ref", adapters / "sft" / "dpr_reference")):
        for key, value in load_file(files / "adapter_model.safetensors").items():  # ...q_proj.lora_A.weight
            assert torch.equal(final[key.replace(".weight", f".{name}.weight")], value), key
            if name == "sft":
                assert not torch.equal(final[key.replace(".weight", ".default.weight")], value), key
    for key, value in base.items():  # model.layers.0.self_attn.q_proj.weight, or ...q_proj.base_layer.weight
        peft_key = f"base_model.model.{key}"
        if peft_key not in final:
            peft_key = peft_key.replace(".weight", ".base_layer.weight")
        assert torch.equal(final[peft_key], value), key


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fsdp", "zero3"])
def test_a_third_checkpoint_of_a_user_reward_is_sharded_like_the_others(engine, models, launched):
    sharded = launched(engine)["third"]
    for rank in sharded["ranks"]:
        for model in ("teacher_scorer", "ref_scorer", "sft_scorer"):  # π_SFT stays: the KL reference
            facts = rank[model]
            assert facts["local"] < 0.6 * facts["full"] and facts["gap_to_disk"] == 0.0, (model, facts)
    assert_rewards_are_the_models_on_disk(sharded, models / "teacher", models / "ref")


@pytest.mark.slow
def test_two_processes_whiten_globally_and_only_the_main_process_writes(launched):
    """The recipes' SFT → DPR on two DDP processes (the `pipeline` layout of the DDP launch, tests/scripts/
    distributed_check.py): whitening statistics are global, and only rank 0 writes π_ref's manifest and model cards."""
    tmp_path = launched("ddp")["pipeline"]

    # whiten() on two row slices, one per process == whiten() of the whole tensor in one process
    whitened = json.loads((tmp_path / "whiten.json").read_text())
    assert torch.allclose(torch.tensor(whitened["distributed"]), torch.tensor(whitened["single"]), atol=1e-6)

    # inside DensePathTrainer: the advantages each process used are its rows of the whole batch, whitened once
    ranks = [torch.load(tmp_path / f"advantages_rank{r}.pt") for r in (0, 1)]
    returns = torch.cat([_pad(r["returns"], ranks) for r in ranks])
    mask = torch.cat([_pad(r["mask"], ranks) for r in ranks])
    used = torch.cat([_pad(r["advantages"], ranks) for r in ranks])
    assert torch.allclose(used, whiten(returns, mask, distributed=False), atol=1e-5)
    assert not torch.allclose(ranks[0]["advantages"], whiten(ranks[0]["returns"], ranks[0]["mask"], distributed=False))

    writers = (tmp_path / "writers.log").read_text().split("\n")
    writers = [w for w in writers if w]  # "<what> <rank>": the model card is written at each final save of SFT and DPR
    assert set(writers) == {"manifest 0", "model_card 0"} and writers.count("manifest 0") == 1
    assert json.loads((tmp_path / "sft" / "dpr_reference.json").read_text())["step"] == 2


def _pad(tensor, ranks):
    """Right-pad a (B, T) tensor to the widest T of both processes (their completions differ in length)."""
    width = max(r["mask"].shape[1] for r in ranks)
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


@pytest.mark.slow
def test_spin_under_zero3_on_two_processes_answers_with_each_full_iterate(models, launched):
    """ZeRO-3 loads π_t partitioned: its answers must still be those of the whole model (gathered for generation),
    and the second iteration must get a fresh DeepSpeed accelerator (the `spin` layout of the ZeRO-3 launch)."""
    from transformers import AutoTokenizer

    from trl_dpr.embedded import load_demonstrations
    from trl_dpr.lfd.self_play import answer_prompts, load_policy, prompts_and_demonstrations

    out, sft = launched("zero3")["spin"] / "spin", models / "spin_sft"
    # no CPU op was built or loaded (each takes a lock there that a killed build leaves behind, hanging later runs)
    assert not (out.parents[1] / "torch_extensions").exists()
    assert (out / "iteration-1").is_dir() and (out / "model.safetensors").is_file()

    # One process, the same batches (2 prompts, seeded by their first index): the answers each iterate gives.
    tokenizer = AutoTokenizer.from_pretrained(sft)
    prompts = prompts_and_demonstrations(load_demonstrations("trl_dpr/embedded-demo", num_samples=6, seed=0), "demo")[
        0
    ]
    for t, model_dir in enumerate([sft, out / "iteration-0"]):
        model = load_policy(str(model_dir), {"dtype": "float32"})
        again = answer_prompts(
            model,
            tokenizer,
            prompts,
            out.parent / f"again-{t}.jsonl",
            temperature=0.8,
            top_p=0.95,
            max_new_tokens=6,
            batch_size=2,
            seed=100_003 * t,
            show_progress=False,
        )
        cached = [json.loads(line) for line in (out / "generations" / f"iteration-{t}.jsonl").read_text().splitlines()]
        assert {r["prompt_index"]: r["completion_ids"] for r in cached} == {
            a["prompt_index"]: a["completion_ids"] for a in again
        }


def assert_same_training(sharded: dict, whole: dict) -> None:
    """Same rows, same per-token rewards / returns / advantages, same final weights, as the single process."""
    assert len(sharded["ranks"]) == 2 and len(whole["ranks"]) == 1
    single = whole
    # Same batches: the rows of the two processes, in rank order, are the single process's rows.
    for key in ("prompt_ids", "completion_ids"):
        mask_key = key.replace("ids", "mask")
        split = [strip_padding(i, m) for r in sharded["ranks"] for i, m in zip(r[key], r[mask_key])]
        whole = [strip_padding(i, m) for r in single["ranks"] for i, m in zip(r[key], r[mask_key])]
        assert split == whole, key

    # Dense rewards, KL reference, returns and advantages (whitened over both processes) per token.
    for key in ("rewards", "kl_reference", "returns", "advantages"):
        for split_row, whole_row in zip(rows(sharded, key), rows(single, key), strict=True):
            assert split_row == pytest.approx(whole_row, abs=1e-5), key

    # The trained policies agree; and training did move them (the comparison is not between two unchanged models).
    assert sharded["final"].keys() == single["final"].keys()
    for name, weight in single["final"].items():
        torch.testing.assert_close(sharded["final"][name], weight, rtol=0, atol=1e-6, msg=name)


def assert_rewards_are_the_models_on_disk(sharded: dict, sft_dir: Path, ref_dir: Path) -> None:
    """Each rank's rewards are log π_SFT − log π_ref of an unpadded float64 forward of the models on disk."""
    sft = AutoModelForCausalLM.from_pretrained(sft_dir).double().eval()
    ref = AutoModelForCausalLM.from_pretrained(ref_dir).double().eval()
    for rank in sharded["ranks"]:
        for b in range(rank["prompt_ids"].size(0)):
            prompt = strip_padding(rank["prompt_ids"][b], rank["prompt_mask"][b])
            completion = strip_padding(rank["completion_ids"][b], rank["completion_mask"][b])
            expected = [
                s - r
                for s, r in zip(unpadded_logprobs(sft, prompt, completion), unpadded_logprobs(ref, prompt, completion))
            ]
            assert strip_padding(rank["rewards"][b], rank["completion_mask"][b]) == pytest.approx(expected, abs=1e-5)


def test_the_zero3_launches_skip_deepspeeds_shared_memory_op(monkeypatch):
    """tests/scripts/without_shm_op.py must reach the function DeepSpeed's TorchBackend calls. It once patched the torch
    package instead (deepspeed.comm re-exports it as `deepspeed.comm.torch`): every ZeRO-3 launch then loaded the op
    from ~/.cache/torch_extensions, and the lock file a killed build left there hung all of them."""
    pytest.importorskip("deepspeed")
    from deepspeed.comm.torch import TorchBackend

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from without_shm_op import skip_shm_op
    finally:
        sys.path.remove(str(SCRIPT.parent))
    backend_globals = TorchBackend.__init__.__globals__
    monkeypatch.setitem(backend_globals, "build_shm_op", backend_globals["build_shm_op"])  # restored afterwards
    skip_shm_op()
    assert backend_globals["build_shm_op"]() is None
