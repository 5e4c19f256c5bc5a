"""Benchmark prompts load from local files in each benchmark's own format (the Hub path is not reachable here)."""

import json

import pytest

from trl_dpr.embedded.task import build_demo_dataset
from trl_dpr.evaluation import EvalPrompt, load_prompt_set
from trl_dpr.evaluation.prompt_sets import load_demo_prompts


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return str(path)


ALPACA_EVAL_ROWS = [  # alpaca_eval.json: a JSON list
    {
        "instruction": "What are the names of some famous actors that started their careers on Broadway?",
        "output": "Some famous actors ...",
        "generator": "gpt4_1106_preview",
        "dataset": "helpful_base",
    },
    {
        "instruction": "How did US states get their names?",
        "output": "US states get their names from ...",
        "generator": "gpt4_1106_preview",
        "dataset": "helpful_base",
    },
    {
        "instruction": "Hi, I'm trying to solve a crossword puzzle, but I've never done one of these before. Can you help "
        "me out?",
        "output": "...",
        "generator": "gpt4_1106_preview",
        "dataset": "koala",
    },
]
ARENA_HARD_ROWS = [  # arena-hard-v0.1 question.jsonl
    {
        "question_id": "328c149ed45a41c0b9d6f14659e63599",
        "category": "arena-hard-v0.1",
        "cluster": "ABC Sequence Puzzles & Groups",
        "turns": [{"content": "Use ABC notation to write a melody in the style of a folk tune."}],
    },
    {
        "question_id": "b43c07656ead4150b360294ee932b410",
        "category": "arena-hard-v0.1",
        "cluster": "ABC Sequence Puzzles",
        "turns": [{"content": "SOLVE THIS IN C++ : There are three cards with letters a, b, c placed in a row..."}],
    },
]
LIMA_ROWS = [  # GAIR/lima test.jsonl
    {
        "conversations": [
            "Can brain cells move? By movement I mean long distance migration (preferably within the brain only)."
        ],
        "source": "stackexchange",
    },
    {
        "conversations": ["I'm a 23 year old, and I have a job offer in another city. Should I take it?"],
        "source": "reddit",
    },
]
MT_BENCH_FASTCHAT_ROWS = [  # FastChat question.jsonl
    {
        "question_id": 81,
        "category": "writing",
        "turns": [
            "Compose an engaging travel blog post about a recent trip to Hawaii.",
            "Rewrite your previous response. Start every sentence with the letter A.",
        ],
    },
    {
        "question_id": 111,
        "category": "math",
        "turns": [
            "The vertices of a triangle are at points (0, 0), (-1, 1), and (3, 3). What is the area of the triangle?",
            "What's area of the circle circumscribing the triangle?",
        ],
        "reference": ["Area is 3", "5pi"],
    },
]
MT_BENCH_H4_ROWS = [  # HuggingFaceH4/mt_bench_prompts: prompt / prompt_id, empty reference outside math-like categories
    {
        "prompt": ["Describe a vivid and unique character.", "Revise it with an allusion to a famous work."],
        "prompt_id": 31296117,
        "category": "writing",
        "reference": [],
    },
    {
        "prompt": ["Write a function to find the median of two sorted arrays.", "Is there a faster implementation?"],
        "prompt_id": 25311049,
        "category": "coding",
        "reference": ["Carefully check if the given solution is correct.", "O(log(min(n,m)))"],
    },
]


def test_alpaca_eval_loads_instructions_from_its_json_list(tmp_path):
    path = tmp_path / "alpaca_eval.json"
    path.write_text(json.dumps(ALPACA_EVAL_ROWS))
    prompts = load_prompt_set("alpaca_eval", str(path))
    assert [p.prompt_id for p in prompts] == ["0", "1", "2"]
    assert prompts[1].turns == ("How did US states get their names?",) and prompts[2].category == "koala"
    assert prompts[0].references == ()


def test_arena_hard_loads_the_first_turn_content_and_the_cluster(tmp_path):
    prompts = load_prompt_set("arena_hard", write_jsonl(tmp_path / "question.jsonl", ARENA_HARD_ROWS))
    assert prompts[0].prompt_id == "328c149ed45a41c0b9d6f14659e63599"
    assert prompts[0].turns == ("Use ABC notation to write a melody in the style of a folk tune.",)
    assert prompts[1].category == "ABC Sequence Puzzles"


def test_lima_loads_the_first_message_of_each_conversation(tmp_path):
    prompts = load_prompt_set("lima", write_jsonl(tmp_path / "test.jsonl", LIMA_ROWS))
    assert len(prompts) == 2 and prompts[0].turns[0].startswith("Can brain cells move?")
    assert prompts[1].category == "reddit" and len(prompts[1].turns) == 1


@pytest.mark.parametrize("rows", [MT_BENCH_FASTCHAT_ROWS, MT_BENCH_H4_ROWS], ids=["fastchat", "h4"])
def test_mt_bench_loads_two_turns_categories_and_references(tmp_path, rows):
    prompts = load_prompt_set("mt_bench", write_jsonl(tmp_path / "question.jsonl", rows))
    assert all(len(p.turns) == 2 for p in prompts)
    assert prompts[0].references == () and len(prompts[1].references) == 2
    assert prompts[1].category in ("math", "coding") and prompts[0].prompt_id == str(
        rows[0].get("question_id", rows[0].get("prompt_id"))
    )


def test_the_hub_path_offline_fails_with_the_file_to_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="alpaca_eval_path"):
        load_prompt_set("alpaca_eval")


def test_demo_prompts_are_the_held_out_split_with_exact_answers():
    prompts = load_demo_prompts(8, seed=0)
    held_out = build_demo_dataset(num_train=10, num_test=8, seed=0)["test"]
    assert [p.turns[0] for p in prompts] == [row["prompt"][0]["content"] for row in held_out]
    assert [p.references[0] for p in prompts] == held_out["answer"]
    assert load_prompt_set("demo", num_prompts=8, limit=3) == prompts[:3]


def test_a_second_turn_is_asked_after_the_models_own_first_answer():
    prompt = EvalPrompt("81", ("Write a haiku.", "Now translate it."))
    assert prompt.conversation([]) == [{"role": "user", "content": "Write a haiku."}]
    assert prompt.conversation(["Leaves fall."]) == [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Leaves fall."},
        {"role": "user", "content": "Now translate it."},
    ]
