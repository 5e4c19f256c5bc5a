"""The SFT-vs-DPR comparison table of the embedded pipeline (markdown + JSON)."""

from __future__ import annotations

from collections import defaultdict

from ..demo_task import is_correct
from .win_rate import WinRate

__all__ = ["comparison_table"]


def _model_row(prompts, answers_key, kinds, answers, reward_model) -> dict:
    correct = [is_correct(a, k) for a, k in zip(answers, answers_key)]
    by_kind = defaultdict(list)
    for kind, ok in zip(kinds, correct):
        by_kind[kind].append(ok)
    tokenizer = reward_model.processing_class
    lengths = [len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    scored = reward_model.score_text(prompts, [a if a else " " for a in answers])
    return {
        "accuracy": sum(correct) / len(correct),
        "accuracy_by_kind": {kind: sum(v) / len(v) for kind, v in sorted(by_kind.items())},
        "mean_response_tokens": sum(lengths) / len(lengths),
        "mean_dense_reward": sum(s["total"] for s in scored) / len(scored),
    }


def comparison_table(
    prompts, answers_key, kinds, sft_answers, dpr_answers, outcomes, reward_model, result: WinRate, greedy=None,
    temperature: float | None = None,
) -> dict:
    """Accuracy, win rate of DPR vs SFT (ties 0.5, bootstrap CI), mean response length and dense reward Σ r̂.

    `greedy`, when given, is `(answers_key, sft_greedy_answers, dpr_greedy_answers)` (one answer per prompt, decoded
    greedily) and adds a greedy-accuracy column.
    """
    sft = _model_row(prompts, answers_key, kinds, sft_answers, reward_model)
    dpr = _model_row(prompts, answers_key, kinds, dpr_answers, reward_model)
    if greedy is not None:
        key, sft_greedy, dpr_greedy = greedy
        for row, answers in ((sft, sft_greedy), (dpr, dpr_greedy)):
            row["greedy_accuracy"] = sum(is_correct(a, k) for a, k in zip(answers, key)) / len(key)
    win = result.as_dict()
    kind_names = list(sft["accuracy_by_kind"])
    greedy_header = " greedy accuracy |" if greedy is not None else ""
    lines = [
        f"| model | accuracy{'' if temperature is None else f' (T={temperature})'} |" + greedy_header + " " + " | ".join(f"acc. {k}" for k in kind_names)
        + " | win rate vs SFT (95% CI) | mean length (tokens) | dense reward Σr̂ |",
        "|---|---|" + ("---|" if greedy is not None else "") + "---|" * len(kind_names) + "---|---|---|",
    ]
    for name, row, rate in (("SFT", sft, "—"), ("DPR", dpr, f"{win['win_rate']:.3f} [{win['ci_low']:.3f}, {win['ci_high']:.3f}]")):
        per_kind = " | ".join(f"{row['accuracy_by_kind'][k]:.3f}" for k in kind_names)
        greedy_cell = f" {row['greedy_accuracy']:.3f} |" if greedy is not None else ""
        lines.append(
            f"| {name} | {row['accuracy']:.3f} |{greedy_cell} {per_kind} | {rate} | {row['mean_response_tokens']:.1f} | "
            f"{row['mean_dense_reward']:.3f} |"
        )
    lines.append(f"\nwins {win['wins']}, ties {win['ties']}, losses {win['losses']} over {win['n']} answers (exact-answer judge)")
    return {"sft": sft, "dpr": dpr, "win_rate": win, "table_markdown": "\n".join(lines)}
