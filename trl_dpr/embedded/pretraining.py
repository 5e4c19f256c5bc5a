"""The embedded *pretrained* base: a tiny Llama language-modelled on plain text about the task before any SFT.

Why: r̂ = log π_SFT − log π_ref is the direction SFT moved the model in; only from a base that already writes about the
task in several styles does it separate the expert's style (the paper starts from pretrained models too). The corpus
(train problems only):

    expert     the expert's step-by-step response, as in the SFT demonstrations              20 %
    nonexpert  the same template, each computed number slipping by 1-3 with probability 0.3 25 %
    terse      "The answer is X." (right)                                                     15 %
    alternative another writer's phrasing, numbers slipping with probability 0.15            25 %
    other      arithmetic drills, sorted lists, short stories with the task's names          15 %

A plain PyTorch loop, not a Trainer: a second Accelerator would fix the process-wide accelerate state before the
user's trainer sets it. The build is not bitwise reproducible, so one ships (docs/results.md, "The shipped base"):

    python -m trl_dpr.embedded.pretraining --output runs/rebuilt-base [--ship]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate import PartialState
from tqdm.auto import tqdm

from .task import ITEMS, KINDS, NAMES, _pronoun, demo_corpus, held_out_split, make_example
from .tiny_lm import build_tiny_causal_lm, build_tokenizer

SHIPPED_BASE = Path(__file__).parent / "pretrained_base"  # the build every documented number was measured on
SHIPPED_RECORD = "shipped.json"

CORPUS_MIX = {"expert": 0.20, "nonexpert": 0.25, "terse": 0.15, "alternative": 0.25, "other": 0.15}
NONEXPERT_SLIP_RATE = 0.3
ALTERNATIVE_SLIP_RATE = 0.15
LAYOUTS = ["Question: {p}\nAnswer: {r}", "Q: {p}\nA: {r}", "{p} {r}", "Problem: {p}\nSolution: {r}", "{p}\n{r}"]


@dataclass
class PretrainingSettings:
    """The embedded pretrained base's recipe; the defaults are the base every documented number was measured on."""

    num_documents: int = 150_000
    max_steps: int = 1200
    batch_size: int = 32
    block_size: int = 256
    learning_rate: float = 2e-3
    hidden_size: int = 128
    num_layers: int = 4
    vocab_size: int = 1200
    seed: int = 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _slip(value: int, rng: random.Random, rate: float) -> int:
    if rate and rng.random() < rate:
        slipped = value + rng.choice([-3, -2, -1, 1, 2, 3])
        return slipped if slipped >= 0 else value + 1
    return value


def _alternative_solution(kind: str, prompt: str, rng: random.Random, rate: float) -> str:
    """Another writer's phrasing of the solution; each computed number slips with probability `rate`."""
    numbers, name = _ints(prompt), prompt.split()[0]
    if kind in ("add", "subtract"):
        a, b = numbers
        result = _slip(a + b if kind == "add" else a - b, rng, rate)
        if kind == "add":
            options = [
                f"{a} plus {b} is {result}, so {name} has {result} now.",
                f"We add: {a} + {b} = {result}.",
                f"Adding {b} to {a} gives {result}.",
            ]
        else:
            options = [
                f"{a} minus {b} is {result}, so {result} are left.",
                f"We subtract: {a} - {b} = {result}.",
                f"Taking {b} from {a} leaves {result}.",
            ]
        return f"{rng.choice(options)} The answer is {result}."
    if kind == "multiply":
        boxes, per_box = numbers
        product = _slip(per_box * boxes, rng, rate)
        options = [
            f"{boxes} times {per_box} is {product}.",
            f"We multiply: {per_box} * {boxes} = {product}.",
            f"{boxes} boxes of {per_box} make {product}.",
        ]
        return f"{rng.choice(options)} The answer is {product}."
    if kind == "wages":
        rate_, hours, extra_rate, worked = numbers
        regular = _slip(hours * rate_, rng, rate)
        extra_hours = _slip(worked - hours, rng, rate)
        overtime = _slip(extra_hours * extra_rate, rng, rate)
        total = _slip(regular + overtime, rng, rate)
        return rng.choice(
            [
                f"Regular pay is {hours} * {rate_} = {regular}. Extra hours are {worked} - {hours} = {extra_hours}, paid "
                f"{extra_hours} * {extra_rate} = {overtime}. Together {regular} + {overtime} = {total}. The answer is {total}.",
                f"{name} gets {regular} for the first {hours} hours and {overtime} for the other {extra_hours}. "
                f"{regular} + {overtime} = {total}. The answer is {total}.",
            ]
        )
    if kind == "sort":
        ordered = sorted(numbers)
        if rate and rng.random() < rate:
            i = rng.randrange(len(ordered) - 1)
            ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
        shown = " ".join(map(str, ordered))
        return rng.choice(
            [f"In order: {shown}. The answer is {shown}.", f"From small to large: {shown}. The answer is {shown}."]
        )
    raise ValueError(f"Unknown kind {kind!r}; expected one of {KINDS}.")


