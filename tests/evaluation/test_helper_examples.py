"""What trl_dpr.evaluation's internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.evaluation.sampling:Sample": r"""
    >>> Sample(prompt_index=0, prompt="2+3=", prompt_ids=[5, 6], completion_ids=[7, 1], text="5").length
    2
""",
    "trl_dpr.evaluation.sampling:generate_answers": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> answers = generate_answers(build_tiny_causal_lm(tok), tok, ["hello"], max_new_tokens=3, show_progress=False)
    >>> len(answers)
    1
""",
    "trl_dpr.evaluation.sampling:policy_logprobs": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> logps = policy_logprobs(build_tiny_causal_lm(tok), tok, [Sample(0, "hi", [5, 6], [7, 8], ".."), Sample(1, "yo", [5], [7], ".")])
    >>> logps.shape, float(logps[1, 1])
    (torch.Size([2, 2]), 0.0)
""",
    "trl_dpr.evaluation.sampling:sample_completions": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> samples = sample_completions(build_tiny_causal_lm(tok), tok, ["hello", "hello"], max_new_tokens=3)
    >>> len(samples), 1 <= samples[0].length <= 3
    (2, True)
""",
    "trl_dpr.evaluation.sampling:score_samples": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1), processing_class=tok)
    >>> scored, mask = score_samples(rm, [Sample(0, "hi", [5, 6], [7, 8], "..")])
    >>> scored.rewards.shape, mask.tolist()
    (torch.Size([1, 2]), [[1, 1]])
""",
    "trl_dpr.evaluation.answers:AnswerGenerator": r"""
    >>> class Echo:
    ...     settings = {"model_path": "echo"}
    ...     def generate(self, conversations):
    ...         return [c[-1]["content"] for c in conversations]
    >>> Echo().generate([[{"role": "user", "content": "hi"}]])
    ['hi']
""",
    "trl_dpr.evaluation.answers:TransformersAnswerGenerator": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
    >>> tok = build_tokenizer(["hello"])
    >>> generator = TransformersAnswerGenerator(build_tiny_causal_lm(tok), tok, max_new_tokens=3, model_path="tiny")
    >>> len(generator.generate([[{"role": "user", "content": "hello"}]]))
    1
""",
    "trl_dpr.evaluation.answers:answer_cache": r"""
    >>> import tempfile, os
    >>> class Echo:
    ...     settings = {"model_path": "echo"}
    >>> cache = answer_cache(os.path.join(tempfile.mkdtemp(), "echo.jsonl"), Echo())
    >>> cache.key_fields, len(cache)
    (('model', 'prompt_id', 'turn'), 0)
""",
    "trl_dpr.evaluation.answers:answer_prompts": r"""
    >>> import tempfile, os
    >>> class Shout:
    ...     settings = {"model_path": "shout"}
    ...     def generate(self, conversations):
    ...         return [c[-1]["content"].upper() for c in conversations]
    >>> cache = answer_cache(os.path.join(tempfile.mkdtemp(), "a.jsonl"), Shout())
    >>> answer_prompts(Shout(), "shout", [EvalPrompt("1", ("hi", "bye"))], cache, show_progress=False)
    {('1', 0): 'HI', ('1', 1): 'BYE'}
""",
    "trl_dpr.evaluation.answers:is_vllm_available": r"""
    >>> isinstance(is_vllm_available(), bool)
    True
""",
    "trl_dpr.evaluation.answers:resolve_device": r"""
    >>> resolve_device("cpu")
    'cpu'
""",
    "trl_dpr.evaluation.cache:JsonlCache": r"""
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "answers.jsonl")
    >>> cache = JsonlCache(path, ("prompt_id", "turn"), settings={"temperature": 0.7})
    >>> cache.add({"prompt_id": "1", "turn": 0, "answer": "Hi"})
    >>> ("1", 0) in JsonlCache(path, ("prompt_id", "turn"), settings={"temperature": 0.7})
    True
""",
    "trl_dpr.evaluation.chat_models:ChatModel": r"""
    >>> class Echo:
    ...     name = "echo"
    ...     def complete_batch(self, conversations):
    ...         return [c[-1]["content"] for c in conversations]
    >>> isinstance(Echo(), ChatModel), Echo().complete_batch([[{"role": "user", "content": "hi"}]])
    (True, ['hi'])
""",
    "trl_dpr.evaluation.chat_models:LocalChatModel": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
    >>> tok = build_tokenizer(["judge this"])
    >>> judge = LocalChatModel(build_tiny_causal_lm(tok), tok, max_new_tokens=4, name="tiny")
    >>> len(judge.complete_batch([[{"role": "user", "content": "Which is better?"}]]))
    1
