"""Bad input to SPIN and GSIL (their configs, trainers, losses and recipes) is a clear error that says what was wrong
and what to do, before any generation or training."""

import pytest
import yaml
from datasets import Dataset

from trl_dpr.embedded.task import demo_corpus
from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm, build_tokenizer
from trl_dpr.lfd import GSILConfig, SPINConfig, SPINTrainer
from trl_dpr.lfd.losses import gsil_loss, spin_loss

from .test_losses import as_tensors
from .test_recipes import parse
from .test_spin_gsil import run_args


@pytest.mark.parametrize(
    ("config_class", "overrides", "match"),
    [
        (SPINConfig, {"loss_type": ["ipo"]}, r"loss_type: \['ipo'\] is not used: .*spin_loss_type"),
        (GSILConfig, {"sync_ref_model": True}, "reference is π_t"),
        (GSILConfig, {"ld_alpha": 0.5}, "whole-sequence"),
        (SPINConfig, {"spin_loss_type": "logistic"}, r"one of \('sigmoid', 'hinge'\)"),
        (GSILConfig, {"gsil_loss_type": "sigmoid"}, "'bernoulli' is the logistic loss"),
        (SPINConfig, {"num_iterations": 0}, "num_iterations must be >= 1"),
        (GSILConfig, {"generation_top_p": 0.0}, r"generation_top_p must be in \(0, 1\]"),
        (SPINConfig, {"beta": 0.0}, "beta must be > 0"),
    ],
)
def test_configs_refuse_what_the_methods_would_ignore_or_break(config_class, overrides, match):
    with pytest.raises(ValueError, match=match):
        config_class(output_dir="out", use_cpu=True, bf16=False, **overrides)


def test_each_trainer_refuses_the_other_methods_config(tmp_path):
    tok = build_tokenizer(demo_corpus(size=50))
    with pytest.raises(TypeError, match="SPINTrainer needs a SPINConfig"):
        SPINTrainer(
            model=build_tiny_causal_lm(tok), args=run_args(GSILConfig, tmp_path), train_dataset=Dataset.from_list([{}])
        )


def test_an_unknown_loss_type_is_an_error_that_lists_the_choices():
    args = as_tensors()
    with pytest.raises(ValueError, match=r"one of \('sigmoid', 'hinge'\)"):
        spin_loss(*args, loss_type="logistic")
    with pytest.raises(ValueError, match=r"one of \('bernoulli', 'brier', 'hinge', 'kliep', 'lsif'\)"):
        gsil_loss(*args, loss_type="sigmoid")


def test_log_probabilities_of_different_shapes_are_an_error():
    a, b, c, d = as_tensors()
    with pytest.raises(ValueError, match="one shape"):
        spin_loss(a, b[:2], c, d)
    with pytest.raises(ValueError, match="summed over each completion"):
        gsil_loss(a.unsqueeze(1).expand(-1, 3), b, c, d)


def test_an_unknown_key_in_a_self_play_recipe_is_an_error_that_names_it(tmp_path):
    path = tmp_path / "spin.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path), "num_iteration": 2, "loss_type": "sigmoid"}))
    with pytest.raises(ValueError, match=r"num_iteration \(did you mean num_iterations"):
        parse("spin", path)
