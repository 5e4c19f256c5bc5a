r"""Memory plan of a recipe: GPU memory per process, term by term, from the model's `config.json` alone (no weights).

    python -m trl_dpr.running.memory --config recipes/llama-3.1-8b/dpr/config_qlora.yaml

    total = static + max(phase) + margin,      margin = 1 GiB (CUDA context) + 10 % (allocator fragmentation)

Static terms (weights, adapters, optimizer) are held all run; the phases (generation, scoring, log π_old, training
step) one at a time. Every term is an estimate of the dominant tensors; the formulas: docs/memory.md.

Example:
    >>> from transformers import LlamaConfig
    >>> from trl_dpr.running.memory import kv_cache_bytes_per_token
    >>> kv_cache_bytes_per_token(LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
    ...                                      hidden_size=4096)) // 1024   # Llama-3.1-8B: 128 KiB per token
    128
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..field_checks import model_config_of as _model_config_of
from ..field_checks import rope_parameter_sets

if TYPE_CHECKING:  # torch is imported where a model is built: `trl-dpr memory --help` needs none of it
    from torch import nn

GIB = 2**30
BF16 = 2
FP32 = 4
CUDA_CONTEXT_BYTES = GIB  # CUDA context, cuBLAS workspaces, NCCL buffers: ≈ 0.5–1 GiB per process
FRAGMENTATION = 0.10  # PyTorch's caching allocator rarely packs tensors perfectly
CONTINUOUS_BATCHING = "generation (continuous batching)"  # the plan's phase of transformers' paged generation
_MODEL_LABELS = {"sft": "π_SFT", "ref": "π_ref"}  # the SFT output's models (a reward's others: by their own names)


@dataclass
class MemoryTarget:
    """The GPU a recipe is written for. Recipe keys (read by `trl_dpr.running.memory`, unused by training)."""

    gpu_memory_gib: float | None = field(
        default=None,
        metadata={
            "help": "GPU memory (GiB) of each GPU this recipe is written for, e.g. 79 for an 80 GB H100. "
            "`trl-dpr memory --config <recipe>` checks the recipe's memory plan against it."
        },
    )
    num_gpus: int = field(
        default=1,
        metadata={
            "help": "GPUs the recipe is launched on (the accelerate config's num_processes): the memory plan shards "
            "full fine-tuning over them (ZeRO-3 / FSDP) and splits the generation batch."
        },
    )


@dataclass(frozen=True)
class MemoryTerm:
    """One line of a memory plan: what it is, its size, and the numbers of its formula."""

    name: str
    bytes: float
    formula: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass
class MemoryPlan:
    """Per-process GPU memory: `static` terms held all run, `phases` of which one is live at a time, a margin.

    `total_bytes = Σ static + max over phases of Σ phase + margin`. With `on_cpu` it is each process's RAM (no CUDA
    context in the margin).
    """

    title: str
    static: list[MemoryTerm]
    phases: dict[str, list[MemoryTerm]]
    gpu_memory_gib: float | None = None
    notes: list[str] = field(default_factory=list)
    on_cpu: bool = False

    @property
    def unit(self) -> str:
        """What one process holds its memory on: "GPU", or "process" for a CPU run."""
        return "process" if self.on_cpu else "GPU"

    @property
    def static_bytes(self) -> float:
        return sum(t.bytes for t in self.static)

    def phase_bytes(self, phase: str) -> float:
        return sum(t.bytes for t in self.phases[phase])

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_bytes)

    @property
    def margin(self) -> MemoryTerm:
        body = self.static_bytes + self.phase_bytes(self.peak_phase)
        if self.on_cpu:
            return MemoryTerm("margin", FRAGMENTATION * body, "10 % of the above (allocator)")
        return MemoryTerm(
            "margin", CUDA_CONTEXT_BYTES + FRAGMENTATION * body, "1 GiB CUDA context + 10 % of the above (allocator)"
        )

    @property
    def total_bytes(self) -> float:
        return self.static_bytes + self.phase_bytes(self.peak_phase) + self.margin.bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_memory_gib is None else self.total_gib <= self.gpu_memory_gib

    def table(self) -> str:
        """The plan as a Markdown table (one row per term, the peak phase marked, the total against the GPU, or per
        process on CPU)."""
        rows = [f"**{self.title}**", "", "| term | GiB | formula |", "|---|---:|---|"]
        rows += [f"| {t.name} | {t.gib:.2f} | {t.formula} |" for t in self.static]
        for phase, terms in self.phases.items():
            mark = " (peak)" if phase == self.peak_phase else ""
            rows.append(f"| *phase: {phase}{mark}* | *{self.phase_bytes(phase) / GIB:.2f}* | |")
            rows += [f"| &nbsp;&nbsp;{t.name} | {t.gib:.2f} | {t.formula} |" for t in terms]
        rows.append(f"| {self.margin.name} | {self.margin.gib:.2f} | {self.margin.formula} |")
        verdict = ""
        if self.gpu_memory_gib is not None:
            verdict = f" of {self.gpu_memory_gib:g} GiB: {'fits' if self.fits else 'DOES NOT FIT'}"
        rows.append(
            f"| **total per {self.unit}** | **{self.total_gib:.2f}** | static + {self.peak_phase} + margin{verdict} |"
        )
        rows += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(rows)


# ---- the model's shape, from its config -------------------------------------------------------------------------


def kv_cache_bytes_per_token(config, dtype_bytes: int = BF16, tokens: int | None = None) -> int:
    """KV-cache bytes per token of a sequence: Σ over layers of 2 (K, V) × n_kv × head_dim × dtype bytes.

    With `tokens` (the sequence length), sliding-window layers count only the tokens their window keeps:
    `min(tokens, window) / tokens` of their share (Gemma-3: 5 of every 6 layers, window 1024).
    """
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    per_layer = 2 * text.num_key_value_heads * head_dim * dtype_bytes
    layer_types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    window = getattr(text, "sliding_window", None)
    total = 0.0
    for layer_type in layer_types:
        share = 1.0
        if tokens is not None and window and layer_type == "sliding_attention":
            share = min(tokens, window) / tokens
        total += per_layer * share
    return int(total)


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts and sizes of a model, counted on the meta device from its config (no weights, no download)."""

    config: object
    parameters: int  # every parameter once (tied embeddings counted once)
    linear_parameters: int  # weights of the nn.Linear layers a 4-bit load quantises (all but the LM head)
    root_parameters: int  # embeddings + LM head: what scoring gathers from the root module when sharded
    largest_layer_parameters: int  # the largest decoder layer: the unit ZeRO-3 / FSDP gathers
    linear_layers: tuple[tuple[str, int, int], ...]  # (name, in_features, out_features), LM head excluded

    @classmethod
    def from_config(cls, config) -> ModelShape:
        import torch
        from torch import nn
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        output = model.get_output_embeddings()
        linear_layers = tuple(
            (name, module.in_features, module.out_features)
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not output
        )
        root = {id(p): p.numel() for m in (model.get_input_embeddings(), output) for p in m.parameters()}
        layers = _decoder_layers(model)
        return cls(
            config=config,
            parameters=sum(p.numel() for p in model.parameters()),
            linear_parameters=sum(i * o for _, i, o in linear_layers),
            root_parameters=sum(root.values()),
            largest_layer_parameters=max(sum(p.numel() for p in layer.parameters()) for layer in layers),
            linear_layers=linear_layers,
        )

    @property
    def text(self):
        return self.config.get_text_config()

    @property
    def head_dim(self) -> int:
        return getattr(self.text, "head_dim", None) or self.text.hidden_size // self.text.num_attention_heads

    def lora_parameters(self, rank: int, target_modules) -> int:
        """r·(in + out) summed over the linear layers LoRA adapts: `"all-linear"` (all but the LM head, as PEFT), or
        module names matched on the last component of the layer's name (PEFT's rule for a list)."""
        if target_modules in ("all-linear", ["all-linear"]):
            chosen = self.linear_layers
        else:
            names = [target_modules] if isinstance(target_modules, str) else list(target_modules or [])
            chosen = [layer for layer in self.linear_layers if layer[0].split(".")[-1] in names]
        return sum(rank * (i + o) for _, i, o in chosen)


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated decoder blocks (the `ModuleList` with the most parameters)."""
    from torch import nn

    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    return list(max(lists, key=lambda m: sum(p.numel() for p in m.parameters())))


# ---- the plan ---------------------------------------------------------------------------------------------------


def _term(name: str, value: float, formula: str) -> MemoryTerm:
    return MemoryTerm(name, float(value), formula)


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


_DTYPE_BYTES = {"bfloat16": (BF16, "bf16"), "float16": (BF16, "fp16"), "float32": (FP32, "fp32")}


def precision(training_args, model_args=None, model_config=None) -> tuple[int, int, str]:
    """`(weight bytes, activation bytes, weight dtype)` of a recipe: the weights load in its `dtype`; `auto` is the
    checkpoint's own (`model_config`'s `dtype`, as transformers reads it); none, or `auto` with no dtype in the config:
    16-bit under `bf16`/`fp16`, else fp32. Activations (matmul intermediates) are 16-bit under `bf16`/`fp16`
    (autocast), else the weights'. What a layer hands on (the residual stream: KV cache, gradient checkpoints, last
    hidden states) keeps the weights' dtype under autocast: `plan` counts it at the weight bytes.

    Example:
        >>> from types import SimpleNamespace
        >>> from transformers import LlamaConfig
        >>> bf16 = SimpleNamespace(bf16=True, fp16=False)
        >>> precision(bf16, SimpleNamespace(dtype="float32"))
        (4, 2, 'fp32')
        >>> precision(bf16, SimpleNamespace(dtype="auto"), LlamaConfig(dtype="float32"))  # an fp32 checkpoint
        (4, 2, 'fp32')
    """
    mixed = (
        "bf16" if getattr(training_args, "bf16", False) else "fp16" if getattr(training_args, "fp16", False) else None
    )
    dtype = getattr(model_args, "dtype", None)
    if dtype == "auto":
        dtype = checkpoint_dtype(model_config)
    weights, name = _DTYPE_BYTES.get(dtype) or ((BF16, mixed) if mixed else (FP32, "fp32"))
    return weights, BF16 if mixed else weights, name


def checkpoint_dtype(model_config) -> str | None:
    """The dtype `from_pretrained(dtype="auto")` loads a checkpoint in, as a name ("bfloat16"): its config's `dtype`
    (`torch_dtype` in older files), or None when the config names none (transformers then reads the weights)."""
    if model_config is None:
        return None
    config = model_config.config if isinstance(model_config, ModelShape) else model_config
    dtype = getattr(config, "dtype", None) or getattr(config.get_text_config(), "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def plan(
    training_args,
    model_config,
    model_args=None,
    *,
    gpu_memory_gib: float | None = None,
    num_gpus: int = 1,
    shared_base: bool = True,
    title: str | None = None,
    on_cpu: bool = False,
) -> MemoryPlan:
    """The memory plan of one training process (the formulas: docs/memory.md).

    `training_args` is a `DensePathConfig` or TRL's `SFTConfig`; `model_args` None is full fine-tuning, sharded over
    `num_gpus` (QLoRA is not). `shared_base`: π_SFT, π_ref and the policy are adapters on one base. `on_cpu` is not
    read from `training_args.use_cpu`: a GPU plan is often made on a machine without one.
    """
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    text = shape.text
    is_dpr = hasattr(training_args, "kl_coef")
    quantized = bool(model_args is not None and getattr(model_args, "load_in_4bit", False))
    use_peft = bool(model_args is not None and getattr(model_args, "use_peft", False))
    sharded = num_gpus > 1 and not use_peft  # full fine-tuning over several GPUs: ZeRO-3 / FSDP
    shards = num_gpus if sharded else 1
    over = f" / {shards} {'processes' if on_cpu else 'GPUs'}" if sharded else ""
    batch = training_args.per_device_train_batch_size
    layers, hidden, mlp, vocab = text.num_hidden_layers, text.hidden_size, text.intermediate_size, text.vocab_size
    if is_dpr:
        prompt, completion = training_args.max_prompt_length, training_args.max_completion_length
        if prompt is None:
            raise ValueError("The memory plan needs max_prompt_length (the longest prompt kept, paper: 1024).")
    else:
        prompt, completion = 0, training_args.max_length
        if completion is None:
            raise ValueError("The memory plan needs max_length (the longest SFT sequence, paper: 2048).")
    tokens = prompt + completion
    static, phases, notes = [], {}, []
    weight_bytes, act, weight_dtype = precision(training_args, model_args, shape)
    if getattr(model_args, "dtype", None) == "auto" and checkpoint_dtype(shape) is None:
        notes.append(
            f"dtype: auto, and the model's config.json names no dtype: planned in {weight_dtype}; transformers loads "
            "the weights' own dtype. Set dtype in the recipe to plan the one that loads."
        )

    # -- weights ---------------------------------------------------------------------------------------------------
    # DPR holds the policy and the frozen models its reward reads (`frozen_model_names`: π_SFT always, for the KL). From
    # an adapter SFT output they are adapters: on one base (`shared_base`), or one base each. A reward that reads other
    # models needs a full SFT output (CheckpointRewardModel.from_pretrained loads those whole): whole models then.
    from ..rewards import frozen_model_names

    frozen = [_MODEL_LABELS.get(name, name) for name in frozen_model_names(training_args.reward())] if is_dpr else []
    adapter_sft = use_peft and set(frozen) <= set(_MODEL_LABELS.values())
    copies = 1 if adapter_sft and shared_base else 1 + len(frozen)
    held = ""
    if is_dpr:
        models = ", ".join(["policy", *frozen])
        held = f" (one base: {models} are adapters on it)" if copies == 1 else f" ({models})"
    if quantized:
        constants = 0.0159 if getattr(model_args, "use_bnb_nested_quant", False) else 0.0625
        other = shape.parameters - shape.linear_parameters
        static.append(
            _term(
                "base weights (NF4)",
                copies * (shape.linear_parameters * (0.5 + constants) + other * weight_bytes),
                f"{copies} × ({shape.linear_parameters / 1e9:.2f} B linear × {0.5 + constants:.4f} B + "
                f"{other / 1e9:.2f} B other × {weight_bytes} B)" + held,
            )
        )
    else:
        static.append(
            _term(
                f"weights ({weight_dtype})",
                copies * shape.parameters * weight_bytes / shards,
                f"{copies} × {shape.parameters / 1e9:.2f} B params × {weight_bytes} B" + over + held,
            )
        )
    if sharded:
        static.append(
            _term(
                "gathered layer (ZeRO-3 / FSDP)",
                2 * shape.largest_layer_parameters * weight_bytes,
                f"2 × {shape.largest_layer_parameters / 1e6:.0f} M params × {weight_bytes} B (the layer computed + the "
                "one prefetched)",
            )
        )

    # -- adapters, gradients, optimizer ------------------------------------------------------------------------------
    if use_peft:
        rank = getattr(model_args, "lora_r", 16)
        lora = shape.lora_parameters(rank, getattr(model_args, "lora_target_modules", None) or "all-linear")
        trainable_bytes = BF16 if quantized else FP32
        if is_dpr and adapter_sft:
            static.append(
                _term(
                    f"frozen adapter{'s' if len(frozen) > 1 else ''} {', '.join(frozen)} (fp32)",
                    len(frozen) * lora * FP32,
                    f"{len(frozen)} × {lora / 1e6:.1f} M × 4 B",
                )
            )
        static.append(
            _term(
                "trainable adapter + grad + AdamW m, v",
                lora * 4 * trainable_bytes,
                f"{lora / 1e6:.1f} M (r={rank}) × 4 × {trainable_bytes} B",
            )
        )
    elif weight_bytes == FP32 or not sharded:
        # fp32 weights are their own master copy. So are 16-bit ones on one GPU: the Trainer's autocast keeps no fp32
        # copy and torch's AdamW makes m, v `zeros_like(p)`, so grad, m and v take the weights' dtype. ZeRO-3 (below)
        # keeps an fp32 master and fp32 m, v.
        static.append(
            _term(
                f"grad + AdamW m, v ({weight_dtype})",
                shape.parameters * 3 * weight_bytes / shards,
                f"{shape.parameters / 1e9:.2f} B × {3 * weight_bytes} B" + over,
            )
        )
    else:
        static.append(
            _term(
                "grad + fp32 master + AdamW m, v",
                shape.parameters * (BF16 + 3 * FP32) / shards,
                f"{shape.parameters / 1e9:.2f} B × 14 B" + over,
            )
        )

    # -- phases ----------------------------------------------------------------------------------------------------
    def one_layer(rows: int, length: int) -> float:  # no-grad forward, one layer's tensors live
        return rows * length * (4 * hidden + 3 * mlp) * act

    if is_dpr:
        _generation_phase(
            training_args,
            shape,
            num_gpus,
            prompt,
            completion,
            static,
            phases,
            gpu_memory_gib,
            notes,
            act,
            weight_bytes,
        )
        scoring = [
            _term(
                "one layer live", one_layer(batch, tokens), f"{batch} × {tokens} × (4·{hidden} + 3·{mlp}) × {act} B"
            ),
            _term(
                "last hidden states",
                batch * tokens * hidden * weight_bytes,
                f"{batch} × {tokens} × {hidden} × {weight_bytes} B",
            ),
            _term(
                "LM-head chunk",
                training_args.reward_token_chunk_size * vocab * FP32 * 3,
                f"reward_token_chunk_size {training_args.reward_token_chunk_size} × {vocab} × 4 B × 3",
            ),
        ]
        if sharded:
            scoring.append(
                _term(
                    "root params gathered",
                    shape.root_parameters * weight_bytes,
                    f"{shape.root_parameters / 1e6:.0f} M × {weight_bytes} B",
                )
            )
        phases[f"scoring {', '.join(frozen)}"] = scoring
        phases["log π_old forward"] = [
            _term(
                "one layer live", one_layer(batch, tokens), f"{batch} × {tokens} × (4·{hidden} + 3·{mlp}) × {act} B"
            ),
            _term("logits", batch * completion * vocab * FP32, f"{batch} × {completion} × {vocab} × 4 B"),
        ]
    if is_dpr and sharded:
        notes.append(
            f"Assumes ZeRO-3 (--accelerate_config zero3). Under FSDP (fsdp2) TRL's prepare_fsdp makes each scorer ONE FSDP unit "
            f"(tests/end_to_end/test_sharded.py), so scoring gathers a whole scorer: + {_gib(shape.parameters * weight_bytes)}."
        )
        if not training_args.use_vllm:
            notes.append(
                f"Without vLLM, ZeRO-3 gathers the whole policy to generate (ds3_gather_for_generation): "
                f"+ {_gib(shape.parameters * weight_bytes)} during generation."
            )
    logit_tokens, logit_bytes = (completion, 8) if is_dpr else (tokens, 12)
    if training_args.gradient_checkpointing:
        training = [
            _term(
                "checkpoints",
                layers * batch * tokens * hidden * weight_bytes,
                f"{layers} × {batch} × {tokens} × {hidden} × {weight_bytes} B",
            ),
            _term(
                "layer recompute + backward",
                2 * batch * tokens * (8 * hidden + 5 * mlp) * act,
                f"2 × {batch} × {tokens} × (8·{hidden} + 5·{mlp}) × {act} B",
            ),
        ]
    else:
        training = [
            _term(
                "activations (no checkpointing)",
                layers * batch * tokens * (8 * hidden + 5 * mlp) * act,
                f"{layers} × {batch} × {tokens} × (8·{hidden} + 5·{mlp}) × {act} B",
            )
        ]
    training.append(
        _term(
            "loss logits",
            batch * logit_tokens * vocab * logit_bytes,
            f"{batch} × {logit_tokens} × {vocab} × {logit_bytes} B",
        )
    )
    phases["training step"] = training
    kind = "DPR" if is_dpr else "SFT"
    layout = "QLoRA" if quantized else ("LoRA" if use_peft else "full")
    return MemoryPlan(
        title=title or f"{kind}, {layout}, {num_gpus} {'process(es)' if on_cpu else 'GPU(s)'}",
        static=static,
        phases=phases,
        gpu_memory_gib=gpu_memory_gib,
        notes=notes,
        on_cpu=on_cpu,
    )


def vllm_default_max_model_len(model_config) -> int:
    """vLLM's max_model_len when none is set (`_get_and_verify_max_len` in vllm/config/model.py): the config's
    model_max_length or max_position_embeddings (2048 without either), × the rope `factor` for every rope type but
    llama3 and longrope (YaRN: factor × original_max_position_embeddings); Gemma 3's is scaled already. Newer vLLM
    defaults a longrope model (Phi-3) to its shorter original_max_position_embeddings; the plan keeps
    max_position_embeddings there, so that it never plans less than any vLLM in TRL's range holds.

    Example:
        >>> from transformers import LlamaConfig
        >>> linear = {"rope_type": "linear", "factor": 2.0}  # vLLM scales max_position_embeddings by it
        >>> vllm_default_max_model_len(LlamaConfig(max_position_embeddings=4096, rope_parameters=linear))
        8192
    """
    text = model_config.get_text_config()
    length = getattr(text, "model_max_length", None) or getattr(text, "max_position_embeddings", None) or 2048
    if "gemma3" in getattr(text, "model_type", ""):  # its max_position_embeddings (128K) is the scaled one
        return int(length)
    factor = 1.0
    for parameters in rope_parameter_sets(text):
        rope_type = parameters.get("rope_type", parameters.get("type", "default"))
        if rope_type in ("su", "longrope", "llama3"):  # their max_position_embeddings is the long context already
            continue
        if isinstance(parameters.get("factor"), (int, float)):  # "default" has none, a config may say null (vLLM: 1)
            factor = parameters["factor"]  # per attention type, vLLM takes the last
        if rope_type == "yarn":
            length = parameters.get("original_max_position_embeddings", length)
    return int(length * factor)


def _generation_phase(
    args, shape, num_gpus, prompt, completion, static, phases, gpu_memory_gib, notes, act: int = BF16, kept: int = BF16
) -> None:
    text = shape.text
    hidden, mlp, vocab, tokens = text.hidden_size, text.intermediate_size, text.vocab_size, prompt + completion
    if args.use_vllm:
        if args.vllm_mode == "colocate":
            if gpu_memory_gib is None:
                raise ValueError("A vLLM colocate plan needs gpu_memory_gib: vLLM takes a fraction of the GPU.")
            pool = args.vllm_gpu_memory_utilization * gpu_memory_gib * GIB
            static.append(
                _term(
                    "vLLM colocate pool",
                    pool,
                    f"vllm_gpu_memory_utilization {args.vllm_gpu_memory_utilization} × {gpu_memory_gib:g} GiB",
                )
            )
            # vLLM holds a whole bf16 copy of the policy (no tensor parallelism in these plans) and must fit the KV
            # cache of at least one sequence of its max_model_len in what is left of the pool: vLLM's own default
            # when the recipe leaves vllm_max_model_length unset.
            max_len = args.vllm_max_model_length or vllm_default_max_model_len(shape.config)
            kv_cache = pool - shape.parameters * BF16
            needed = max_len * kv_cache_bytes_per_token(text)
            notes.append(
                f"vLLM pool: {_gib(shape.parameters * BF16)} of bf16 weights, {_gib(kv_cache)} left for its KV cache "
                f"({int(kv_cache // kv_cache_bytes_per_token(text))} tokens; one sequence of vllm_max_model_length "
                f"{max_len} needs {_gib(needed)})."
            )
            if kv_cache < needed:
                raise ValueError(
                    f"vLLM colocate: the pool ({_gib(pool)}) minus the bf16 weights leaves {_gib(kv_cache)} of KV cache, "
                    f"less than one sequence of {max_len} tokens needs ({_gib(needed)}). Raise "
                    "vllm_gpu_memory_utilization or set vllm_max_model_length to prompt + completion length."
                )
        else:
            notes.append("vLLM server mode: generation runs on the server's own GPUs, not counted here.")
        return
    if args.use_transformers_continuous_batching:
        phases[CONTINUOUS_BATCHING] = continuous_batching_terms(
            text,
            shape.head_dim,
            dict(args.transformers_continuous_batching_config or {}),
            sequences=args.generation_batch_size // num_gpus,
            sequence_tokens=tokens,
            dtype_bytes=kept,
        )
        return
    rows = args.generation_batch_size // num_gpus
    kv = kv_cache_bytes_per_token(text, kept, tokens=tokens)
    phases["generation (one generate call)"] = [
        _term("KV cache", rows * tokens * kv, f"{rows} sequences × {tokens} tokens × {kv // 1024} KiB"),
        _term(
            "prefill, one layer",
            rows * prompt * (4 * hidden + 3 * mlp) * act,
            f"{rows} × {prompt} × (4·{hidden} + 3·{mlp}) × {act} B",
        ),
        _term("sampling logits", rows * vocab * 18, f"{rows} × {vocab} × 18 B"),
    ]
    notes.append(
        f"GRPOTrainer's transformers path generates the whole per-process generation batch ({rows} prompts) in one "
        "`generate` call: its KV cache grows with generation_batch_size. Bound it with continuous batching."
    )


def continuous_batching_terms(
    text,
    head_dim: int,
    cb: dict,
    sequences: int | None = None,
    sequence_tokens: int | None = None,
    dtype_bytes: int = BF16,
) -> list[MemoryTerm]:
    """The paged-cache footprint transformers' continuous batching allocates (its `PagedAttentionMemoryHandler`,
    transformers 5.23, SDPA attention and a model that slices logits with `logits_to_keep`). The cache and the SDPA
    mask (max_batch_tokens × the whole cache) are allocated whole; what a forward reads back (`index_select` of its
    requests' cached tokens) and its logit rows grow with what is in flight: at most the cache, at most `sequences`
    × `sequence_tokens` (a rollout that does not fill the cache; measured on an H200, benchmarks/RESULTS.md)."""
    if cb.get("num_blocks") is None or cb.get("max_batch_tokens") is None:
        raise ValueError(
            "A continuous-batching plan needs transformers_continuous_batching_config with num_blocks and "
            "max_batch_tokens (otherwise transformers sizes the cache from whatever GPU memory is free)."
        )
    page = cb.get("page_size", 256)
    blocks, batch_tokens = cb["num_blocks"], cb["max_batch_tokens"]
    requests = cb.get("max_requests_per_batch") or 1024
    layers, heads, kv_heads = text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads
    hidden, vocab = text.hidden_size, text.vocab_size
    cached = blocks * page
    in_flight = cached if sequences is None or sequence_tokens is None else min(cached, sequences * sequence_tokens)
    requests = requests if sequences is None else min(requests, sequences)
    per_token_kv = layers * 2 * kv_heads * head_dim * dtype_bytes
    at_peak = 2 * heads + kv_heads  # SDPA reads K and V repeated to every query head, plus V
    return [
        _term(
            "paged KV cache",
            cached * per_token_kv,
            f"num_blocks {blocks} × page_size {page} × {per_token_kv // 1024} KiB",
        ),
        _term(
            "K/V read back",
            in_flight * at_peak * head_dim * dtype_bytes,
            f"{in_flight} tokens × {at_peak} × {head_dim} × {dtype_bytes} B",
        ),
        _term(
            "batch activations",
            batch_tokens * (hidden + heads * head_dim + 2 * kv_heads * head_dim + at_peak * head_dim) * dtype_bytes,
            f"max_batch_tokens {batch_tokens} × attention peak",
        ),
        _term(
            "logit rows",
            requests * (hidden * dtype_bytes + vocab * FP32),
            f"{requests} requests × ({dtype_bytes}·{hidden} + 4·{vocab}) B",
        ),
        _term(
            "attention masks (SDPA)",
            batch_tokens * (cached + batch_tokens) * dtype_bytes * (2 if _has_sliding(text) else 1),
            f"{batch_tokens} × ({cached} + {batch_tokens}) × {dtype_bytes} B",
        ),
    ]


def _has_sliding(text) -> bool:
    return "sliding_attention" in (getattr(text, "layer_types", None) or [])


# ---- recipes ----------------------------------------------------------------------------------------------------

# The backbones of the shipped recipes → their folder in `recipes/model_configs/` (shipped in the wheel): their
# `config.json`, so that `trl-dpr memory` plans the shipped recipes offline, with no Hub access and no wait.
SHIPPED_MODEL_CONFIGS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1",
    "google/gemma-3-4b-pt": "gemma-3-4b",
    "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
}


def backbone_config(hub_id: str, revision: str | None = None, trust_remote_code: bool = False):
    """The `PretrainedConfig` of a recipe's backbone: the shipped copy (`SHIPPED_MODEL_CONFIGS`), else the HF cache,
    else the Hub, at the recipe's `revision` and `trust_remote_code` (as the model will load; a shipped copy is the
    published config); offline, one attempt and an `OSError` that says to pass `--model-config FOLDER`.
    """
    from transformers import AutoConfig

    from .recipe_parser import recipes_root

    if hub_id in SHIPPED_MODEL_CONFIGS:
        return AutoConfig.from_pretrained(recipes_root() / "model_configs" / SHIPPED_MODEL_CONFIGS[hub_id])
    loading = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:  # the cache first: no network, no wait
        return AutoConfig.from_pretrained(hub_id, **loading, local_files_only=True)
    except OSError:
        pass
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        reason = "the Hub is switched off (HF_HUB_OFFLINE=1) and it is not in the Hugging Face cache"
    elif not _hub_answers():
        # Without this probe huggingface_hub retries an unreachable Hub 5 times with backoff (~30 s) before failing.
        reason = f"{constants.ENDPOINT} cannot be reached from here and it is not in the Hugging Face cache"
    else:
        try:
            return AutoConfig.from_pretrained(hub_id, **loading)
        except OSError as error:
            reason = f"the Hub did not give it ({str(error).splitlines()[0][:200]})"
    raise OSError(
        f"No config.json for the backbone {hub_id!r}: {reason}. trl_dpr ships the configs of "
        f"{sorted(SHIPPED_MODEL_CONFIGS)} only. Download it once (`hf download {hub_id} config.json`), or pass "
        "--model-config FOLDER (a folder holding the backbone's config.json)."
    )


def _hub_answers(timeout_s: float = 5.0) -> bool:
    """One HEAD request to the Hub's endpoint, no retry: whether it answers at all (any HTTP status)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
        return True
    except Exception:  # any failure to connect (DNS, refused, timeout, TLS): the Hub cannot be used from here
        return False


