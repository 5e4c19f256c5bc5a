"""Judges: the local Hugging Face judge (a tiny random model: junk counted as unparseable), MT-Bench grading, the
exact-answer judge, and judging with a cache."""

import pytest

from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
from trl_dpr.evaluation import (
    EvalPrompt,
    ExactAnswerJudge,
    LLMPairwiseJudge,
    LocalChatModel,
    MTBenchGrader,
    PairToJudge,
    mt_bench_score,
    summarize_pairwise,
)
from trl_dpr.evaluation.judges import grade_mt_bench_cached, judge_pairs_cached


class ScriptedChat:
    """A chat model that records what it is asked and replies with `reply(messages)`."""

    name = "scripted"

    def __init__(self, reply):
        self.reply = reply
        self.asked = []

    def complete_batch(self, conversations):
        self.asked.extend(conversations)
        return [self.reply(c) for c in conversations]


def test_a_local_model_judges_through_the_same_prompts_and_its_junk_is_counted_unparseable(tokenizer):
    chat = LocalChatModel(
        build_tiny_causal_lm(tokenizer, seed=3), tokenizer, max_new_tokens=6, batch_size=4, name="tiny"
    )
    pairs = [PairToJudge(f"What is {i}+{i}?", f"The answer is {2 * i}.", "I do not know.") for i in range(3)]
    judgements = LLMPairwiseJudge(chat).judge_pairs(pairs)
    assert len(judgements) == 3
    assert all(j.outcome is None and j.problem for j in judgements)  # a random model writes no [[A>B]]
    assert all(len(j.judge_outputs) == 2 for j in judgements)
    rate, unparseable, _ = summarize_pairwise(judgements)
    assert rate is None and unparseable == 3
    assert chat.name == "local:tiny"


def test_mt_bench_grades_both_turns_with_references_for_math_only():
    chat = ScriptedChat(
        lambda messages: (
            "Accurate and clear.\nRating: [[9]]" if "reference" in messages[1]["content"] else "Fine.\nRating: [[6]]"
        )
    )
    prompts = [
        EvalPrompt(
            "111",
            ("Area of the triangle (0,0), (-1,1), (3,3)?", "Area of its circumscribed circle?"),
            "math",
            ("Area is 3", "5pi"),
        ),
        EvalPrompt(
            "81", ("Write a travel blog post about Hawaii.", "Rewrite it starting every sentence with A."), "writing"
        ),
    ]
    answers = {("111", 0): "It is 3.", ("111", 1): "5 pi.", ("81", 0): "Aloha! ...", ("81", 1): "A trip ..."}
    grades = MTBenchGrader(chat).grade(prompts, answers)
    assert [(g.prompt_id, g.turn, g.rating, g.used_reference) for g in grades] == [
        ("111", 0, 9.0, True),
        ("111", 1, 9.0, True),
        ("81", 0, 6.0, False),
        ("81", 1, 6.0, False),
    ]
    second_turn = chat.asked[1][1]["content"]
    assert "It is 3." in second_turn and "5 pi." in second_turn and "5pi" in second_turn  # conversation + references
    assert "second user question" in second_turn
    first_turn = chat.asked[0][1]["content"]
    assert "Area is 3" in first_turn and "5pi" not in first_turn  # turn 1 sees only its own reference
    score = mt_bench_score(grades)
    assert score.score == pytest.approx(7.5) and score.turn_scores == {1: 7.5, 2: 7.5}
    assert score.category_scores == {"math": 9.0, "writing": 6.0}


def test_mt_bench_ratings_that_do_not_parse_are_counted_and_left_out():
    replies = iter(["Rating: [[8]]", "Rating: 8", "Rating: [[12]]", "Rating: [[4]]"])
    chat = ScriptedChat(lambda messages: next(replies))
    prompts = [EvalPrompt(str(i), ("q1", "q2"), "writing") for i in range(2)]
    answers = {(str(i), t): "a" for i in range(2) for t in range(2)}
    score = mt_bench_score(MTBenchGrader(chat).grade(prompts, answers))
    assert (score.graded, score.unparseable) == (2, 2)
    assert score.score == pytest.approx(6.0) and score.turn_scores == {1: 8.0, 2: 4.0}


def test_the_exact_judge_needs_references_and_compares_final_answers():
    judge = ExactAnswerJudge()
    pairs = [
        PairToJudge("q", "The answer is 46.", "The answer is 13.", "46"),
        PairToJudge("q", "The answer is 1.", "The answer is 2.", "3"),
        PairToJudge("q", "The answer is 1 2 3.", "The answer is 1 2 3.", "1 2 3"),
    ]
    assert [j.outcome for j in judge.judge_pairs(pairs)] == ["win", "tie", "tie"]
    with pytest.raises(ValueError, match="reference"):
        judge.judge_pairs([PairToJudge("q", "a", "b")])


def test_cached_judgements_are_read_back_and_only_new_answers_are_judged(tmp_path):
    chat = ScriptedChat(
        lambda messages: "[[A>B]]" if "good" in messages[1]["content"].split("Assistant B")[0] else "[[B>A]]"
    )
    judge = LLMPairwiseJudge(chat)
    pairs = [PairToJudge(f"q{i}", f"good {i}", f"bad {i}") for i in range(4)]
    ids = [str(i) for i in range(4)]
    path = tmp_path / "judgements.jsonl"
    first = judge_pairs_cached(judge, ids[:2], pairs[:2], path, show_progress=False)
    assert len(chat.asked) == 4  # 2 pairs × 2 orders
    again = judge_pairs_cached(judge, ids, pairs, path, show_progress=False)
    assert len(chat.asked) == 8  # only the 2 new pairs were sent
    assert again[:2] == first and [j.outcome for j in again] == ["win"] * 4
    changed = [PairToJudge("q0", "good but regenerated", "bad 0")] + pairs[1:]
    judge_pairs_cached(judge, ids, changed, path, show_progress=False)
    assert len(chat.asked) == 10  # a new answer for prompt 0 is judged afresh


def test_cached_mt_bench_grades_are_reused(tmp_path):
    chat = ScriptedChat(lambda messages: "Rating: [[7]]")
    prompts = [EvalPrompt(str(i), ("q1", "q2"), "writing") for i in range(3)]
    answers = {(str(i), t): f"a{i}{t}" for i in range(3) for t in range(2)}
    path = tmp_path / "grades.jsonl"
    grades = grade_mt_bench_cached(MTBenchGrader(chat), prompts[:2], answers, path, show_progress=False)
    assert len(chat.asked) == 4 and len(grades) == 4
    grades = grade_mt_bench_cached(MTBenchGrader(chat), prompts, answers, path, show_progress=False)
    assert len(chat.asked) == 6 and [g.rating for g in grades] == [7.0] * 6