""",
    "trl_dpr.evaluation.chat_models:OpenAIChatModel": r"""
    >>> import os
    >>> os.environ["DEMO_JUDGE_KEY"] = "sk-demo"
    >>> judge = OpenAIChatModel(model="gpt-4o", api_key_env="DEMO_JUDGE_KEY")
    >>> judge.name, "sk-demo" in repr(judge)
    ('openai:gpt-4o', False)
    >>> OpenAIChatModel(api_key_env="SURELY_UNSET_KEY_VAR")
    Traceback (most recent call last):
    ...
    trl_dpr.evaluation.chat_models.MissingAPIKeyError: The judge's API key is read from the environment variable SURELY_UNSET_KEY_VAR, which is not set. ...
""",
    "trl_dpr.evaluation.config:check_config_has_no_secrets": r"""
    >>> check_config_has_no_secrets({"env": {"OPENAI_API_KEY": "sk-..."}}, "eval.yaml")
    Traceback (most recent call last):
    ...
    ValueError: eval.yaml sets OPENAI_API_KEY ...
""",
    "trl_dpr.evaluation.mt_bench:MTBenchGrade": r"""
    >>> MTBenchGrade("81", 0, "writing", 8.0).as_dict()["rating"]
    8.0
""",
    "trl_dpr.evaluation.mt_bench:MTBenchGrader": r"""
    >>> class Grader:
    ...     name = "fixed"
    ...     def complete_batch(self, conversations):
    ...         return ["Helpful and correct. Rating: [[8]]" for _ in conversations]
    >>> prompt = EvalPrompt("111", ("Area of a 2x3 rectangle?", "And its perimeter?"), "math", ("6", "10"))
    >>> grades = MTBenchGrader(Grader()).grade([prompt], {("111", 0): "6", ("111", 1): "10"})
    >>> [(g.turn, g.rating, g.used_reference) for g in grades]
    [(0, 8.0, True), (1, 8.0, True)]
""",
    "trl_dpr.evaluation.mt_bench:MTBenchScore": r"""
    >>> mt_bench_score([MTBenchGrade("81", 0, "writing", 8.0), MTBenchGrade("81", 1, "writing", 6.0)]).turn_scores
    {1: 8.0, 2: 6.0}
""",
    "trl_dpr.evaluation.judges:PairJudgement": r"""
    >>> PairJudgement("tie", verdicts=("A>B", "A>B")).as_dict()["verdicts"]
    ('A>B', 'A>B')
""",
    "trl_dpr.evaluation.judges:PairToJudge": r"""
    >>> ExactAnswerJudge().judge_pairs([PairToJudge("2+2?", "The answer is 4.", "The answer is 5.", "4")])[0].outcome
    'win'
""",
    "trl_dpr.evaluation.judges:PairwiseJudge": r"""
    >>> class LongerWins(PairwiseJudge):
    ...     name = "longer-wins"
    ...     def judge_pairs(self, pairs):
    ...         return [PairJudgement("win" if len(p.candidate) > len(p.baseline) else "loss") for p in pairs]
    >>> LongerWins().judge_pairs([PairToJudge("q", "a long answer", "short")])[0].outcome
    'win'
""",
    "trl_dpr.evaluation.verdicts:ParsedRating": r"""
    >>> parse_rating("Rating: [[7]]").ok, parse_rating("Rating: 7").ok
    (True, False)
""",
    "trl_dpr.evaluation.verdicts:ParsedVerdict": r"""
    >>> parse_verdict("[[B>A]]").label, parse_verdict("B>A").ok
    ('B>A', False)
""",
    "trl_dpr.evaluation.verdicts:candidate_outcome": r"""
    >>> candidate_outcome("A>>B", "A"), candidate_outcome("A>B", "B"), candidate_outcome("A=B", "B")
    ('win', 'loss', 'tie')