def plan_recipe(config_path: str, model_config=None, overrides: list[str] | None = None) -> MemoryPlan:
    """Plan a recipe YAML of `trl-dpr sft` or `trl-dpr dpr`, with its `gpu_memory_gib` and `num_gpus` keys.

    `model_config` defaults to the model the recipe trains, read without weights (`recipe_model_config`); `overrides`
    are the command line's `--key value` pairs, as its command takes them.
    """
    recipe = _parse_recipe(config_path, model_config, overrides)
    result = plan(
        recipe.training_args,
        recipe.model_config,
        recipe.model_args,
        gpu_memory_gib=recipe.target.gpu_memory_gib,
        num_gpus=recipe.target.num_gpus,
        title=recipe.path,
        on_cpu=recipe.on_cpu,
    )
    result.notes += recipe.notes
    return result


@dataclass
class _Recipe:
    path: str
    training_args: object
    model_args: object
    target: MemoryTarget
    model_config: object
    on_cpu: bool
    notes: list[str] = field(default_factory=list)


def _parse_recipe(config_path: str, model_config=None, overrides: list[str] | None = None) -> _Recipe:
    """A recipe YAML parsed as its command parses it, `overrides` (`--key value`) included (`use_cpu` forced unless
    they set it: a GPU plan is often made without one). A DPR recipe without max_prompt_length gets the one planned
    (`planned_prompt_length`), said in `notes`."""
    from trl import ModelConfig, SFTConfig

    from ..config import DensePathConfig, SFTRecipeConfig
    from .recipe_parser import RecipeParser, find_recipe_file, load_recipe_yaml

    config_path = find_recipe_file(str(config_path))
    values = load_recipe_yaml(Path(config_path).read_text()) or {}
    # A DPR recipe sets some field that only DensePathConfig (GRPO + DPR) has; an SFT recipe none.
    dpr_only = set(DensePathConfig.__dataclass_fields__) - set(SFTConfig.__dataclass_fields__)
    is_dpr = bool(dpr_only & set(values))
    script_class = _script_arguments_class(is_dpr)
    config_class = DensePathConfig if is_dpr else SFTRecipeConfig
    command = "trl-dpr dpr" if is_dpr else "trl-dpr sft"  # the command whose --help lists the recipe's keys
    overrides = list(overrides or [])
    parsed = RecipeParser((script_class, config_class, ModelConfig, MemoryTarget), prog=command).parse_args_and_config(
        ["--config", str(config_path), "--use_cpu", "true", *overrides]
    )
    script_args, training_args, model_args, target = parsed
    given_use_cpu = any(arg.split("=")[0] == "--use_cpu" for arg in overrides)
    on_cpu = bool(training_args.use_cpu if given_use_cpu else values.get("use_cpu", False))
    if model_config is None:
        model = {"model_name_or_path": model_args.model_name_or_path, "model_revision": model_args.model_revision}
        if is_dpr:
            model["sft_config"] = script_args.sft_config
        model_config = recipe_model_config(config_path, values={**values, **model})
    shape = model_config if isinstance(model_config, ModelShape) else ModelShape.from_config(model_config)
    notes = []
    if is_dpr and training_args.max_prompt_length is None:
        training_args.max_prompt_length, note = planned_prompt_length(script_args, training_args, model_args, shape)
        notes.append(note)
    return _Recipe(str(config_path), training_args, model_args, target, shape, on_cpu, notes)


