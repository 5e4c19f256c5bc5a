"""Every boolean key of every stage's recipe, written `true` or `false` in a YAML or on the command line, is what runs.

The defect this guards: HfArgumentParser gives a boolean that defaults to True two actions (`--key` and `--no_key`)
with one `dest`; a YAML value set on only one of them was lost, so `key: false` ran True. The expected value here is
the text the test wrote, never the parser's output.
"""

import functools

import pytest
import yaml

from trl_dpr.running.cli import STAGES, _stage_parser
from trl_dpr.running.recipe_parser import RecipeParser


@functools.cache
def _description(stage: str) -> dict:
    return _stage_parser(stage).describe()


def _boolean_keys(stage: str) -> dict[str, object]:
    """Each boolean field of the stage (a plain `bool`, or a union with one) → its default; refused fields left out."""
    description = _description(stage)
    keys = {}
    for name, rule in description["rules"].items():
        spec = rule["type"]
        members = spec["any_of"] if isinstance(spec, dict) and "any_of" in spec else [spec]
        if "bool" in members and name not in description["unused"]:
            keys[name] = rule.get("default")
    return keys


# Every stage has boolean keys (`trl-dpr evaluate`: trust_remote_code); `trl-dpr evaluate` none that defaults to true.
# The test below fails when that changes, so that the walks are told.
WITH_BOOLEANS = tuple(STAGES)
DEFAULT_TRUE = tuple(stage for stage in STAGES if stage != "evaluate")


@pytest.mark.parametrize("stage", STAGES)
def test_the_walk_sees_each_stages_booleans_and_those_that_default_to_true(stage):
    keys = _boolean_keys(stage)
    assert bool(keys) == (stage in WITH_BOOLEANS), stage
    assert any(default is True for default in keys.values()) == (stage in DEFAULT_TRUE), stage


@pytest.mark.parametrize("written", [False, True])
@pytest.mark.parametrize("stage", WITH_BOOLEANS)
def test_every_boolean_written_in_a_yaml_reaches_the_values_parsed(stage, written, tmp_path):
    keys = _boolean_keys(stage)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(dict.fromkeys(keys, written)))
    values, _ = RecipeParser.from_description(_description(stage)).check_recipe(["--config", str(recipe)])
    wrong = {key: getattr(values, key) for key in keys if getattr(values, key) is not written}
    assert not wrong, f"{stage}: written {written}, parsed otherwise: {wrong}"


@pytest.mark.parametrize("written", ["false", "true"])
@pytest.mark.parametrize("stage", WITH_BOOLEANS)
def test_every_boolean_on_the_command_line_overrides_the_yaml(stage, written, tmp_path):
    keys = _boolean_keys(stage)
    opposite = written != "true"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(dict.fromkeys(keys, opposite)))
    flags = [item for key in keys for item in (f"--{key}", written)]
    values, _ = RecipeParser.from_description(_description(stage)).check_recipe(["--config", str(recipe), *flags])
    wrong = {key: getattr(values, key) for key in keys if getattr(values, key) is opposite}
    assert not wrong, f"{stage}: --key {written} on the command line, parsed otherwise: {wrong}"


@pytest.mark.parametrize("stage", DEFAULT_TRUE)
def test_a_yaml_false_for_a_key_that_defaults_to_true_reaches_the_run_config(stage, tmp_path):
    """Through the stage's own parser (TRL's dataclasses, as the launched run builds them), not only the namespace."""
    defaults_true = [key for key, default in _boolean_keys(stage).items() if default is True]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**dict.fromkeys(defaults_true, False), **_REQUIRED.get(stage, {})}))
    parsed = _stage_parser(stage).parse_args_and_config(["--config", str(recipe)])
    seen = {}
    for config in parsed:
        for key in defaults_true:
            if hasattr(config, key):
                seen.setdefault(key, getattr(config, key))
    assert set(seen) == set(defaults_true), f"{stage}: keys no config carries: {set(defaults_true) - set(seen)}"
    wrong = {key: value for key, value in seen.items() if value is not False}
    assert not wrong, f"{stage}: written false, the run's config has: {wrong}"


_REQUIRED = {stage: {"use_cpu": True} for stage in ("sft", "dpr", "spin", "gsil")}  # bf16 defaults on, and no GPU here