def _other_text(rng: random.Random) -> str:
    """Text that is not a problem: arithmetic drills, sorted lists, short stories with the task's names and items."""
    r = rng.random()
    if r < 0.5:
        facts = []
        for _ in range(rng.randint(3, 6)):
            op = rng.choice("+-*")
            if op == "+":
                a, b = rng.randint(10, 99), rng.randint(2, 9)
                facts.append(f"{a} + {b} = {a + b}.")
            elif op == "-":
                a, b = rng.randint(20, 99), rng.randint(2, 9)
                facts.append(f"{a} - {b} = {a - b}.")
            else:
                a, b = rng.randint(2, 9), rng.randint(2, 9)
                facts.append(f"{a} * {b} = {a * b}.")
        return " ".join(facts)
    if r < 0.7:
        numbers = rng.sample(range(1, 10), rng.randint(3, 6))
        return f"The numbers {' '.join(map(str, numbers))} in order are {' '.join(map(str, sorted(numbers)))}."
    name, item, other = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(NAMES)
    n = rng.randint(2, 30)
    return rng.choice(
        [
            f"{name} likes {item}. {_pronoun(name)} keeps {n} {item} in a box and shows them to {other}.",
            f"{name} and {other} went to the shop. They looked at {item} and bought {n} of them.",
            f"Every day {name} counts {item}. Today {_pronoun(name).lower()} counted {n}.",
        ]
    )


def _document(style: str, rng: random.Random, held_out: set[str]) -> str:
    if style == "other":
        return _other_text(rng)
    kind = rng.choice(KINDS)
    while True:  # a problem of the held-out split never appears in pretraining
        problem_seed = rng.getrandbits(48)
        example = make_example(kind, random.Random(problem_seed))
        if example.prompt not in held_out:
            break
    if style == "expert":
        solution = example.response
    elif style == "nonexpert":  # the same problem (same seed), written with slips
        solution = make_example(kind, random.Random(problem_seed), error_rate=NONEXPERT_SLIP_RATE).response
    elif style == "terse":
        solution = f"The answer is {example.answer}."
    elif style == "alternative":
        solution = _alternative_solution(kind, example.prompt, rng, ALTERNATIVE_SLIP_RATE)
    else:
        raise ValueError(f"Unknown style {style!r}; expected one of {list(CORPUS_MIX)}.")
    return rng.choice(LAYOUTS).format(p=example.prompt, r=solution)


def pretraining_corpus(num_documents: int, seed: int = 0, mix: dict[str, float] | None = None) -> list[str]:
    """`num_documents` plain-text documents drawn with the style weights `mix` (default `CORPUS_MIX`)."""
    mix = CORPUS_MIX if mix is None else mix
    styles, weights = list(mix), list(mix.values())
    held_out = {row[0]["content"] for row in held_out_split(seed=0)["prompt"]}
    rng = random.Random(seed)
    return [_document(rng.choices(styles, weights)[0], rng, held_out) for _ in range(num_documents)]


def _packed_blocks(tokenizer, documents: list[str], block_size: int) -> torch.Tensor:
    """Documents joined by EOS and cut into `[num_blocks, block_size]` (GPT-style packing); encoded by the Rust
    backend directly (150k documents in ~14 s instead of ~24 s on one core)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    ids: list[int] = []
    for start in range(0, len(documents), 5000):
        chunk = documents[start : start + 5000]
        if backend is not None:
            rows = [encoding.ids for encoding in backend.encode_batch(chunk, add_special_tokens=False)]
        else:  # a slow (Python) tokenizer
            rows = tokenizer(chunk, add_special_tokens=False)["input_ids"]
        for row in rows:
            ids.extend(row)
            ids.append(tokenizer.eos_token_id)
    data = torch.tensor(ids, dtype=torch.long)
    num_blocks = data.numel() // block_size
    return data[: num_blocks * block_size].view(num_blocks, block_size)


def _pretrain(
    model, blocks: torch.Tensor, settings: PretrainingSettings, stop_after: int | None = None
) -> list[tuple[int, float]]:
    """Next-token loss on random packed blocks: AdamW (β2 0.95, wd 0.01), 3 % warm-up then cosine, grad-norm 1.

    Not transformers' cosine schedule, whose warm-up starts at lr 0: the shipped base used (step + 1) / warmup.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, int(0.03 * settings.max_steps))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, settings.max_steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    generator = torch.Generator().manual_seed(settings.seed)
    order, position, losses = torch.randperm(len(blocks), generator=generator), 0, []
    model.train()
    progress = tqdm(range(1, settings.max_steps + 1), desc="pretraining the embedded base", mininterval=10)
    for step in progress:
        if position + settings.batch_size > len(blocks):  # next epoch
            order, position = torch.randperm(len(blocks), generator=generator), 0
        batch = blocks[order[position : position + settings.batch_size]]
        position += settings.batch_size
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 1 or step % 50 == 0:
            losses.append((step, round(loss.item(), 4)))
            progress.set_postfix(loss=f"{loss.item():.3f}")
        if stop_after is not None and step >= stop_after:  # a test replays the first steps of the build
            break
    model.eval()
    return losses


