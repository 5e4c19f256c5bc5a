"""`trl-dpr dpr`, `spin` and `gsil` run one stage flow (`trl_dpr.running.stages`): sft_config → train →
evaluation_config, with an unfinished SFT resumed and a finished one skipped."""

from pathlib import Path

import pytest
import yaml

from trl_dpr.running.checkpointing import write_checkpoint_manifest

ROOT = Path(__file__).resolve().parents[2]


def run_recipe(method: str, argv: list[str]):
    if method == "dpr":
        from trl_dpr.scripts.dpr import main

        return main(argv)
    from trl_dpr.lfd import GSILConfig, SPINConfig
    from trl_dpr.lfd.self_play import recipe_main

    return recipe_main({"spin": SPINConfig, "gsil": GSILConfig}[method], argv)


@pytest.fixture
def stages(tmp_path, monkeypatch):
    """`stages(method, sft_output_dir)`: the demo recipe of `method` with its SFT stage writing `sft_output_dir`, its
    training and SFT replaced by recorders; returns `(sft_training_args given to run_sft or None, trained)`."""
    import trl_dpr.lfd.self_play
    import trl_dpr.running.stages
    import trl_dpr.scripts.dpr

    sft_runs, trained = [], []
    monkeypatch.setattr(
        trl_dpr.running.stages, "run_sft", lambda args, training_args, model_args: sft_runs.append(training_args)
    )
    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", lambda *args, **kwargs: trained.append("DPR"))
    monkeypatch.setattr(trl_dpr.lfd.self_play, "run_self_play", lambda *args: trained.append("self-play"))

    def run(method: str, sft_output_dir: Path):
        sft_recipe = yaml.safe_load((ROOT / "recipes/demo/sft.yaml").read_text()) | {"output_dir": str(sft_output_dir)}
        (tmp_path / "sft.yaml").write_text(yaml.safe_dump(sft_recipe))
        run_recipe(
            method,
            [
                "--config",
                str(ROOT / f"recipes/demo/{method}.yaml"),
                "--sft_config",
                str(tmp_path / "sft.yaml"),
                "--model_name_or_path",
                str(tmp_path / "sft"),
                "--output_dir",
                str(tmp_path / method),
                "--evaluation_config",
                "",
                "--num_train_samples",
                "8",
            ],
        )
        return (sft_runs[0] if sft_runs else None), trained

    return run


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_resumes_an_unfinished_sft_stage_from_its_newest_complete_checkpoint(stages, tmp_path, method):
    checkpoint = tmp_path / "sft" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"w" * 100)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 4}')
    write_checkpoint_manifest(checkpoint)
    sft_training_args, trained = stages(method, tmp_path / "sft")
    assert sft_training_args.resume_from_checkpoint == str(checkpoint)
    assert trained == ["DPR" if method == "dpr" else "self-play"]


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_refuses_an_sft_stage_that_writes_another_folder(stages, tmp_path, method):
    name = {"dpr": "DPR", "spin": "SPIN", "gsil": "GSIL"}[method]
    with pytest.raises(ValueError, match=rf"writes the SFT model to .* but {name} starts from.*--sft_config \"\""):
        stages(method, tmp_path / "elsewhere")