PROMPT_SAMPLE = 2000  # prompts rendered at most to find a recipe's longest (a few seconds on one CPU thread)


def _characters(prompt) -> int:
    """A prompt's length in characters (chat messages: their JSON text, roles and template overhead included)."""
    return len(prompt) if isinstance(prompt, str) else len(json.dumps(prompt, ensure_ascii=False))


def planned_prompt_length(script_args, training_args, model_args, shape: ModelShape) -> tuple[int, str]:
    """`(tokens, note)`: the prompt length a DPR recipe without max_prompt_length is planned at (DPR then drops no
    prompt, so its longest one is what generation holds). The longest of the recipe's prompts, rendered as DPR renders
    them, when the dataset is the embedded task or a local file and a tokenizer is on this machine; else the model's
    context minus max_completion_length. Of more than `PROMPT_SAMPLE` prompts, the `PROMPT_SAMPLE` longest in
    characters are rendered: tokens are not monotone in characters, but the longest in tokens is among them in
    practice (a sample would miss a single long one)."""
    completion = training_args.max_completion_length
    why = _unread_prompts_reason(script_args.dataset_name)
    if why is None:
        tokenizer = _prompt_tokenizer(model_args.model_name_or_path, getattr(script_args, "sft_config", None))
        why = "no tokenizer of the SFT output is on this machine yet" if tokenizer is None else None
    if why is None:
        from ..token_batches import render_prompts
        from .pipeline import dpr_prompts

        prompts = dpr_prompts(script_args, training_args.seed)
        total = prompts.num_rows
        if total > PROMPT_SAMPLE:  # counting characters is cheap, rendering every prompt is not
            characters = [_characters(prompt) for prompt in prompts["prompt"]]
            longest = sorted(range(total), key=characters.__getitem__, reverse=True)[:PROMPT_SAMPLE]
            prompts = prompts.select(sorted(longest))
        try:
            lengths = [
                len(ids)
                for start in range(0, prompts.num_rows, 256)
                for ids in render_prompts(
                    tokenizer,
                    prompts[start : start + 256]["prompt"],
                    **(getattr(training_args, "chat_template_kwargs", None) or {}),
                )
            ]
        except ValueError as error:  # no chat template for chat prompts: the plan falls back, the run will say it
            why = f"its prompts could not be rendered ({str(error)[:120]})"
        else:
            sampled = (
                f"the {prompts.num_rows} longest in characters of {total} (the longest in tokens is among them in "
                "practice)"
                if total > prompts.num_rows
                else f"all {total}"
            )
            return max(lengths), (
                f"max_prompt_length is unset: planned at {max(lengths)} tokens, the longest of {sampled} prompts of "
                f"{script_args.dataset_name}. Set max_prompt_length to plan (and keep) another length."
            )
    from ..field_checks import context_of

    context, source = context_of(shape.config)
    if context is None or context <= completion:
        raise ValueError(
            f"The memory plan needs max_prompt_length (the longest prompt kept, paper: 1024): {why}, and the model's "
            f"context ({context}) leaves no room beside max_completion_length {completion}. Set max_prompt_length "
            "in the recipe or pass --max_prompt_length N."
        )
    return context - completion, (
        f"max_prompt_length is unset and the prompts were not read ({why}): planned at the model's context, {context} "
        f"({source}), minus max_completion_length {completion} = {context - completion} tokens. Set "
        "max_prompt_length (or pass --max_prompt_length N) to plan your longest prompt."
    )


