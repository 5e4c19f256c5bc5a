"""Judge outputs are parsed strictly, the two orders of a pair combine by the documented rule, ties count 0.5."""

import pytest

from trl_dpr.evaluation import PairJudgement, combine_orders, parse_rating, parse_verdict, summarize_pairwise, win_rate
from trl_dpr.evaluation.judges import candidate_outcome

GPT4O_STYLE = """Assistant A correctly computes the regular pay (4 × 7 = 28) and the overtime pay (2 × 9 = 18), and adds
them to 46. Assistant B adds the hours instead of the pay and ends with 13, which is wrong. Both are concise, but only
Assistant A answers the question correctly.

My final verdict is: [[A>B]]"""

ARENA_HARD_STYLE = """My own answer: the function should handle the empty list before indexing.

Assistant A forgets the empty case and would raise IndexError. Assistant B checks it, explains the complexity and
gives a test. Assistant B is significantly better.

My final verdict is Assistant B is significantly better: [[B>>A]]"""


@pytest.mark.parametrize(
    "text,label",
    [
        (GPT4O_STYLE, "A>B"),
        (ARENA_HARD_STYLE, "B>>A"),
        ("Both answers are equally correct and equally clear.\n\n[[A=B]]", "A=B"),
        ("Assistant B is slightly better. [[B>A]]", "B>A"),
        ("A is much better: [[A>>B]]", "A>>B"),
        ("Verdict: [[A>B]]. To restate my final verdict: [[A>B]]", "A>B"),  # repeating the same verdict is fine
    ],
)
def test_a_well_formed_verdict_after_an_explanation_parses(text, label):
    parsed = parse_verdict(text)
    assert parsed.ok and parsed.label == label and parsed.problem is None


@pytest.mark.parametrize(
    "text,problem",
    [
        ("Assistant A is better overall. A>B", "no verdict"),
        ("Both are fine, I cannot decide.", "no verdict"),
        ("Assistant A is better. [[A>B]", "malformed '[[A>B]'"),
        ("Assistant A is better. [A>B]]", "malformed"),
        ("Final verdict: [[ A > B ]]", "malformed"),
        (
            "At first [[A>B]], but on reflection B handles the edge case: [[B>A]]",
            "conflicting verdicts: ['A>B', 'B>A']",
        ),
        ("Output format: [[A>B]], [[A=B]] or [[B>A]].", "conflicting"),  # a judge echoing the instructions
        ("[[C]]", "no verdict"),  # MT-Bench's pairwise letters are not this format
        ("", "no verdict"),
    ],
)
def test_missing_malformed_or_conflicting_verdicts_are_unparseable(text, problem):
    parsed = parse_verdict(text)
    assert not parsed.ok and parsed.label is None
    assert problem in parsed.problem


@pytest.mark.parametrize(
    "text,value",
    [
        ("The response is accurate, relevant and detailed, though the second half is verbose.\n\nRating: [[7]]", 7.0),
        ("Rating: [[10]]", 10.0),
        ("Rating: [[1]]", 1.0),
        ("A solid answer. Rating: [[6.5]]", 6.5),
        ("Rating: [[8]]\nAgain, my rating: [[8]]", 8.0),
    ],
)
def test_a_rating_in_double_brackets_parses(text, value):
    assert parse_rating(text).value == value


@pytest.mark.parametrize(
    "text,problem",
    [
        ("Rating: 7", "no rating"),
        ("Rating: [7]", "no rating"),
        ("Rating: [[rating]]", "no rating"),
        ("Rating: [[11]]", "outside [1, 10]"),
        ("Rating: [[0]]", "outside [1, 10]"),
        ("Rating: [[-3]]", "outside [1, 10]"),
        ("Rating: [[7]] ... actually [[4]]", "conflicting ratings"),
    ],
)
def test_missing_out_of_range_or_conflicting_ratings_are_unparseable(text, problem):
    parsed = parse_rating(text)
    assert parsed.value is None and problem in parsed.problem


