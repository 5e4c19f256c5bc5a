"""What trl_dpr.embedded's internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.embedded.base_model:build_embedded_base": r"""
    >>> import contextlib, io, tempfile
    >>> with contextlib.redirect_stdout(io.StringIO()):  # accelerate's device notice
    ...     folder = build_embedded_base(tempfile.mkdtemp() + "/base")
    >>> sorted(p.name for p in Path(folder).iterdir())[:2]
    ['chat_template.jinja', 'config.json']
""",
    "trl_dpr.embedded.base_model:resolve_embedded_base": r"""
    >>> resolve_embedded_base("Qwen/Qwen2.5-0.5B", "runs/sft")
    'Qwen/Qwen2.5-0.5B'
""",
    "trl_dpr.embedded.pretraining:PretrainingSettings": r"""
    >>> PretrainingSettings(max_steps=10).max_steps, PretrainingSettings().num_documents
    (10, 150000)
""",
    "trl_dpr.embedded.pretraining:build_pretrained_base": r"""
    >>> import contextlib, io, tempfile
    >>> with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    ...     folder = build_pretrained_base(tempfile.mkdtemp() + "/base", PretrainingSettings(
    ...         num_documents=300, max_steps=2, batch_size=2, block_size=32, vocab_size=400))
    >>> json.loads((Path(folder) / "pretraining.json").read_text())["settings"]["max_steps"]
    2
""",
    "trl_dpr.embedded.pretraining:held_out_loss": r"""
    >>> round(held_out_loss(SHIPPED_BASE, num_documents=20), 2) < 1.0   # an untrained base: about 7
    True
""",
    "trl_dpr.embedded.pretraining:pretraining_corpus": r"""
    >>> documents = pretraining_corpus(200)
    >>> held_out = {row[0]["content"] for row in held_out_split()["prompt"]}
    >>> any(problem in document for document in documents for problem in held_out)
    False
    >>> sum(document.startswith("Q: ") for document in documents) > 0
    True
""",
    "trl_dpr.embedded.pretraining:shipped_base_problem": r"""
    >>> shipped_base_problem() is None
    True
""",
    "trl_dpr.embedded.task:DemoExample": r"""
    >>> DemoExample("add", "Mia has 2 apples. She gets 3 more. How many?", "2 + 3 = 5. The answer is 5.", "5").answer
    '5'
""",
    "trl_dpr.embedded.task:build_demo_dataset": r"""
    >>> splits = build_demo_dataset(num_train=10, num_test=5, seed=1)
    >>> splits["train"][0]["prompt"][0]["role"], splits["test"].num_rows
    ('user', 5)
""",
    "trl_dpr.embedded.task:demo_corpus": r"""
    >>> corpus = demo_corpus(size=5)
    >>> len(corpus), corpus[1].endswith(".")
    (10, True)
""",
    "trl_dpr.embedded.task:extract_answer": r"""
    >>> extract_answer("4 + 5 = 9. The answer is 9.")
    '9'
    >>> extract_answer("no final line") is None
    True
""",
    "trl_dpr.embedded.task:held_out_split": r"""
    >>> held_out_split(3)["answer"] == build_demo_dataset(num_test=5)["test"]["answer"][:3]
    True
""",
    "trl_dpr.embedded.task:is_correct": r"""
    >>> is_correct("The answer is 1 3 7.", "1 3 7"), is_correct("The answer is 12.", "13")
    (True, False)
""",
    "trl_dpr.embedded.task:make_example": r"""
    >>> ex = make_example("add", random.Random(0))
    >>> ex.response.endswith(f"The answer is {ex.answer}.")
    True
""",
    "trl_dpr.embedded.tiny_lm:build_tiny_causal_lm": r"""
    >>> tok = build_tokenizer(["abc"])
    >>> model = build_tiny_causal_lm(tok, "qwen2", seed=1)
    >>> model.config.vocab_size == len(tok)
    True
""",
    "trl_dpr.embedded.tiny_lm:build_tokenizer": r"""
    >>> tok = build_tokenizer(["What is 12+7? 12+7=19"])
    >>> tok.decode(tok("12+7=19")["input_ids"])
    '12+7=19'
    >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    '<|user|>hi<|end|><|assistant|>'
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
