"""A float written in YAML 1.2's forms (`1e-6`, `1E5`, `1.0e5`, `+1e+5`) is that float wherever a recipe holds
it: a top-level key, a value inside a mapping (block or flow), an item of a list, a `--key k=v` or `--key {k: v}` mapping
on the command line, the evaluation YAML.

The defect this guards: PyYAML reads YAML 1.1, where those forms are text. argparse converted a top-level key; nothing
converted one at depth, so `lr_scheduler_kwargs: {min_lr: 1e-6}` and `--dense_reward_kwargs clip=1e-1` reached the run
as strings and failed mid-run with a traceback. The expected value is Python's `float()` of the text the test wrote.
"""

import functools

import pytest

from trl_dpr.running.cli import _stage_parser
from trl_dpr.running.recipe_parser import RecipeParser, load_evaluation_config

# YAML 1.1 (PyYAML) reads the first four as text; 2.5E-3 (a dot and a signed exponent) is a float in both versions.
FORMS = ["1e-6", "1E5", "1.0e5", "+1e+5", "2.5E-3"]


@functools.cache
def _parser(stage: str):
    return _stage_parser(stage)


def _parse(stage: str, recipe_text: str, tmp_path, *flags: str) -> dict:
    """Every field the stage's own parser (TRL's dataclasses, as the launched run builds them) gives, by name."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("use_cpu: true\n" * (stage != "preview") + recipe_text)
    parser = _stage_parser(stage)  # a fresh one: a parsed YAML's values become the parser's defaults
    fields = {}
    for config in parser.parse_args_and_config(["--config", str(recipe), *flags]):
        fields.update({key: value for key, value in vars(config).items() if key not in fields})
    return fields


@pytest.mark.parametrize("form", FORMS)
def test_a_float_in_a_block_mapping_of_the_recipe_is_the_float_written(form, tmp_path):
    fields = _parse(
        "sft", f"lr_scheduler_type: cosine_with_min_lr\nlr_scheduler_kwargs:\n  min_lr: {form}\n", tmp_path
    )
    assert fields["lr_scheduler_kwargs"] == {"min_lr": float(form)}
    assert type(fields["lr_scheduler_kwargs"]["min_lr"]) is float


@pytest.mark.parametrize("form", FORMS)
def test_a_float_in_a_flow_mapping_of_the_recipe_is_the_float_written(form, tmp_path):
    fields = _parse("dpr", f"generation_kwargs: {{repetition_penalty: {form}, top_k: 5}}\n", tmp_path)
    assert fields["generation_kwargs"] == {"repetition_penalty": float(form), "top_k": 5}
    assert type(fields["generation_kwargs"]["repetition_penalty"]) is float


@pytest.mark.parametrize("form", FORMS)
def test_a_float_in_a_list_of_the_recipe_is_the_float_written(form, tmp_path):
    fields = _parse("preview", f"kl_coefs: [{form}, 1]\n", tmp_path)
    assert fields["kl_coefs"] == [float(form), 1.0]


@pytest.mark.parametrize("form", FORMS)
def test_a_float_at_the_top_of_the_recipe_is_the_float_written(form, tmp_path):
    assert _parse("sft", f"learning_rate: {form}\n", tmp_path)["learning_rate"] == float(form)


CLIPPED = """
class Clipped:
    model_names = ("sft", "ref")

    def __init__(self, clip=2.0):
        self.clip = clip

    def __call__(self, scored):
        return (scored.logps["sft"] - scored.logps["ref"]).clamp(-self.clip, self.clip)
"""


@pytest.mark.parametrize("written", ["clip={}", "{{clip: {}}}"])
@pytest.mark.parametrize("form", FORMS)
def test_a_float_in_a_command_line_mapping_is_the_float_the_reward_gets(form, written, tmp_path, monkeypatch):
    """The README's `--dense_reward_kwargs clip=...`: the user's reward class is built with the float."""
    (tmp_path / "clipped_reward_for_floats.py").write_text(CLIPPED)
    monkeypatch.syspath_prepend(str(tmp_path))
    flags = ["--dense_reward", "clipped_reward_for_floats:Clipped", "--dense_reward_kwargs", written.format(form)]
    fields = _parse("dpr", "", tmp_path, *flags)
    assert fields["dense_reward_kwargs"] == {"clip": float(form)}
    # the checks run before anything loads (`trl-dpr dpr` in its first second) read it the same way
    values, _ = RecipeParser.from_description(_parser("dpr").describe()).check_recipe(
        ["--config", str(tmp_path / "recipe.yaml"), *flags]
    )
    assert values.dense_reward_kwargs == {"clip": float(form)}


@pytest.mark.parametrize("form", FORMS)
def test_a_float_in_the_evaluation_yaml_is_the_float_written(form, tmp_path):
    recipe = tmp_path / "evaluate.yaml"
    recipe.write_text(f"baseline: A=a\ncandidates: [B=b]\nconfidence: {form}\njudge_timeout_s: {form}\n")
    config = load_evaluation_config(str(recipe))
    assert (config.confidence, config.judge_timeout_s) == (float(form), float(form))


def test_quoted_forms_stay_text_and_yaml_1_1_values_keep_their_meaning(tmp_path):
    fields = _parse("dpr", "generation_kwargs: {a: '1e-6', b: 10, c: true, d: 1.5, e: 0x10, f: v1.2}\n", tmp_path)
    assert fields["generation_kwargs"] == {"a": "1e-6", "b": 10, "c": True, "d": 1.5, "e": 16, "f": "v1.2"}
    assert type(fields["generation_kwargs"]["b"]) is int