def _unread_prompts_reason(dataset_name: str) -> str | None:
    """Why a plan does not read a dataset's prompts (a Hub dataset would be downloaded), or None: it reads them."""
    from ..embedded.task import EMBEDDED_DATASET

    local = Path(dataset_name).is_dir() or (
        dataset_name.endswith((".json", ".jsonl", ".csv", ".parquet")) and Path(dataset_name).is_file()
    )
    if dataset_name == EMBEDDED_DATASET or local:
        return None
    return (
        f"a plan reads the prompts of a local .json, .jsonl, .csv or .parquet file (or a folder of them) or of the "
        f"embedded task, not of {dataset_name}, and downloads no dataset"
    )


def _prompt_tokenizer(model_name_or_path: str, sft_config: str | None):
    """The tokenizer DPR renders prompts with when it is here without a download: the SFT output's folder, else that of
    the base its SFT recipe names (a folder, an embedded base, a GGUF file); None otherwise."""
    from transformers import AutoTokenizer

    from ..embedded.base_model import EMBEDDED_MODEL, EMBEDDED_PRETRAINED_MODEL
    from .gguf import find_gguf_file, is_gguf_path

    folder = Path(str(model_name_or_path))
    if folder.is_dir() and any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return AutoTokenizer.from_pretrained(folder)
    if not sft_config:
        return None

    from .recipe_checks import find_recipe_file, load_recipe_yaml

    base = (load_recipe_yaml(Path(find_recipe_file(str(sft_config))).read_text()) or {}).get("model_name_or_path")
    if base == EMBEDDED_PRETRAINED_MODEL:
        from ..embedded.pretraining import SHIPPED_BASE

        return AutoTokenizer.from_pretrained(SHIPPED_BASE) if SHIPPED_BASE.is_dir() else None
    if base == EMBEDDED_MODEL:  # the tokenizer build_embedded_base writes, without the model
        from ..embedded.task import demo_corpus
        from ..embedded.tiny_lm import build_tokenizer

        return build_tokenizer(demo_corpus(seed=0), vocab_size=1200)
    if is_gguf_path(base):  # the tokenizer in its metadata, which the SFT output's is converted from (seconds)
        try:
            gguf_file = find_gguf_file(base)
            return AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        except (OSError, ImportError):  # not installed here: the plan falls back to the model's context
            return None
    return _prompt_tokenizer(base, None) if base else None