""",
    "trl_dpr.evaluation.verdicts:combine_orders": r"""
    >>> combine_orders("win", "win"), combine_orders("win", "tie"), combine_orders("win", "tie", rule="lenient")
    ('win', 'tie', 'win')
    >>> combine_orders("win", None) is None
    True
""",
    "trl_dpr.evaluation.mt_bench:grade_mt_bench_cached": r"""
    >>> import tempfile, os
    >>> class Grader:
    ...     name = "fixed"
    ...     def complete_batch(self, conversations):
    ...         return ["Rating: [[9]]" for _ in conversations]
    >>> prompt = EvalPrompt("1", ("Say hi.",), "writing")
    >>> path = os.path.join(tempfile.mkdtemp(), "grades.jsonl")
    >>> [g.rating for g in grade_mt_bench_cached(MTBenchGrader(Grader()), [prompt], {("1", 0): "hi"}, path, show_progress=False)]
    [9.0]
""",
    "trl_dpr.evaluation.judges:judge_pairs_cached": r"""
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "judgements.jsonl")
    >>> pair = PairToJudge("2+2?", "The answer is 4.", "The answer is 5.", reference="4")
    >>> judge_pairs_cached(ExactAnswerJudge(), ["0"], [pair], path, show_progress=False)[0].outcome
    'win'
""",
    "trl_dpr.evaluation.mt_bench:mt_bench_score": r"""
    >>> grades = [MTBenchGrade("1", 0, "writing", 8.0), MTBenchGrade("1", 1, "writing", 6.0),
    ...           MTBenchGrade("2", 0, "math", None, "no rating in [[n]] format")]
    >>> result = mt_bench_score(grades)
    >>> result.score, result.turn_scores, result.unparseable
    (7.0, {1: 8.0, 2: 6.0}, 1)
""",
    "trl_dpr.evaluation.verdicts:pairwise_messages": r"""
    >>> messages = pairwise_messages("Name a prime.", "7", "8")
    >>> [m["role"] for m in messages], "[[A>B]]" in messages[0]["content"]
    (['system', 'user'], True)
""",
    "trl_dpr.evaluation.verdicts:parse_rating": r"""
    >>> parse_rating("The answer is accurate and well organised. Rating: [[8]]").value
    8.0
    >>> parse_rating("Rating: [[11]]").problem
    'rating 11.0 outside [1, 10]'
    >>> parse_rating("Rating: 7").problem
    'no rating in [[n]] format'
""",
    "trl_dpr.evaluation.verdicts:parse_verdict": r"""
    >>> parse_verdict("Both are correct, but A explains the steps. My final verdict is: [[A>B]]").label
    'A>B'
    >>> parse_verdict("A is better [[A>B]").problem
    "no well-formed verdict; found malformed '[[A>B]'"
    >>> parse_verdict("[[A>B]] ... on reflection [[B>A]]").problem
    "conflicting verdicts: ['A>B', 'B>A']"
""",
    "trl_dpr.evaluation.verdicts:single_grade_messages": r"""
    >>> messages = single_grade_messages(["What is 2+2?"], ["4"], references=["4"])
    >>> "reference answer" in messages[1]["content"], "Rating: [[5]]" in messages[1]["content"]
    (True, True)
""",
    "trl_dpr.evaluation.cache:text_digest": r"""
    >>> text_digest("a", "b") == text_digest("a", "b") != text_digest("ab", "")
    True
""",
    "trl_dpr.evaluation.prompt_sets:EvalPrompt": r"""
    >>> prompt = EvalPrompt("81", ("Write a haiku.", "Now in French."), category="writing")
    >>> prompt.conversation(["Leaves fall..."])[-1]
    {'role': 'user', 'content': 'Now in French.'}
""",
    "trl_dpr.evaluation.prompt_sets:PromptSetSource": r"""
    >>> PROMPT_SETS["mt_bench"].expected_rows, PROMPT_SETS["demo"].display_name
    (80, 'Embedded task')
""",
    "trl_dpr.evaluation.prompt_sets:load_demo_prompts": r"""
    >>> prompts = load_demo_prompts(3)
    >>> len(prompts), prompts[0].category, prompts[0].references[0].isdigit()
    (3, 'add', True)
""",
    "trl_dpr.evaluation.prompt_sets:load_prompt_set": r"""
    >>> [p.prompt_id for p in load_prompt_set("demo", num_prompts=5, limit=2)]
    ['0', '1']
