"""`EvaluationConfig`: the settings of `trl-dpr evaluate` (one YAML per setup, every key overridable on the command
line). Defaults are the paper's: answers sampled at temperature 0.7, GPT-4o as judge at temperature 0, ties 0.5.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .answers import GENERATION_BACKENDS
from .judges import POSITION_RULES
from .prompt_sets import PROMPT_SETS

JUDGES = ("openai", "local", "exact")
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
_SECRET_VALUE = re.compile(r"^(sk-|hf_|Bearer )")


def _name_and_path(spec: str, what: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ValueError(f"{what} must be NAME=PATH (e.g. DPR=runs/demo/dpr), got {spec!r}.")
    return name.strip(), path.strip()


@dataclass
class EvaluationConfig:
    """Settings of an evaluation run; the defaults are the paper's.

    Example:
        >>> config = EvaluationConfig(benchmarks=["demo"], judge="exact", candidates=["DPR=runs/demo/dpr"])
        >>> config.models()
        {'SFT': 'runs/demo/sft', 'DPR': 'runs/demo/dpr'}
    """

    output_dir: str = field(
        default="runs/eval", metadata={"help": "Where answers, judgements and results are written."}
    )
    baseline: str = field(
        default="SFT=runs/demo/sft",
        metadata={"help": "NAME=PATH of the model every method is compared with (the paper: the SFT model)."},
    )
    candidates: list[str] = field(
        default_factory=lambda: ["DPR=runs/demo/dpr"],
        metadata={"help": "NAME=PATH of each method to evaluate (a model folder or Hub id; PEFT adapters work)."},
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["alpaca_eval", "arena_hard", "lima", "mt_bench"],
        metadata={"help": f"Prompt sets, among {sorted(PROMPT_SETS)}. mt_bench is graded 1–10, the others pairwise."},
    )
    alpaca_eval_path: str | None = field(default=None, metadata={"help": "Local alpaca_eval.json (else the Hub)."})
    arena_hard_path: str | None = field(
        default=None, metadata={"help": "Local Arena-Hard v0.1 question.jsonl (else the Hub)."}
    )
    lima_path: str | None = field(default=None, metadata={"help": "Local LIMA test.jsonl (else the gated Hub repo)."})
    mt_bench_path: str | None = field(default=None, metadata={"help": "Local MT-Bench question.jsonl (else the Hub)."})
    jsonl_path: str | None = field(
        default=None,
        metadata={
            "help": "benchmarks: [jsonl]: your own .jsonl of `prompt` + `answer` rows (or SFT's demonstrations: "
            "`messages`, `prompt` + `completion`, the answer then read from the assistant's text)."
        },
    )
    answer_check: str | None = field(
        default=None,
        metadata={
            "help": "judge: exact on your own task: 'module:function' in your folder, "
            "`def f(completions, answer, **kw) -> list[float]` (1 = right), as TRL's reward_funcs."
        },
    )
    answer_pattern: str | None = field(
        default=None,
        metadata={
            "help": "judge: exact on your own task, instead of answer_check: a regular expression whose last "
            "match's group 1 is the answer, e.g. 'The answer is (-?[0-9.]+)' (numbers compare as numbers)."
        },
    )
    demo_num_prompts: int = field(
        default=100, metadata={"help": "Held-out prompts of the embedded task (benchmark demo)."}
    )
    demo_seed: int = field(
        default=0, metadata={"help": "Seed of the embedded task's split (the one SFT and DPR used)."}
    )
    max_prompts: int | None = field(
        default=None, metadata={"help": "Only the first N prompts of each benchmark (smoke tests)."}
    )
    samples_per_prompt: int = field(
        default=1,
        metadata={
            "help": "Answers sampled per prompt and model, each judged against the baseline's answer of the same "
            "index (the bootstrap resamples prompts, not answers). More answers lower the sampling noise."
        },
    )

    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature of the answers (paper: 0.7)."})
    max_new_tokens: int = field(default=1024, metadata={"help": "Fixed maximum answer length, in tokens."})
    generation_batch_size: int = field(
        default=16, metadata={"help": "Prompts per generate call (transformers backend)."}
    )
    generation_backend: str = field(
        default="auto",
        metadata={
            "help": "auto (vLLM when installed and on GPU), transformers or vllm.",
            "choices": list(GENERATION_BACKENDS),
        },
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "dtype the models are loaded in.", "choices": ["auto", "bfloat16", "float16", "float32"]},
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Load the models (their config, tokenizer and weights; a local judge's too) with the code their "
            "Hub repo or folder ships: only for a model you trust, as transformers' trust_remote_code. A training "
            "recipe's evaluation_config takes the training run's True where its YAML does not set the key; so does "
            "an EvaluationConfig given to evaluate_against_sft from Python, whose False is taken for the default."
        },
    )
    device: str = field(
        default="auto",
        metadata={
            "help": "Where the models answer (and a local judge runs): auto (the GPU when there is one), cpu or "
            "cuda. A training recipe's evaluation_config runs on the training run's device.",
            "choices": ["auto", "cpu", "cuda"],
        },
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed."})

    judge: str = field(
        default="openai",
        metadata={
            "help": "openai (any OpenAI-compatible endpoint), local (a Hugging Face chat model, `judge_model` is its "
            "path), exact (right answers decide: the embedded task's (demo), or yours (jsonl) with answer_check or "
            "answer_pattern), or module:Class, a judge of yours with judge_pairs(pairs) -> 'win' / 'tie' / 'loss'.",
        },
    )
    judge_model: str = field(
        default="gpt-4o", metadata={"help": "Judge model name (openai) or path / Hub id (local)."}
    )
    judge_base_url: str = field(default="https://api.openai.com/v1", metadata={"help": "OpenAI-compatible API root."})
    judge_api_key_env: str = field(
        default="OPENAI_API_KEY",
        metadata={
            "help": "NAME of the environment variable holding the API key (the key itself never goes in a file)."
        },
    )
    judge_temperature: float = field(default=0.0, metadata={"help": "Judge temperature (paper: 0)."})
    judge_max_tokens: int = field(default=1024, metadata={"help": "Longest judge reply (explanation + verdict)."})
    judge_timeout_s: float = field(default=120.0, metadata={"help": "Seconds to wait for one judge response."})
    judge_max_retries: int = field(
        default=6,
        metadata={"help": "Retries on 408 / 409 / 429 / 5xx / timeouts (the openai client's exponential backoff)."},
    )
    judge_max_workers: int = field(default=8, metadata={"help": "Parallel judge requests."})
    position_rule: str = field(
        default="consistent",
        metadata={
            "help": "How the two orders of a pair combine: consistent (MT-Bench: disagreement is a tie) or lenient "
            "(a win and a tie is a win). See trl_dpr.evaluation.judges.",
            "choices": list(POSITION_RULES),
        },
    )
    confidence: float = field(default=0.95, metadata={"help": "Level of the bootstrap confidence intervals."})
    bootstrap_resamples: int = field(default=2000, metadata={"help": "Bootstrap resamples of each win rate."})

    def __post_init__(self):
        unknown = [b for b in self.benchmarks if b not in PROMPT_SETS]
        if unknown or not self.benchmarks:
            raise ValueError(f"Unknown benchmarks {unknown or '(none given)'}; choose among {sorted(PROMPT_SETS)}.")
        if self.judge not in JUDGES and ":" not in self.judge:
            raise ValueError(
                f"judge must be one of {JUDGES} or 'module:Class' (a judge of yours), got {self.judge!r}."
            )
        if ":" in self.judge and "mt_bench" in self.benchmarks:
            raise ValueError(
                f"mt_bench is graded 1–10 by a chat model (judge: openai or local), not by {self.judge}: "
                "evaluate it in a run of its own."
            )
        open_ended = [b for b in self.benchmarks if b not in ("demo", "jsonl")]
        if self.judge == "exact" and open_ended:
            raise ValueError(
                "judge: exact compares answers with the right ones, which only the embedded task (demo) and your own "
                f"file (jsonl) have: use benchmarks: [demo] or [jsonl], or an LLM judge (openai / local) for {open_ended}."
            )
        if self.judge == "exact" and "jsonl" in self.benchmarks and not (self.answer_check or self.answer_pattern):
            raise ValueError(
                "judge: exact on benchmarks: [jsonl] needs to know a right answer: set answer_check: my_checks:my_check "
                "(def my_check(completions, answer, **kw) -> list[float]) or answer_pattern: 'The answer is (-?[0-9.]+)'."
            )
        if (self.answer_check or self.answer_pattern) and "demo" in self.benchmarks:
            raise ValueError(
                "answer_check / answer_pattern are for your own prompts (benchmarks: [jsonl]); the embedded task (demo) "
                "has its own check. Evaluate them in two runs."
            )
        if "jsonl" in self.benchmarks and not self.jsonl_path:
            raise ValueError("benchmarks: [jsonl] needs jsonl_path: your .jsonl file of `prompt` + `answer` rows.")
        if self.position_rule not in POSITION_RULES:
            raise ValueError(f"position_rule must be one of {POSITION_RULES}, got {self.position_rule!r}.")
        if not self.candidates:
            raise ValueError("Give at least one candidate (NAME=PATH) to compare with the baseline.")
        names = [name for name, _ in self._named_paths()]
        if len(set(names)) != len(names):
            raise ValueError(f"Model names must be distinct (they key the answer caches); got {names}.")
        if self.samples_per_prompt < 1:
            raise ValueError(f"samples_per_prompt must be >= 1, got {self.samples_per_prompt}.")
        if self.temperature < 0 or self.max_new_tokens < 1:
            raise ValueError(
                f"Need temperature >= 0 and max_new_tokens >= 1; got {self.temperature}, {self.max_new_tokens}."
            )

    @property
    def baseline_name(self) -> str:
        return _name_and_path(self.baseline, "baseline")[0]

    def models(self) -> dict[str, str]:
        """`{name: path}`, the baseline first, then the candidates in order."""
        return dict(self._named_paths())

    def _named_paths(self) -> list[tuple[str, str]]:
        return [_name_and_path(self.baseline, "baseline")] + [_name_and_path(c, "candidates") for c in self.candidates]

    def prompt_path(self, benchmark: str) -> str | None:
        return getattr(self, f"{benchmark}_path", None)


# The host each provider's key may be sent to, named by the variable that holds it; any other variable's key goes to
# the default judge_base_url's host. A config file cannot send a key elsewhere (issue 42): the command line can.
PROVIDER_HOSTS = {"OPENAI_API_KEY": "api.openai.com", "ANTHROPIC_API_KEY": "api.anthropic.com"}
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def check_judge_destination(config: dict, source: str, url_on_command_line: bool = False) -> None:
    """Refuse a config whose `judge_base_url` would send the judge's key to a host other than its provider's (or this
    machine), unless the URL is named on the command line, where the user reads it."""
    from urllib.parse import urlparse

    url = config.get("judge_base_url")
    if config.get("judge", "openai") != "openai" or url is None or url_on_command_line:
        return
    key_env = config.get("judge_api_key_env") or "OPENAI_API_KEY"
    allowed = PROVIDER_HOSTS.get(key_env, urlparse(EvaluationConfig.judge_base_url).hostname)
    host = urlparse(str(url)).hostname
    if host not in (allowed, *_LOOPBACK):
        raise ValueError(
            f"{source} sends the judge's key (${key_env}) to {host!r}, not to {allowed}: a config file may not send "
            f"your key elsewhere. If you trust that host, name it on the command line: trl-dpr evaluate --config "
            f"{source} --judge_base_url {url}"
        )


def check_config_has_no_secrets(config: dict, source: str, url_on_command_line: bool = False) -> None:
    """Refuse a config that carries a secret: an `env:` entry setting a key / token variable, or a value that looks
    like a key; and one that sends the judge's key to another host (`check_judge_destination`). Keys belong in the
    environment of the shell that runs the recipe, never in a file.
    """
    check_judge_destination(config, source, url_on_command_line)
    env = config.get("env") or {}
    for name in env if isinstance(env, dict) else []:
        if _SECRET_NAME.search(str(name)) or str(name) == config.get("judge_api_key_env"):
            raise ValueError(
                f"{source} sets {name} in its `env:` section. Secrets never go in config files: remove it and "
                f"`export {name}=...` in your shell instead."
            )
    for key, value in config.items():
        if isinstance(value, str) and _SECRET_VALUE.match(value):
            raise ValueError(
                f"{source}: `{key}` holds what looks like a secret key. Put the key in an environment variable and "
                "name that variable in `judge_api_key_env`."
            )