# ---- fitting a recipe to a smaller (or larger) GPU ----------------------------------------------------------------


@dataclass
class MemoryFit:
    """The largest settings of a recipe the plan fits into `gpu_memory_gib` (None: nothing fits), as YAML lines."""

    gpu_memory_gib: float
    values: dict | None  # the recipe keys to set (None: nothing fits)
    plan: MemoryPlan  # the plan with those values (or with the smallest values tried, when nothing fits)

    def yaml_lines(self) -> str:
        if self.values is None:
            return (
                f"# Nothing fits {self.gpu_memory_gib:g} GiB: even at the smallest settings tried the plan needs "
                f"{self.plan.total_gib:.1f} GiB ({self.plan.peak_phase} peak, {_gib(self.plan.static_bytes)} held all "
                "run). Use a larger GPU, or lower max_prompt_length / max_completion_length (or lora_r)."
            )
        import yaml

        head = f"# {self.plan.title} on {self.gpu_memory_gib:g} GiB: the plan needs {self.plan.total_gib:.1f} GiB"
        return head + f" ({self.plan.peak_phase} peak)\n" + yaml.safe_dump(self.values, sort_keys=False).rstrip()


def fit_recipe(
    config_path: str, gpu_memory_gib: float, model_config=None, overrides: list[str] | None = None
) -> MemoryFit:
    """The largest update micro-batch, paged-cache `num_blocks` (continuous batching) or rollout batch (one `generate`
    call) of a DPR recipe, each at most the recipe's own, whose plan fits `gpu_memory_gib`; the global batch is kept
    (gradient_accumulation_steps grows as the micro-batch shrinks).

    Why each alone: the plan is static + the largest phase + a margin, and the micro-batch sizes the scoring, log π_old
    and training phases while the cache (or the rollout) sizes generation alone, so each is the largest that fits.
    """

    recipe = _parse_recipe(config_path, model_config, overrides)
    args = recipe.training_args
    if not hasattr(args, "kl_coef"):
        raise ValueError(f"--fit sizes a DPR recipe (rollout, paged cache, update micro-batch); {recipe.path} is SFT.")
    num_gpus = recipe.target.num_gpus

    def planned(**changes) -> MemoryPlan:
        trial = copy.copy(args)
        for key, value in changes.items():
            setattr(trial, key, value)
        return plan(
            trial,
            recipe.model_config,
            recipe.model_args,
            gpu_memory_gib=gpu_memory_gib,
            num_gpus=num_gpus,
            title=recipe.path,
            on_cpu=recipe.on_cpu,
        )

    def largest(candidates, fits):  # candidates ascending; the largest whose plan fits, or None
        low, high, best = 0, len(candidates) - 1, None
        while low <= high:
            middle = (low + high) // 2
            if fits(candidates[middle]):
                best, low = candidates[middle], middle + 1
            else:
                high = middle - 1
        return best

    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    # Micro-batches dividing the recipe's (global batch = micro × accumulation kept exactly), each planned with the
    # smallest generation footprint so that only the phases it sizes decide.
    tokens = args.max_prompt_length + args.max_completion_length  # planned by _parse_recipe when the recipe has none
    cb = dict(args.transformers_continuous_batching_config or {})
    page = cb.get("page_size", 256)
    generation = {}
    if args.use_transformers_continuous_batching and not args.use_vllm:
        smallest_blocks = -(-max(tokens, cb.get("max_batch_tokens") or 0) // page)  # one whole sequence, one batch
        blocks = list(range(smallest_blocks, max(cb.get("num_blocks") or 0, smallest_blocks) + 1))
        generation = {"transformers_continuous_batching_config": {**cb, "num_blocks": smallest_blocks}}
    divisors = [d for d in range(1, micro + 1) if micro % d == 0]
    best_micro = largest(divisors, lambda d: planned(per_device_train_batch_size=d, **generation).fits)
    if best_micro is None:
        return MemoryFit(gpu_memory_gib, None, planned(per_device_train_batch_size=1, **generation))
    global_batch = micro * accumulation
    values = {"per_device_train_batch_size": best_micro, "gradient_accumulation_steps": global_batch // best_micro}
    if generation:

        def cache_fits(n: int) -> bool:
            trial = planned(
                per_device_train_batch_size=best_micro, transformers_continuous_batching_config={**cb, "num_blocks": n}
            )
            # transformers refuses a paged cache over max_memory_percent of the memory free when generation starts
            free = gpu_memory_gib * GIB - trial.static_bytes
            return trial.fits and trial.phase_bytes(CONTINUOUS_BATCHING) <= cb.get("max_memory_percent", 0.9) * free

        best_blocks = largest(blocks, cache_fits)
        if best_blocks is None:
            return MemoryFit(gpu_memory_gib, None, planned(per_device_train_batch_size=best_micro, **generation))
        values["generation_batch_size"] = args.generation_batch_size  # the paged cache bounds memory whatever it is
        values["transformers_continuous_batching_config"] = {**cb, "num_blocks": best_blocks}
    elif not args.use_vllm:  # one `generate` call: the rollout batch is its KV cache; a multiple of the global batch
        step = best_micro * values["gradient_accumulation_steps"] * num_gpus
        rollouts = list(range(step, max(args.generation_batch_size, step) + 1, step))
        best_rollout = largest(
            rollouts, lambda n: planned(per_device_train_batch_size=best_micro, generation_batch_size=n).fits
        )
        if best_rollout is None:
            return MemoryFit(
                gpu_memory_gib, None, planned(per_device_train_batch_size=best_micro, generation_batch_size=step)
            )
        values["generation_batch_size"] = best_rollout
    values["gpu_memory_gib"] = int(gpu_memory_gib) if float(gpu_memory_gib).is_integer() else gpu_memory_gib
    changes = {k: v for k, v in values.items() if k != "gpu_memory_gib"}
    return MemoryFit(gpu_memory_gib, values, planned(**changes))


def recipe_model_config(config_path: str, follow_sft_config: bool = True, values: dict | None = None):
    """The `PretrainedConfig` of the model a recipe YAML trains, read from `config.json` files alone (no weights).

    In order: a first line `# <hub id>: ...`, its `model_name_or_path`, or (a DPR recipe whose SFT output does not
    exist yet) the model of the SFT recipe its `sft_config:` names, in the dtype a full SFT saves it in (the SFT
    recipe's). The order is docs/cli.md's. `values` are the recipe's, overrides included (default: the YAML's).
    """

    from .recipe_checks import find_recipe_file, load_recipe_yaml

    path = find_recipe_file(str(config_path))
    backbone = recipe_backbone(path)
    if backbone is not None:
        return backbone_config(backbone)
    values = values if values is not None else load_recipe_yaml(Path(path).read_text()) or {}
    name = values.get("model_name_or_path")
    if not name:
        raise ValueError(
            f"{path} names no model_name_or_path, so its memory plan has no model to size. Add `model_name_or_path:` "
            "(a Hub id or a folder), or pass --model-config FOLDER (a folder holding the model's config.json)."
        )
    sft_config = values.get("sft_config") if follow_sft_config else None
    if sft_config and not Path(str(name)).is_dir():
        config = recipe_model_config(sft_config, follow_sft_config=False)
        sft = load_recipe_yaml(Path(find_recipe_file(str(sft_config))).read_text()) or {}
        if not sft.get("use_peft") and sft.get("dtype") in _DTYPE_BYTES:  # `dtype: auto` loads the SFT output as
            config.dtype = sft["dtype"]  # saved: a full one in the dtype it trained in (an adapter's base: its own)
        return config
    return _model_config_of(
        str(name),
        values.get("model_revision"),
        bool(values.get("trust_remote_code", False)),
        where=f"{path}'s model_name_or_path",
        hint=", or pass --model-config FOLDER (a folder holding a config.json)",
        named=_named_model_config,
    )


def _named_model_config(
    model_name_or_path: str, where: str, revision: str | None = None, trust_remote_code: bool = False
):
    """The `PretrainedConfig` of a `model_name_or_path` that is no folder (`field_checks.model_config_of` reads those):
    an embedded base's, a `.gguf`'s (its metadata), else a Hub id's (`backbone_config`, at the recipe's revision)."""
    from transformers import AutoConfig

    from ..embedded.base_model import EMBEDDED_MODEL, EMBEDDED_PRETRAINED_MODEL
    from .gguf import find_gguf_file, is_gguf_path

    if model_name_or_path == EMBEDDED_PRETRAINED_MODEL:
        from ..embedded.pretraining import SHIPPED_BASE

        return AutoConfig.from_pretrained(SHIPPED_BASE)
    if model_name_or_path == EMBEDDED_MODEL:  # built from a config in about a second, like the recipes build it
        import tempfile

        from ..embedded.base_model import build_embedded_base

        with tempfile.TemporaryDirectory() as scratch:
            return AutoConfig.from_pretrained(build_embedded_base(Path(scratch) / "base"))
    if is_gguf_path(model_name_or_path):
        gguf_file = find_gguf_file(model_name_or_path)
        return AutoConfig.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)  # the metadata, no tensors
    not_a_folder = (
        f"{where} is {model_name_or_path!r}, not a folder here (has the stage that writes it run yet?). Run that "
        "stage, give a DPR recipe `sft_config:` (the SFT recipe that writes it), start the YAML with a line "
        "`# <hub id>: ...` naming the backbone, or pass --model-config FOLDER (a folder holding its config.json)."
    )
    if model_name_or_path.startswith((".", "/", "~")) or model_name_or_path.count("/") > 1:  # a path, not a Hub id
        raise ValueError(not_a_folder)
    try:
        return backbone_config(model_name_or_path, revision, trust_remote_code)
    except OSError as error:  # `runs/sft` reads as a Hub id too: say both
        raise OSError(f"{error} Or, if it is a local folder: {not_a_folder}") from error


def recipe_backbone(config_path: str) -> str | None:
    """The Hub id a recipe's first line names (`# meta-llama/Llama-3.1-8B: ...`), or None."""
    from .recipe_checks import find_recipe_file

    lines = Path(find_recipe_file(str(config_path))).read_text().splitlines()
    match = re.match(r"#\s*([\w.-]+/[\w.-]+):", lines[0]) if lines else None
    return match.group(1) if match else None


def _script_arguments_class(is_dpr: bool):
    from .pipeline import DPRScriptArguments, SFTScriptArguments

    return DPRScriptArguments if is_dpr else SFTScriptArguments


def _check_recipe_flags(parser, overrides: list[str], recipe_flags: dict[str, bool] | None) -> None:
    """A flag that is neither this command's nor a recipe key (`recipe_flags`: flag → takes a value, `trl-dpr`'s
    description of the sft and dpr keys) ends here, in one line naming the closest, before torch is imported. Without
    `recipe_flags` the recipe's own parser finds it."""
    from .recipe_checks import unknown_flags

    if not overrides or recipe_flags is None:
        return
    own = [flag for action in parser._actions for flag in action.option_strings]
    problem = unknown_flags(overrides, own, recipe_flags)
    if problem:
        parser.error(problem)


def main(
    argv=None, prog: str = "python -m trl_dpr.running.memory", recipe_flags: dict[str, bool] | None = None
) -> None:
    """`trl-dpr memory` / `python -m trl_dpr.running.memory`: print the plan of recipe YAMLs (paths or shipped names);
    any other `--key value` overrides a recipe key (`recipe_flags`: those `trl-dpr` checks before torch is imported)."""
    from .recipe_checks import CommandParser

    parser = CommandParser(
        prog=prog,
        flags_help=f"`{prog} --help` lists its own flags; `trl-dpr dpr --help` and `trl-dpr sft --help` list the "
        "recipe keys, also accepted as flags",
        description="Print the GPU memory plan of a trl_dpr recipe YAML.",
        epilog="Any key of the recipe can be overridden by its flag (--max_prompt_length 1024), as with `trl-dpr sft` "
        "or `trl-dpr dpr`, whose --help lists them.",
    )
    parser.add_argument(
        "--config",
        required=True,
        nargs="+",
        help="recipe YAML(s) of `trl-dpr sft` or `trl-dpr dpr` (paths or shipped names)",
    )
    parser.add_argument(
        "--model-config",
        help="folder with the model's config.json (default: the config of the "
        "recipe's model_name_or_path, or of the backbone its first line `# <hub id>: ...` names)",
    )
    parser.add_argument(
        "--model-config-dir", help="folder of <backbone>/config.json, <backbone> = the recipe's folder"
    )
    parser.add_argument(
        "--details", action="store_true", help="each table in a <details> block with a one-line summary"
    )
    parser.add_argument(
        "--fit",
        action="store_true",
        help="print the recipe keys (update micro-batch, paged-cache "
        "num_blocks or rollout batch) that fit --gpu_memory_gib, as YAML lines, or one line if none do",
    )
    parser.add_argument(
        "--gpu_memory_gib",
        "--gpu-memory-gib",
        type=float,
        help="the GPU memory (GiB) --fit sizes for, or the plan is checked against (the recipe key)",
    )
    args, overrides = parser.parse_known_args(argv)  # the rest: recipe keys, checked by the recipe's own parser
    _check_recipe_flags(parser, overrides, recipe_flags)
    if args.fit and not args.gpu_memory_gib:
        parser.error("--fit needs --gpu_memory_gib N (the GPU's memory in GiB, e.g. 24 for an RTX 4090)")
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(args.model_config) if args.model_config else None
    for path in args.config:
        config = model_config
        if args.model_config_dir:
            config = AutoConfig.from_pretrained(Path(args.model_config_dir) / Path(path).parts[-3])
        if args.fit:
            print(fit_recipe(path, args.gpu_memory_gib, config, overrides).yaml_lines() + "\n")
            continue
        gpu = ["--gpu_memory_gib", str(args.gpu_memory_gib)] if args.gpu_memory_gib else []  # the recipe key's flag
        result = plan_recipe(path, config, [*overrides, *gpu])
        if args.details:
            of = f" of {result.gpu_memory_gib:g} GiB" if result.gpu_memory_gib is not None else ""
            print(
                f"<details><summary><code>{path}</code>: {result.total_gib:.1f} GiB{of} per {result.unit} "
                f"({result.peak_phase})</summary>\n\n{result.table()}\n</details>\n"
            )
        else:
            print(result.table() + "\n")


if __name__ == "__main__":
    main()