""",
    "trl_dpr.evaluation.prompt_sets:read_json_rows": r"""
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> _ = open(path, "w").write('{"instruction": "Hi"}\n\n{"instruction": "Bye"}\n')
    >>> [row["instruction"] for row in read_json_rows(path)]
    ['Hi', 'Bye']
""",
    "trl_dpr.evaluation.results:AccuracyResult": r"""
    >>> AccuracyResult("demo", "SFT", 0.5, 0.3, 0.7, 10, 20, {"add": 0.5}).as_dict()["accuracy"]
    0.5
""",
    "trl_dpr.evaluation.results:EvaluationReport": r"""
    >>> report = EvaluationReport("SFT", ["DPR"], ["demo"], accuracy=[AccuracyResult("demo", "DPR", 0.6, 0.5, 0.7, 6, 10)])
    >>> report.accuracy_result("demo", "DPR").accuracy
    0.6
""",
    "trl_dpr.evaluation.results:LengthStats": r"""
    >>> length_stats(["a b", "c"]).mean_words
    1.5
""",
    "trl_dpr.evaluation.results:MTBenchResult": r"""
    >>> score = MTBenchScore(7.0, {1: 7.0}, {"writing": 7.0}, graded=1, unparseable=0)
    >>> MTBenchResult("DPR", "mt-bench:gpt-4o", score, length_stats(["an answer"])).as_dict()["score"]
    7.0
""",
    "trl_dpr.evaluation.results:PairwiseResult": r"""
    >>> result = PairwiseResult("demo", "DPR", "SFT", "exact-answer", win_rate(["win", "loss"]), 2, 0, None,
    ...                         length_stats(["a"]), length_stats(["b"]))
    >>> result.as_dict()["win_rate"]["win_rate"]
    0.5
""",
    "trl_dpr.evaluation.results:WinRate": r"""
    >>> rate = win_rate(["win", "tie", "tie", "loss"])
    >>> rate.value, rate.n
    (0.5, 4)
""",
    "trl_dpr.evaluation.results:bootstrap_mean_ci": r"""
    >>> low, high = bootstrap_mean_ci(torch.tensor([[0.0, 1.0] * 50]))
    >>> bool(low[0] < 0.5 < high[0])
    True
""",
    "trl_dpr.evaluation.results:exact_accuracy": r"""
    >>> result = exact_accuracy("demo", "SFT", [True, False, True, True], ["0", "0", "1", "1"], ["add", "add", "sort", "sort"])
    >>> result.accuracy, result.by_category
    (0.75, {'add': 0.5, 'sort': 1.0})
""",
    "trl_dpr.evaluation.results:length_stats": r"""
    >>> stats = length_stats(["one two three", "four", "five six"])
    >>> stats.mean_words, stats.median_words
    (2.0, 2)
""",
    "trl_dpr.evaluation.results:results_markdown": r"""
    >>> print(results_markdown(EvaluationReport("SFT", ["DPR"], ["alpaca_eval"])).splitlines()[0])
    | Method | AlpacaEval win rate vs SFT % (95% CI) |
""",
    "trl_dpr.evaluation.results:summarize_pairwise": r"""
    >>> rate, unparseable, disagreements = summarize_pairwise(
    ...     [PairJudgement("win"), PairJudgement("tie", verdicts=("A>B", "A>B")), PairJudgement(None)])
    >>> rate.value, unparseable, disagreements
    (0.75, 1, 1)
""",
    "trl_dpr.evaluation.results:unit_means": r"""
    >>> unit_means([1.0, 0.0, 1.0], ["p0", "p0", "p1"]).tolist()
    [0.5, 1.0]
""",
    "trl_dpr.evaluation.results:win_rate": r"""
    >>> result = win_rate(["win", "win", "tie", "loss"])
    >>> result.value  # (2 + 0.5) / 4
    0.625
""",
    "trl_dpr.evaluation.runner:chat_model_from_config": r"""
    >>> chat_model_from_config(EvaluationConfig(benchmarks=["demo"], judge="exact")) is None
    True
""",
    "trl_dpr.evaluation.runner:judge_from_config": r"""
    >>> judge_from_config(EvaluationConfig(benchmarks=["demo"], judge="exact")).name
    'exact-answer'
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
