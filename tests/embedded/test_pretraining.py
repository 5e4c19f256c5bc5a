"""The embedded pretrained base: its corpus has the stated composition (checked by reading the documents, not by the
generator's own bookkeeping), the build is written once and atomically, and pretraining taught the shipped base the
task's format."""

import json
import re

import pytest
import torch

from trl_dpr.embedded import held_out_split, is_correct
from trl_dpr.embedded.pretraining import CORPUS_MIX, PretrainingSettings, build_pretrained_base, pretraining_corpus

EXPERT_OPENINGS = re.compile(r"^(\w+ starts with |\w+ had |Each box holds |For the first |The smallest is )")
EQUATION = re.compile(r"(\d+) ([-+*]) (\d+) = (\d+)")
PROBLEM = re.compile(r"(How many .*\?|How much did \w+ earn\?|Sort these numbers from smallest to largest: [\d ]+\.)")
TINY = PretrainingSettings(num_documents=300, max_steps=2, batch_size=2, block_size=32, vocab_size=400)


def _solution(document: str) -> str | None:
    """The text after the problem statement, or None for a document that poses no problem."""
    match = PROBLEM.search(document)
    if match is None:
        return None
    rest = document[match.end() :]
    return rest.split("\n", 1)[-1].removeprefix("Answer: ").removeprefix("Solution: ").removeprefix("A: ").strip()


def _has_slip(solution: str) -> bool:
    """Whether a written computation is wrong (an equation that does not hold, or a sort answer out of order)."""
    for a, op, b, result in EQUATION.findall(solution):
        a, b, result = int(a), int(b), int(result)
        if {"+": a + b, "-": a - b, "*": a * b}[op] != result:
            return True
    if solution.startswith("The smallest is"):
        numbers = [int(x) for x in solution.split("The answer is ")[1].rstrip(".").split()]
        return numbers != sorted(numbers)
    return False


def test_the_corpus_has_the_stated_mix_of_styles_and_slips():
    documents = pretraining_corpus(4000, seed=3)
    solutions = [_solution(document) for document in documents]
    other = sum(s is None for s in solutions) / len(documents)
    terse = sum(s is not None and re.fullmatch(r"The answer is [\d ]+\.", s) is not None for s in solutions)
    expert_template = [s for s in solutions if s is not None and EXPERT_OPENINGS.match(s)]
    alternative = len(documents) - other * len(documents) - terse - len(expert_template)
    assert other == pytest.approx(CORPUS_MIX["other"], abs=0.025)
    assert terse / len(documents) == pytest.approx(CORPUS_MIX["terse"], abs=0.025)
    assert len(expert_template) / len(documents) == pytest.approx(
        CORPUS_MIX["expert"] + CORPUS_MIX["nonexpert"], abs=0.03
    )
    assert alternative / len(documents) == pytest.approx(CORPUS_MIX["alternative"], abs=0.03)
    # Among expert-template documents, only the non-expert ones slip: 1 computation at rate 0.3 for add, subtract,
    # multiply and sort, 4 for wages (1 − 0.7⁴), the five kinds equally often.
    slip_per_nonexpert = (4 * 0.3 + (1 - 0.7**4)) / 5
    share_nonexpert = CORPUS_MIX["nonexpert"] / (CORPUS_MIX["expert"] + CORPUS_MIX["nonexpert"])
    slipped = sum(_has_slip(s) for s in expert_template) / len(expert_template)
    assert slipped == pytest.approx(share_nonexpert * slip_per_nonexpert, abs=0.04)
    # Every terse answer is right: its number is the problem's answer (checked on additions, by hand).
    for document, solution in zip(documents, solutions):
        match = re.search(r"has (\d+) \w+\. (?:She|He) gets (\d+) more\.", document)
        if match and solution and solution.startswith("The answer is"):
            assert is_correct(solution, str(int(match[1]) + int(match[2])))


def test_no_held_out_problem_is_in_the_corpus():
    held_out = {row[0]["content"] for row in held_out_split()["prompt"]}
    problems = {document for document in pretraining_corpus(3000, seed=1)}
    assert not any(problem in document for document in problems for problem in held_out)


def test_the_base_is_built_once_and_an_interrupted_build_is_redone(tmp_path):
    path = tmp_path / "base"
    leftover = tmp_path / "base.partial"
    leftover.mkdir()
    (leftover / "config.json").write_text("{half written")
    build_pretrained_base(path, TINY)
    assert not leftover.exists() and (path / "model.safetensors").is_file()
    record = json.loads((path / "pretraining.json").read_text())
    assert record["settings"]["max_steps"] == 2 and len(record["losses"]) == 1
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    build_pretrained_base(path, TINY)  # a complete build is reused, not redone
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    # A folder without pretraining.json (a build killed between writing and renaming, or a foreign folder) is rebuilt.
    (path / "pretraining.json").unlink()
    build_pretrained_base(path, TINY)
    assert (path / "pretraining.json").is_file()


def test_pretraining_taught_the_shipped_base_the_task_format():
    """On the shipped base, the output of this pretraining whose build tests/embedded/test_shipped_base.py pins (its recorded
    losses, reproduced from the seeded init; its held-out loss, recomputed): a random-init model of this size writes no
    "The answer is" at all, the pretrained one continues most held-out problems with a solution ending in the task's
    answer sentence. (Training a small base here to show it took 150 steps, most of a minute.)"""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_dpr.embedded.pretraining import SHIPPED_BASE
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_BASE)
    prompts = [f"Question: {row[0]['content']}\nAnswer:" for row in held_out_split(num_prompts=20)["prompt"]]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)

    def answers(model):
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=80,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)

    pretrained = answers(AutoModelForCausalLM.from_pretrained(SHIPPED_BASE))
    assert sum("The answer is" in answer for answer in pretrained) >= 16, pretrained
    untrained = answers(build_tiny_causal_lm(tokenizer, "llama", hidden_size=128, num_layers=4, num_heads=4, seed=0))
    assert not any("The answer is" in answer for answer in untrained), untrained
