"""What trl_dpr.lfd's internal helpers do, shown on small inputs: each case is `module:qualname` and its doctest
session, run in the helper's module namespace (tests/helper_examples.py)."""

import pytest

from ..helper_examples import run_helper_example

CASES = {
    "trl_dpr.lfd.config:SelfPlayConfig": r"""
    >>> from trl_dpr.lfd import GSILConfig, SelfPlayConfig
    >>> args = GSILConfig(output_dir="runs/gsil", use_cpu=True, bf16=False, num_iterations=2)
    >>> isinstance(args, SelfPlayConfig), args.num_iterations, args.generation_temperature
    (True, 2, 0.0)
""",
    "trl_dpr.lfd.self_play:SelfPlayRun": r"""
    >>> SelfPlayRun("runs/demo/spin", "SPIN", [{"iteration": 0, "train_runtime_s": 40.1}]).iterations[0]["iteration"]
    0
""",
    "trl_dpr.lfd.self_play:SelfPlayScriptArguments": r"""
    >>> SelfPlayScriptArguments(dataset_name="trl_dpr/embedded-demo").evaluation_config is None
    True
""",
    "trl_dpr.lfd.self_play:answer_prompts": r"""
    >>> import tempfile, os
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer, build_tiny_causal_lm
    >>> tok = build_tokenizer(["hello there"])
    >>> path = os.path.join(tempfile.mkdtemp(), "answers.jsonl")
    >>> answers = answer_prompts(build_tiny_causal_lm(tok), tok, ["hello", "there"], path, temperature=1.0,
    ...                          max_new_tokens=3, batch_size=2, seed=0, show_progress=False)
    >>> [a["prompt_index"] for a in answers], len(open(path).readlines())
    ([0, 1], 2)
""",
    "trl_dpr.lfd.self_play:demonstration_ids": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> from trl_dpr.token_batches import render_prompts
    >>> tok = build_tokenizer(["hi yo"])
    >>> prompt = [{"role": "user", "content": "hi"}]
    >>> ids = demonstration_ids(tok, prompt, [{"role": "assistant", "content": "yo"}], render_prompts(tok, [prompt])[0])
    >>> tok.decode(ids)
    'yo<|end|>'
""",
    "trl_dpr.lfd.self_play:demonstration_pairs": r"""
    >>> from trl_dpr.embedded.tiny_lm import build_tokenizer
    >>> from trl_dpr.token_batches import render_prompts
    >>> tok = build_tokenizer(["hi yo no"])
    >>> prompt = [{"role": "user", "content": "hi"}]
    >>> answer = {"prompt_index": 0, "prompt_ids": render_prompts(tok, [prompt])[0], "completion_ids": [tok.eos_token_id]}
    >>> pairs = demonstration_pairs(tok, [prompt], [[{"role": "assistant", "content": "yo"}]], [answer])
    >>> tok.decode(pairs[0]["chosen_ids"]), pairs[0]["rejected_ids"] == [tok.eos_token_id]
    ('yo<|end|>', True)
""",
    "trl_dpr.lfd.self_play:prompts_and_demonstrations": r"""
    >>> ds = Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}])
    >>> prompts_and_demonstrations(ds, "toy")[1]
    [[{'role': 'assistant', 'content': 'yo'}]]
""",
    "trl_dpr.lfd.self_play:recipe_parser": r"""
    >>> argv = ["--output_dir", "runs/spin", "--use_cpu", "true", "--bf16", "false", "--num_iterations", "2"]
    >>> recipe_parser(SPINConfig).parse_args_and_config(argv)[1].num_iterations
    2
""",
    "trl_dpr.lfd.self_play:trainer_class": r"""
    >>> trainer_class(GSILConfig(output_dir="runs/g", use_cpu=True, bf16=False)).__name__
    'GSILTrainer'
""",
}


@pytest.mark.parametrize("where", CASES)
def test_helper_example(where, monkeypatch):
    run_helper_example(CASES, where, monkeypatch)
