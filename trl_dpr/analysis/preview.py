"""The DPR preview (`trl-dpr preview`): what Dense-Path REINFORCE can reach on your data, estimated from π_SFT's own
samples before any RL.

With γ = 1 and λ = `kl_coef`, DPR maximises E_π[R(y)] − λ·KL(π ‖ π_SFT), R(y) = Σ_t r̂_t, whose optimum is

    π_λ(y | x) = π_SFT(y | x) · exp(R(y) / λ) / Z_λ(x)

and a run moves along this family; its quality is read off N samples of π_SFT per prompt (docs/preview.md):

    run_preview: sample π_SFT ─► R(y_i) per reward variant ─► quality q(y_i) ─► tilt.py (π_λ per λ)
                 ─► preview_report.py (points, intervals, report files, plot)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..evaluation.results import bootstrap_mean_ci
from ..field_checks import LEGACY_REWARD_KEYS, check_fits_context, context_of, tightest_prompt_context
from .preview_report import PolicyPoint, PreviewReport, preview_points

# The preview's math and report, importable from here as before (`from trl_dpr.analysis.preview import ...`).
from .preview_report import PreviewPoint as PreviewPoint
from .preview_report import plot_preview as plot_preview
from .tilt import TiltedQuality as TiltedQuality
from .tilt import tilt_weights as tilt_weights
from .tilt import tilted_quality as tilted_quality

# ---- the whole preview: sample, score, judge ---------------------------------------------------------------------------

QUALITIES = ("exact", "demonstration", "pairwise")


@dataclass
class PreviewConfig:
    """Settings of a preview (`trl-dpr preview`): which SFT output, prompts, reward variants, λ
    grid and quality. The SFT output itself is `model_name_or_path` of TRL's `ModelConfig`, as in the other recipes.
    """

    output_dir: str = field(default="runs/preview", metadata={"help": "Where preview.csv, .json, .md and .png go."})
    dataset_name: str = field(
        default="trl_dpr/embedded-demo",
        metadata={
            "help": "Prompts (and, for exact / demonstration quality, their answers): a dataset `trl-dpr dpr` loads."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "The dataset's configuration name."})
    dataset_split: str = field(default="test", metadata={"help": "Split to take prompts from (held-out prompts)."})
    dataset_format: str = field(default="auto", metadata={"help": "auto | openorca | messages | prompt_completion."})
    num_prompts: int = field(default=200, metadata={"help": "Prompts to preview on."})
    samples_per_prompt: int = field(default=16, metadata={"help": "N samples of π_SFT per prompt (temperature 1)."})
    max_new_tokens: int = field(
        default=256, metadata={"help": "Longest sampled response (DPR's max_completion_length)."}
    )
    batch_size: int = field(default=64, metadata={"help": "Prompts per generate call and per scoring forward."})
    kl_coefs: list[float] = field(
        default_factory=lambda: [math.inf, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.0],
        metadata={
            "help": "The values of DPR's kl_coef at which π ∝ π_SFT·exp(R / kl_coef) is estimated: inf = π_SFT, "
            "0 = best-of-N under the reward."
        },
    )
    variants: dict = field(
        default_factory=lambda: {"DPR": {}, "wo/Baseline": {"dense_reward": "trl_dpr.rewards:SFTLogProb"}},
        metadata={
            "help": "Reward variants to compare, name → settings: {} is DPR with the recorded π_ref; "
            "ref_model_name_or_path: another π_ref (another α); dense_reward: trl_dpr.rewards:SFTLogProb (wo/Baseline, "
            "R = Σ log π_SFT) or any module:Class; oracle: true (R = the quality itself, when it is per-sample)."
        },
    )
    quality: str = field(
        default="exact",
        metadata={
            "help": "exact: the answer is right, by answer_check / answer_pattern against the `answer` column (or the "
            "demonstration), else the embedded task's `The answer is X.`. demonstration: the response equals the "
            "demonstration (`completion`, or the last assistant turn of `messages`). pairwise: win (1) / tie "
            "(0.5) / loss (0) against an independent π_SFT sample, judged in both orders by the judge of "
            "`evaluation_config`.",
            "choices": list(QUALITIES),
        },
    )
    evaluation_config: str | None = field(
        default=None,
        metadata={"help": "quality: pairwise: the `trl-dpr evaluate` recipe whose judge settings are used."},
    )
    answer_check: str | None = field(
        default=None,
        metadata={
            "help": "quality: exact on your own task: 'module:function' in your folder, "
            "`def f(completions, answer, **kw) -> list[float]` (1 = right), as TRL's reward_funcs."
        },
    )
    answer_pattern: str | None = field(
        default=None,
        metadata={
            "help": "quality: exact on your own task, instead of answer_check: a regular expression whose last "
            "match's group 1 is the answer, e.g. 'The answer is (-?[0-9.]+)' (numbers compare as numbers)."
        },
    )
    policies: list[str] = field(
        default_factory=list,
        metadata={
            "help": "NAME=PATH of trained policies to place on the plot (own samples: quality and KL to π_SFT)."
        },
    )
    policy_samples_per_prompt: int = field(default=4, metadata={"help": "Samples per prompt of each trained policy."})
    min_ess: float = field(default=4.0, metadata={"help": "Points whose mean ESS per prompt is lower are flagged."})
    confidence: float = field(default=0.95, metadata={"help": "Level of the bootstrap intervals (over prompts)."})
    bootstrap_resamples: int = field(default=2000, metadata={"help": "Bootstrap resamples."})
    seed: int = field(default=0, metadata={"help": "Sampling seed and the held-out split's seed."})
    plot: bool = field(default=True, metadata={"help": "Write preview.png (needs matplotlib)."})

    def __post_init__(self):
        if self.quality not in QUALITIES:
            raise ValueError(f"quality must be one of {QUALITIES}, got {self.quality!r}.")
        if self.quality == "pairwise" and not self.evaluation_config:
            raise ValueError("quality: pairwise needs evaluation_config, the `trl-dpr evaluate` recipe of the judge.")
        if self.quality != "exact" and (self.answer_check or self.answer_pattern):
            raise ValueError(
                f"answer_check / answer_pattern say which answers are right: use them with quality: exact, "
                f"not {self.quality}."
            )
        for name, value in (
            ("num_prompts", self.num_prompts),
            ("samples_per_prompt", self.samples_per_prompt),
            ("max_new_tokens", self.max_new_tokens),
            ("batch_size", self.batch_size),
            ("policy_samples_per_prompt", self.policy_samples_per_prompt),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}.")
        if self.samples_per_prompt < 2:
            raise ValueError("samples_per_prompt must be >= 2: the tilt reweights several samples of one prompt.")
        if self.samples_per_prompt <= self.min_ess:  # ESS < N at every finite λ: no tilted point could be trusted
            raise ValueError(
                f"samples_per_prompt {self.samples_per_prompt} is not more than min_ess {self.min_ess:g}: the tilt's "
                f"effective sample size is below N at every finite kl_coef, so no point could be trusted and the "
                f"preview would say DPR does not help by construction. Use samples_per_prompt >= "
                f"{math.floor(self.min_ess) + 1} (16, the default, trusts far more kl_coefs), or lower min_ess."
            )
        if any(lam < 0 or math.isnan(lam) for lam in self.kl_coefs):
            raise ValueError(f"Every kl_coef must be >= 0 (0 = best-of-N, inf = π_SFT), got {self.kl_coefs}.")
        if not self.variants:
            raise ValueError("Give at least one reward variant (e.g. variants: {DPR: {}}).")
        allowed = {"ref_model_name_or_path", "oracle", "dense_reward", "dense_reward_kwargs", "dense_reward_models"}
        for name, settings in self.variants.items():
            unknown = (
                set(settings or {}) - allowed - set(LEGACY_REWARD_KEYS)
            )  # those: reward_from_settings says what to write
            if unknown:
                raise ValueError(
                    f"Variant {name!r}: unknown setting(s) {sorted(unknown)}; allowed: {sorted(allowed)}."
                )
            if (settings or {}).get("oracle") and self.quality == "pairwise":
                raise ValueError(
                    f"Variant {name!r}: the oracle reward is the per-sample quality; use it with exact or demonstration."
                )
            if not (settings or {}).get("oracle"):
                from ..rewards import reward_from_settings

                reward_from_settings(
                    dict(settings or {})
                )  # a removed key or an unimportable reward: before any model loads
        for spec in self.policies:
            name, sep, path = spec.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"policies entries must be NAME=PATH, got {spec!r}.")


@dataclass
class _HeldOut:
    """The preview's prompts with, per prompt, its `answer` column and its demonstration's text (None when absent)."""

    prompts: list
    answers: list
    demonstrations: list


def _held_out_rows(config: PreviewConfig) -> _HeldOut:
    """Prompts (and answers / demonstrations) to preview on, from any file the other stages take: `prompt` (+ `answer`
    / `completion`) or `messages` rows."""
    from ..data import load_demonstrations, prompt_and_demonstration
    from ..embedded.task import EMBEDDED_DATASET, held_out_split

    if config.dataset_name == EMBEDDED_DATASET:
        rows = held_out_split(config.num_prompts, config.seed)
    else:
        rows = load_demonstrations(
            config.dataset_name,
            config.dataset_config,
            split=config.dataset_split,
            num_samples=config.num_prompts,
            samples_key="num_prompts",
            seed=config.seed,
            dataset_format=config.dataset_format,
            stage="rl",
            file_splits=("train", "test"),  # a single file is the held-out set itself, under the default split too
            split_key="dataset_split",
        )
    parts = [prompt_and_demonstration(row, config.dataset_name) for row in rows]
    answers = list(rows["answer"]) if "answer" in rows.column_names else [None] * len(parts)
    return _HeldOut([p for p, _ in parts], answers, [d for _, d in parts])


def _quality_function(config: PreviewConfig, held: _HeldOut) -> Callable[[list, list[str]], list[float]]:
    """`quality(prompt_indices, responses) -> scores`, for the configured quality."""
    from ..evaluation.answer_checks import answer_check_from, embedded_check

    if config.quality == "exact":
        answers = [a if a is not None else d for a, d in zip(held.answers, held.demonstrations)]
        if any(a is None for a in answers):
            raise ValueError(
                f"quality: exact needs an `answer` column (or demonstrations to read answers from); "
                f"{config.dataset_name} has prompts only. Add `answer` to each row, or use quality: pairwise."
            )
        check = answer_check_from(config.answer_check, config.answer_pattern) or embedded_check()
        return lambda indices, responses: check(
            responses,
            [answers[i] for i in indices],
            [held.prompts[i] for i in indices],  # as the file wrote them
        )
    if config.quality == "demonstration":
        if any(d is None for d in held.demonstrations):
            raise ValueError(
                f"quality: demonstration needs the demonstrations (`completion`, or `messages` ending with the "
                f"assistant's answer); {config.dataset_name} has none."
            )
        expert = [" ".join(d.split()) for d in held.demonstrations]
        return lambda indices, responses: [float(" ".join(r.split()) == expert[i]) for i, r in zip(indices, responses)]
    raise ValueError(f"No per-sample quality function for {config.quality!r}.")


def _question(prompt) -> str:
    return prompt if isinstance(prompt, str) else next(m["content"] for m in reversed(prompt) if m["role"] == "user")


def run_preview(
    config: PreviewConfig,
    sft_model_name_or_path: str,
    model_init_kwargs: dict | None = None,
    show_progress: bool = True,
    judge_config=None,
) -> PreviewReport:
    """Sample π_SFT, score every sample with every reward variant, judge it, and estimate π_λ along the λ grid.

    `judge_config`: the `EvaluationConfig` whose judge `quality: pairwise` uses (`trl-dpr preview` loads the recipe
    `evaluation_config` names). What can be checked cheaply (config, SFT output, prompts, policies, matplotlib, the
    judge's key) is checked before a model loads. Writes the report into `config.output_dir`.
    """
    from transformers import AutoTokenizer

    from ..data import as_user_turns, string_prompts_as_chat
    from ..evaluation.sampling import policy_logprobs, sample_completions, score_samples
    from ..reference_manifest import check_model_source, resolve_reference
    from ..reward_loading import check_reference_is_not_sft
    from ..reward_model import CheckpointRewardModel
    from ..rewards import SFTLogProb, check_models_given, reward_from_settings

    if config.plot:
        plot_check = __import__("importlib").util.find_spec("matplotlib")
        if plot_check is None:
            raise ImportError(
                'The preview plot needs matplotlib: pip install "trl_dpr[plots]", or plot: false.', name="matplotlib"
            )
    model_init_kwargs = dict(model_init_kwargs or {})
    check_model_source(sft_model_name_or_path, "The SFT output")
    needs_manifest = False
    for settings in (dict(s or {}) for s in config.variants.values() if not (s or {}).get("oracle")):
        # conflicting keys or an unimportable reward fail before any model loads
        reward = reward_from_settings(settings)
        check_models_given(reward, settings.get("dense_reward_models") or {})
        needs_manifest |= "ref" in reward.model_names and not settings.get("ref_model_name_or_path")
        if "ref" in reward.model_names and settings.get("ref_model_name_or_path"):  # r̂ ≡ 0 when π_ref is π_SFT
            check_reference_is_not_sft(sft_model_name_or_path, settings["ref_model_name_or_path"])
    hub = model_init_kwargs.get("revision"), model_init_kwargs.get("token")  # the π_SFT that loads: its revision
    if needs_manifest:
        resolve_reference(sft_model_name_or_path, *hub)  # a missing manifest is an error that says how to make one
    named_policies = [spec.partition("=")[::2] for spec in config.policies]
    for name, path in named_policies:
        check_model_source(path.strip(), f"Policy {name.strip()}")
    held = _held_out_rows(config)
    sft_tokenizer = AutoTokenizer.from_pretrained(
        sft_model_name_or_path,
        revision=model_init_kwargs.get("revision"),
        trust_remote_code=model_init_kwargs.get("trust_remote_code", False),
    )
    # The prompts as π_SFT reads them (DPR's rule); the answer check still gets them as the file wrote them.
    as_chat = string_prompts_as_chat(sft_model_name_or_path, sft_tokenizer, held.prompts, "preview", *hub)
    prompts = as_user_turns(held.prompts) if as_chat else held.prompts
    _check_samples_fit_context(
        config, sft_tokenizer, sft_model_name_or_path, named_policies, prompts, model_init_kwargs
    )
    if config.quality == "pairwise":
        from ..evaluation.runner import judge_from_config

        if judge_config is None:
            raise ValueError(
                "quality: pairwise needs the judge's settings: run_preview(..., judge_config=load_evaluation_config("
                "config.evaluation_config)), with load_evaluation_config from trl_dpr.running.recipe_parser (what "
                "`trl-dpr preview` does)."
            )
        judge = judge_from_config(judge_config)  # checks the judge's key now
    else:
        quality_of = _quality_function(config, held)  # an unimportable answer_check fails before any model loads

    base = CheckpointRewardModel.from_pretrained(sft_model_name_or_path, reward=SFTLogProb(), **model_init_kwargs)
    tokenizer = base.processing_class
    n = config.samples_per_prompt
    repeated = [p for p in prompts for _ in range(n)]
    indices = [i for i in range(len(prompts)) for _ in range(n)]

    def sample(model, adapter, prompt_list, count, seed):
        from trl.trainer.utils import use_adapter

        with use_adapter(model, adapter_name=adapter) if adapter else contextlib.nullcontext():
            return sample_completions(
                model,
                tokenizer,
                prompt_list,
                temperature=1.0,
                max_new_tokens=config.max_new_tokens,
                batch_size=config.batch_size,
                seed=seed,
                desc=f"Sampling ({count} per prompt)",
                show_progress=show_progress,
            )

    samples = sample(base.sft_model, base.sft_adapter, repeated, n, config.seed)
    responses = [s.text for s in samples]
    if config.quality == "pairwise":
        from ..evaluation.judges import PairToJudge

        baselines = sample(base.sft_model, base.sft_adapter, prompts, 1, config.seed + 1)  # independent π_SFT answers
        judgements = _judged(
            judge,
            "samples",
            [PairToJudge(_question(prompts[i]), r, baselines[i].text) for i, r in zip(indices, responses)],
            config.output_dir,
        )
        score = {"win": 1.0, "tie": 0.5, "loss": 0.0}
        scores = [score.get(j.outcome, math.nan) for j in judgements]
    else:
        scores = quality_of(indices, responses)
    quality = torch.tensor(scores, dtype=torch.float64).view(len(prompts), n)
    if torch.isnan(quality).any():  # unparseable verdicts: scored as ties, and said so
        quality = torch.nan_to_num(quality, nan=0.5)

    rewards = {}
    for name, settings in config.variants.items():
        settings = dict(settings or {})
        if settings.get("oracle"):
            rewards[name] = quality.clone()
            continue
        scorer = _scorer(base, sft_model_name_or_path, settings, model_init_kwargs)
        scored, mask = score_samples(scorer, samples, batch_size=config.batch_size)
        rewards[name] = (scored.rewards.double() * mask).sum(dim=1).view(len(prompts), n)
        del scorer

    points = preview_points(
        rewards,
        quality,
        config.kl_coefs,
        min_ess=config.min_ess,
        confidence=config.confidence,
        num_resamples=config.bootstrap_resamples,
        seed=config.seed,
    )
    sft_points = [p for p in points if math.isinf(p.lam)]
    check_name = config.answer_check or (f"answer_pattern {config.answer_pattern!r}" if config.answer_pattern else "")
    report = PreviewReport(
        quality_name=f"{config.quality} ({check_name})" if check_name else config.quality,
        num_prompts=len(prompts),
        samples_per_prompt=n,
        points=points,
        sft_quality=sft_points[0].quality,
        pass_at_n=float(quality.max(dim=1).values.mean()),
        settings={**asdict(config), "sft_model_name_or_path": sft_model_name_or_path},
    )

    for name, path in named_policies:
        from trl.trainer.utils import create_model_from_path

        policy = create_model_from_path(path.strip(), **_other_models(model_init_kwargs)).to(base.device)
        k = config.policy_samples_per_prompt
        policy_samples = sample(policy, None, [p for p in prompts for _ in range(k)], k, config.seed + 2)
        policy_indices = [i for i in range(len(prompts)) for _ in range(k)]
        if config.quality == "pairwise":
            judgements = _judged(
                judge,
                name.strip(),
                [
                    PairToJudge(_question(prompts[i]), s.text, baselines[i].text)
                    for i, s in zip(policy_indices, policy_samples)
                ],
                config.output_dir,
            )
            policy_scores = [score.get(j.outcome, 0.5) for j in judgements]
        else:
            policy_scores = quality_of(policy_indices, [s.text for s in policy_samples])
        own = policy_logprobs(policy, tokenizer, policy_samples, batch_size=config.batch_size)
        scored, mask = score_samples(base, policy_samples, batch_size=config.batch_size)
        kl = ((own.double() - scored.sft_logps.double()) * mask).sum(dim=1).view(len(prompts), k).mean(dim=1)
        per_prompt = torch.tensor(policy_scores, dtype=torch.float64).view(len(prompts), k).mean(dim=1)
        gain = per_prompt - quality.mean(dim=1)  # against π_SFT's samples of the same prompt
        low, high = bootstrap_mean_ci(
            torch.stack([per_prompt, gain, kl]), config.confidence, config.bootstrap_resamples, config.seed
        )
        report.policies.append(
            PolicyPoint(
                name.strip(),
                path.strip(),
                float(per_prompt.mean()),
                float(low[0]),
                float(high[0]),
                float(gain.mean()),
                float(low[1]),
                float(high[1]),
                float(kl.mean()),
                float(low[2]),
                float(high[2]),
            )
        )
        del policy
    report.write(config.output_dir, plot=config.plot)
    return report


def _check_samples_fit_context(
    config: PreviewConfig,
    tokenizer,
    sft_model_name_or_path: str,
    named_policies: list,
    prompts: list,
    model_init_kwargs: dict,
) -> None:
    """The longest prompt (as π_SFT's `tokenizer` renders it, for every model sampled) + `max_new_tokens` against the
    context of π_SFT and of each policy (`check_fits_context`), before any model loads: past it the samples are read at
    positions the model never saw, and nothing fails."""
    revision, trust_remote_code = model_init_kwargs.get("revision"), model_init_kwargs.get("trust_remote_code", False)
    policies = {f"policy {name.strip()}": path.strip() for name, path in named_policies}
    found = [  # π_SFT at its revision, the policies at their own default (the revision is π_SFT's alone)
        tightest_prompt_context(models, {"prompts": prompts}, tokenizer, model_revision, trust_remote_code)
        for models, model_revision in (({sft_model_name_or_path: sft_model_name_or_path}, revision), (policies, None))
    ]
    tightest = min(
        (f for f in found if f is not None), key=lambda f: context_of(f[0])[0] - f[3], default=None
    )  # the least room left for an answer
    if tightest is not None:
        model_config, name, _, longest = tightest
        check_fits_context(
            model_config,
            name,
            {"the longest prompt": longest, "max_new_tokens": config.max_new_tokens},
            lower="max_new_tokens",
            alone="preview fewer prompts (num_prompts) so that the longest is left out, or use a model with a longer "
            "context",
        )


def _other_models(model_init_kwargs: dict) -> dict:
    """The kwargs of a model other than π_SFT (π_ref, a policy, a reward's model): the revision is π_SFT's alone."""
    return {k: v for k, v in model_init_kwargs.items() if k != "revision"}


def _scorer(base, sft_model_name_or_path: str, settings: dict, model_init_kwargs: dict):
    """The reward model of one variant, sharing the already loaded π_SFT where it can (a full SFT model)."""
    from transformers import AutoTokenizer
    from trl.trainer.utils import create_model_from_path

    from ..reference_manifest import resolve_reference
    from ..reward_model import CheckpointRewardModel
    from ..rewards import reward_from_settings, same_reward

    reward = reward_from_settings(settings)  # the trainer's door from settings to a reward
    if same_reward(reward, base.reward):
        return base  # R = Σ log π_SFT: the base scorer is exactly that
    model_paths = dict(settings.get("dense_reward_models") or {})
    if base.sft_adapter is not None:  # adapters on one base: load the pair as the recipes do
        return CheckpointRewardModel.from_pretrained(
            sft_model_name_or_path,
            settings.get("ref_model_name_or_path"),
            reward=reward,
            model_paths=model_paths,
            **model_init_kwargs,
        )
    ref_model, ref_tokenizer = None, None
    if "ref" in reward.model_names:
        hub = model_init_kwargs.get("revision"), model_init_kwargs.get("token")  # π_SFT's manifest, at its revision
        ref_path = settings.get("ref_model_name_or_path") or resolve_reference(sft_model_name_or_path, *hub)[1]
        ref_model = create_model_from_path(ref_path, **_other_models(model_init_kwargs)).to(base.device)
        with contextlib.suppress(OSError, ValueError):  # a π_ref saved without its tokenizer is checked by vocabulary
            ref_tokenizer = AutoTokenizer.from_pretrained(ref_path)
    return CheckpointRewardModel(
        base.sft_model,
        ref_model,
        processing_class=base.processing_class,
        ref_processing_class=ref_tokenizer,
        token_chunk_size=base.token_chunk_size,
        reward=reward,
        models={
            n: create_model_from_path(p, **_other_models(model_init_kwargs)).to(base.device)
            for n, p in model_paths.items()
            if n in reward.model_names
        },
    )


def _judged(judge, name: str, pairs: list, output_dir: str) -> list:
    """`judge.judge_pairs(pairs)` with every verdict cached in `<output_dir>/judgements/<name>.jsonl` (judge calls cost)."""
    import re

    from ..evaluation.judges import judge_pairs_cached

    path = Path(output_dir) / "judgements" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}.jsonl"
    return judge_pairs_cached(judge, [str(i) for i in range(len(pairs))], pairs, path, show_progress=False)