@pytest.mark.parametrize(
    "label,as_a,as_b",
    [
        ("A>>B", "win", "loss"),
        ("A>B", "win", "loss"),
        ("A=B", "tie", "tie"),
        ("B>A", "loss", "win"),
        ("B>>A", "loss", "win"),
    ],
)
def test_a_verdict_reads_as_the_candidates_outcome_from_its_position(label, as_a, as_b):
    assert candidate_outcome(label, "A") == as_a and candidate_outcome(label, "B") == as_b


CONSISTENT = {
    ("win", "win"): "win",
    ("win", "tie"): "tie",
    ("win", "loss"): "tie",
    ("tie", "win"): "tie",
    ("tie", "tie"): "tie",
    ("tie", "loss"): "tie",
    ("loss", "win"): "tie",
    ("loss", "tie"): "tie",
    ("loss", "loss"): "loss",
}
LENIENT = {
    ("win", "win"): "win",
    ("win", "tie"): "win",
    ("win", "loss"): "tie",
    ("tie", "win"): "win",
    ("tie", "tie"): "tie",
    ("tie", "loss"): "loss",
    ("loss", "win"): "tie",
    ("loss", "tie"): "loss",
    ("loss", "loss"): "loss",
}


@pytest.mark.parametrize("orders", sorted(CONSISTENT))
def test_consistent_rule_counts_agreeing_orders_and_makes_disagreement_a_tie(orders):
    assert combine_orders(*orders) == CONSISTENT[orders]
    assert combine_orders(*orders, rule="consistent") == CONSISTENT[orders]


@pytest.mark.parametrize("orders", sorted(LENIENT))
def test_lenient_rule_adds_the_two_orders_scores(orders):
    assert combine_orders(*orders, rule="lenient") == LENIENT[orders]


@pytest.mark.parametrize("rule", ["consistent", "lenient"])
def test_both_rules_are_symmetric_in_the_two_orders(rule):
    for first, second in CONSISTENT:
        assert combine_orders(first, second, rule) == combine_orders(second, first, rule)


@pytest.mark.parametrize("orders", [(None, "win"), ("tie", None), (None, None)])
def test_a_pair_with_an_unparseable_order_is_unparseable(orders):
    assert combine_orders(*orders) is None and combine_orders(*orders, rule="lenient") is None


def test_win_rate_counts_ties_as_half_and_brackets_the_value():
    result = win_rate(["win"] * 6 + ["tie"] * 3 + ["loss"] * 1, num_resamples=500)
    assert result.value == pytest.approx((6 + 0.5 * 3) / 10)
    assert (result.wins, result.ties, result.losses, result.n) == (6, 3, 1, 10)
    assert result.ci_low <= result.value <= result.ci_high
    assert 0.0 <= result.ci_low < result.ci_high <= 1.0
    assert win_rate(["tie"] * 4).value == 0.5 and win_rate(["tie"] * 4).ci_low == 0.5


def test_summary_leaves_unparseable_pairs_out_and_counts_them_and_order_disagreements():
    judgements = [
        PairJudgement("win", verdicts=("A>B", "B>A")),  # consistent win
        PairJudgement("tie", verdicts=("A>B", "A>B")),  # position bias: disagreement
        PairJudgement("loss", verdicts=("B>>A", "A>B")),
        PairJudgement(None, verdicts=(None, "B>A"), problem="candidate as A: no verdict"),
        PairJudgement(None, verdicts=(None, None)),
    ]
    rate, unparseable, disagreements = summarize_pairwise(judgements, num_resamples=200)
    assert unparseable == 2 and disagreements == 1
    assert (rate.wins, rate.ties, rate.losses) == (1, 1, 1) and rate.value == pytest.approx(0.5)
    assert summarize_pairwise([PairJudgement(None)])[0] is None  # nothing parsed: no win rate, not a crash