def build_pretrained_base(path: str | os.PathLike, settings: PretrainingSettings | None = None) -> str:
    """Build the embedded pretrained base into `path` once (main process only) and return the path.

    About 20 minutes on one CPU thread; a complete build is reused (written to `<path>.partial`, then renamed).
    """
    path = Path(path)
    settings = settings or PretrainingSettings()
    if not (path / "pretraining.json").is_file():
        if PartialState().is_main_process:
            started = time.time()
            partial = path.with_name(path.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            documents = pretraining_corpus(settings.num_documents, seed=settings.seed)
            tokenizer = build_tokenizer(documents[:20_000] + demo_corpus(seed=settings.seed), settings.vocab_size)
            blocks = _packed_blocks(tokenizer, documents, settings.block_size)
            model = build_tiny_causal_lm(
                tokenizer,
                "llama",
                hidden_size=settings.hidden_size,
                num_layers=settings.num_layers,
                num_heads=4,
                seed=settings.seed,
            )
            losses = _pretrain(model, blocks, settings)
            model.save_pretrained(partial)
            tokenizer.save_pretrained(partial)
            record = {
                "settings": asdict(settings),
                "num_blocks": len(blocks),
                "losses": losses,
                "torch_threads": torch.get_num_threads(),
                "wall_s": round(time.time() - started, 1),
            }
            (partial / "pretraining.json").write_text(json.dumps(record, indent=1))
            shutil.rmtree(path, ignore_errors=True)
            partial.rename(path)
        PartialState().wait_for_everyone()
    return str(path)


@torch.no_grad()
def held_out_loss(path: str | os.PathLike, num_documents: int = 400, seed: int = 1) -> float:
    """Mean next-token loss of the base in `path` on `num_documents` corpus documents drawn with another seed than its
    training corpus (one document per row, float32, no padding): what tells a trained base from an untrained one.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    total, count = 0.0, 0
    for document in pretraining_corpus(num_documents, seed=seed):
        ids = torch.tensor([tokenizer(document, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]])
        loss = model(input_ids=ids, labels=ids).loss
        total, count = total + loss.item() * (ids.size(1) - 1), count + ids.size(1) - 1
    return total / count


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ship_pretrained_base(
    built: str | os.PathLike, target: str | os.PathLike = SHIPPED_BASE, command: str = ""
) -> Path:
    """Copy a complete build into `target` (the package's shipped base) with `shipped.json`: its settings, held-out
    loss, the SHA-256 of each file, and how it was built.
    """
    built, target = Path(built), Path(target)
    if not (built / "pretraining.json").is_file():
        raise FileNotFoundError(f"{built} holds no complete build (no pretraining.json); build it first.")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(built, staging)
    files = sorted(p.name for p in staging.iterdir() if p.is_file())
    record = {
        "built_by": command or "python -m trl_dpr.embedded.pretraining --output <folder> --ship",
        "held_out_loss": round(held_out_loss(staging), 6),
        "held_out": {"num_documents": 400, "seed": 1},
        "sha256": {name: _sha256(staging / name) for name in files},
    }
    (staging / SHIPPED_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def shipped_base_problem(path: str | os.PathLike = SHIPPED_BASE) -> str | None:
    """What is wrong with the shipped base in `path` (missing, or a file whose SHA-256 differs), or None."""
    path = Path(path)
    record_path = path / SHIPPED_RECORD
    if not record_path.is_file():
        return f"{path} holds no shipped base ({SHIPPED_RECORD} is missing)"
    for name, digest in json.loads(record_path.read_text())["sha256"].items():
        if not (path / name).is_file():
            return f"{path / name} is missing"
        if _sha256(path / name) != digest:
            return f"{path / name} differs from the shipped file (SHA-256 mismatch)"
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Rebuild the embedded pretrained base (about 20 min on one CPU thread)."
    )
    parser.add_argument("--output", required=True, help="Folder to build into (reused when complete).")
    parser.add_argument("--ship", action="store_true", help=f"Then copy it into the package ({SHIPPED_BASE}).")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the shipped base: 1).")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    folder = build_pretrained_base(args.output)
    print(f"Built: {folder}")
    if args.ship:
        print(f"Shipped: {ship_pretrained_base(folder)}")


if __name__ == "__main__":
    main()
