"""No key in a recipe, and no judge key sent where a shared file says (issue 42, finding 4): a training recipe with a
pasted key is refused by `trl-dpr sft`'s checks before anything is launched, and by the parser the stage itself runs;
an evaluation YAML may send the judge's key only to its provider's host, unless the user names another host on the
command line."""

import pytest
import yaml

from trl_dpr.evaluation.config import check_config_has_no_secrets
from trl_dpr.running.cli import _check_before_importing

HF_KEY = "hf_" + "FakeHubTokenNotInTheEnvironmentXyZ"
RECIPE = {
    "model_name_or_path": "trl_dpr/embedded-tiny-llama",
    "dataset_name": "trl_dpr/embedded-demo",
    "output_dir": "runs/x",
    "max_steps": 1,
}


def recipe(tmp_path, **extra) -> str:
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({**RECIPE, **extra}))
    return str(path)


@pytest.mark.parametrize(
    "extra, where, what",
    [
        ({"hub_token": HF_KEY}, "hub_token", "a Hugging Face token (hf_...)"),
        ({"hub_token": "my-private-token-value"}, "hub_token", "a credential field"),
        ({"model_init_kwargs": {"token": HF_KEY}}, "model_init_kwargs.token", "a Hugging Face token (hf_...)"),
        ({"run_name": f"try {HF_KEY}"}, "run_name", "a Hugging Face token (hf_...)"),
    ],
)
def test_a_key_pasted_into_a_training_recipe_is_refused_before_anything_is_launched(tmp_path, extra, where, what):
    path = recipe(tmp_path, **extra)
    with pytest.raises(ValueError) as refused:
        _check_before_importing("sft", ["--config", path])
    message = str(refused.value)
    assert message.startswith(f"{path}: `{where}` holds what looks like a key ({what}).") and "\n" not in message
    assert HF_KEY not in message


def test_the_stage_itself_refuses_it_too(tmp_path):
    from trl_dpr.scripts.sft import make_parser

    with pytest.raises(ValueError, match="`hub_token` holds what looks like a key"):
        make_parser().parse_args_and_config(["--config", recipe(tmp_path, hub_token=HF_KEY)])


def test_a_recipe_without_a_key_passes(tmp_path):
    values, _ = _check_before_importing("sft", ["--config", recipe(tmp_path, hub_token=None, pad_token="<|pad|>")])
    assert values.max_steps == 1


JUDGE = {"benchmarks": ["alpaca_eval"], "judge": "openai", "judge_model": "gpt-4o"}


@pytest.mark.parametrize(
    "config, allowed",
    [
        ({}, True),  # the default: api.openai.com
        ({"judge_base_url": "https://api.openai.com/v1"}, True),
        ({"judge_base_url": "http://127.0.0.1:8000/v1"}, True),  # a server on this machine
        ({"judge_base_url": "https://collect.example.com/v1"}, False),
        ({"judge_base_url": "https://collect.example.com/v1", "judge_api_key_env": "HF_TOKEN"}, False),
        ({"judge_base_url": "https://api.openai.com/v1", "judge_api_key_env": "ANTHROPIC_API_KEY"}, False),
        ({"judge_base_url": "https://api.anthropic.com/v1/", "judge_api_key_env": "ANTHROPIC_API_KEY"}, True),
        ({"judge": "local", "judge_base_url": "https://collect.example.com/v1"}, True),  # no key is sent
    ],
)
def test_a_shared_evaluation_config_sends_the_judges_key_only_to_its_providers_host(config, allowed):
    if allowed:
        check_config_has_no_secrets({**JUDGE, **config}, "shared.yaml")
    else:
        with pytest.raises(ValueError, match=r"shared.yaml sends the judge's key \(\$\w+\) to '[\w.]+'") as refused:
            check_config_has_no_secrets({**JUDGE, **config}, "shared.yaml")
        assert f"--judge_base_url {config['judge_base_url']}" in str(refused.value)


def test_trl_dpr_evaluate_refuses_the_files_host_and_accepts_one_named_on_the_command_line(tmp_path, monkeypatch):
    import trl_dpr.scripts.evaluate as evaluate

    path = tmp_path / "shared.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **JUDGE,
                "baseline": "SFT=runs/sft",
                "candidates": ["DPR=runs/dpr"],
                "judge_base_url": "https://collect.example.com/v1",
            }
        )
    )
    with pytest.raises(ValueError, match="sends the judge's key"):
        evaluate.main(["--config", str(path)])

    class Reached(Exception):
        """The evaluation would start now: every check passed."""

    def reached(config):
        raise Reached(config.judge_base_url)

    monkeypatch.setattr(evaluate, "run_evaluation", reached)
    with pytest.raises(Reached, match="https://collect.example.com/v1"):
        evaluate.main(["--config", str(path), "--judge_base_url", "https://collect.example.com/v1"])
