"""`trl-dpr dpr`, `spin` and `gsil` run one stage flow (`trl_dpr.running.stages`): sft_config → train →
evaluation_config, with an unfinished SFT resumed and a finished one skipped."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from trl_dpr.running.checkpointing import (
    RUN_COMPLETE_NAME,
    mark_run_finished,
    release_output_dir,
    start_writing,
    write_checkpoint_manifest,
)

from ..conftest import demo_evaluation_yaml, save_sft_output

ROOT = Path(__file__).resolve().parents[2]


def run_recipe(method: str, argv: list[str]):
    if method == "dpr":
        from trl_dpr.scripts.dpr import main

        return main(argv)
    from trl_dpr.lfd import GSILConfig, SPINConfig
    from trl_dpr.lfd.self_play import recipe_main

    return recipe_main({"spin": SPINConfig, "gsil": GSILConfig}[method], argv)


@pytest.fixture
def stages(tmp_path, monkeypatch, tokenizer):
    """`stages(method, sft_output_dir, evaluation_config="")`: the demo recipe of `method` with its SFT stage writing
    `sft_output_dir`, its training and SFT replaced by recorders (the SFT one leaves a tiny SFT output); returns
    `(sft_training_args given to run_sft or None, trained)`."""
    import trl_dpr.lfd.self_play
    import trl_dpr.running.stages
    import trl_dpr.scripts.dpr

    sft_runs, trained = [], []

    def sft(args, training_args, model_args, fingerprint=None):
        sft_runs.append(training_args)
        save_sft_output(Path(training_args.output_dir), tokenizer)
        if fingerprint is not None:  # as run_sft records it, last
            mark_run_finished(training_args.output_dir, fingerprint)

    monkeypatch.setattr(trl_dpr.running.stages, "run_sft", sft)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", lambda *args, **kwargs: trained.append("DPR"))

    def self_play(script_args, training_args, model_args, **kwargs):
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)  # as the run's claim of its folder
        trained.append("self-play")
        method = trl_dpr.lfd.self_play.trainer_class(training_args)._name
        return trl_dpr.lfd.self_play.SelfPlayRun(training_args.output_dir, method, [])

    monkeypatch.setattr(trl_dpr.lfd.self_play, "run_self_play", self_play)

    def run(method: str, sft_output_dir: Path, evaluation_config: str = "", *extra: str, sft_overrides=None):
        sft_recipe = yaml.safe_load((ROOT / "recipes/demo/sft.yaml").read_text()) | {"output_dir": str(sft_output_dir)}
        sft_recipe |= sft_overrides or {}
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
                evaluation_config,
                "--num_train_samples",
                "8",
                *extra,
            ],
        )
        return (sft_runs[0] if sft_runs else None), trained

    run.sft_runs, run.trained = sft_runs, trained
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


def test_an_sft_stage_another_run_is_training_is_refused_saying_to_run_again_once_it_has_finished(
    stages, tmp_path, monkeypatch
):
    """Field trial C: two DPR runs of a sweep started at once from one SFT recipe; the second was told to "give this
    run another output_dir", which its own folder already is: the SFT folder is the recipe's, shared on purpose."""
    import json

    import trl_dpr.running.pipeline
    import trl_dpr.running.stages
    from trl_dpr.running.checkpointing import LOCK_HOLDER_NAME, LOCK_NAME, OutputDirInUse, _FolderLock

    monkeypatch.setattr(trl_dpr.running.stages, "run_sft", trl_dpr.running.pipeline.run_sft)  # its real claim
    (tmp_path / "sft").mkdir()
    other = _FolderLock(tmp_path / "sft" / LOCK_NAME)  # the first run's SFT stage, training
    assert other.acquire()
    (tmp_path / "sft" / LOCK_HOLDER_NAME).write_text(json.dumps({"pid": 4242, "host": "h", "started": "10:00"}))
    try:
        with pytest.raises(OutputDirInUse) as refused:
            stages("dpr", tmp_path / "sft")
    finally:
        other.release()
    assert str(refused.value) == (
        f"Another run is using {str(tmp_path / 'sft')!r} (PID 4242 on host h, started 10:00): it is training the SFT "
        f"stage this DPR run starts from ({tmp_path / 'sft.yaml'}). Run this command again once that SFT has "
        "finished: it then finds the SFT output and skips the stage."
    )
    assert stages.trained == []  # refused before the DPR stage


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_refuses_an_sft_stage_that_writes_another_folder(stages, tmp_path, method):
    name = {"dpr": "DPR", "spin": "SPIN", "gsil": "GSIL"}[method]
    with pytest.raises(ValueError, match=rf"writes the SFT model to .* but {name} starts from.*--sft_config \"\""):
        stages(method, tmp_path / "elsewhere")


@pytest.mark.parametrize("method", ["dpr", "dpr, π_ref named", "spin", "gsil"])
def test_a_found_sft_whose_reference_is_at_another_alpha_than_its_sft_recipe_is_refused_where_it_is_read(
    stages, tmp_path, tokenizer, capsys, method
):
    """The SFT recipe asks for π_ref at α=0.25; the finished SFT output there recorded α=0.5: DPR skipping it would
    train against the α=0.5 π_ref, so it stops before training, the SFT output as it was. SPIN/GSIL (which train
    against π_t) and DPR with its own `ref_model_name_or_path` never read that π_ref: they go on, and say so."""
    sft = save_sft_output(tmp_path / "sft", tokenizer)  # its dpr_reference.json: fraction 0.5
    manifest = (sft / "dpr_reference.json").read_text()
    if method == "dpr":
        message = r"π_ref is at α=0.5 \(dpr_reference.json\), but .*sft.yaml asks for reference_fraction 0.25\."
        with pytest.raises(ValueError, match=message + r" To train π_ref at α=0.25, remove .*reference_fraction: 0.5"):
            stages(method, sft, sft_overrides={"reference_fraction": 0.25})
        assert stages.sft_runs == [] and stages.trained == []
    else:
        named = ("--ref_model_name_or_path", str(sft / "dpr_reference")) if method.startswith("dpr") else ()
        stages(method.split(",")[0], sft, "", *named, sft_overrides={"reference_fraction": 0.25})
        assert f"(its π_ref (α=0.25) not read here): found in {sft}, skipped" in capsys.readouterr().out
        assert stages.sft_runs == [] and stages.trained == ["DPR" if named else "self-play"]
    assert (sft / "dpr_reference.json").read_text() == manifest


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_names_the_alpha_of_the_sft_output_it_found_and_skips_it(
    stages, tmp_path, tokenizer, capsys, method
):
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    manifest = json.loads((sft / "dpr_reference.json").read_text())
    manifest["fraction"] = 0.3
    (sft / "dpr_reference.json").write_text(json.dumps(manifest))
    stages(method, sft, sft_overrides={"reference_fraction": 0.3})
    shown = "reference checkpoint at α=0.3" if method == "dpr" else "its π_ref (α=0.3) not read here"
    assert f"({shown}): found in {sft}, skipped" in capsys.readouterr().out
    assert stages.sft_runs == [] and stages.trained == ["DPR" if method == "dpr" else "self-play"]


def sft_recipe_fingerprint(path: Path):
    """The fingerprint `trl-dpr sft --config path` records for its run (`run_fingerprint` of its parsed recipe)."""
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.sft import make_parser

    return run_fingerprint(*make_parser().parse_args_and_config(["--config", str(path)])[:3])


def test_a_pipelines_sft_stage_records_its_run_as_trl_dpr_sft_of_the_same_recipe_would(stages, tmp_path):
    """The SFT stage's record matches `trl-dpr sft --config sft.yaml`'s: that command then finds the run finished, and
    a later pipeline with another SFT recipe is compared with it rather than taking it for its own."""
    from trl_dpr.running.checkpointing import finished_run

    stages("dpr", tmp_path / "sft")
    assert len(stages.sft_runs) == 1
    assert finished_run(tmp_path / "sft", sft_recipe_fingerprint(tmp_path / "sft.yaml"))
    changed = yaml.safe_load((tmp_path / "sft.yaml").read_text()) | {"learning_rate": 3e-4}
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(changed))
    assert not finished_run(tmp_path / "sft", sft_recipe_fingerprint(tmp_path / "other.yaml"))


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_refuses_the_sft_output_of_another_sft_recipe_before_it_trains(stages, tmp_path, method):
    """The pipeline's SFT stage wrote sft/ from sft.yaml; sft.yaml then changes its learning rate: the next pipeline
    stops at the SFT stage, naming what changed, rather than training on the earlier π_SFT."""
    stages(method, tmp_path / "sft")
    before = {p: p.read_bytes() for p in (tmp_path / "sft").rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"'.*sft' already holds a run \(model.safetensors\), finished with other "):
        stages(method, tmp_path / "sft", sft_overrides={"learning_rate": 3e-4})
    assert len(stages.sft_runs) == 1 and len(stages.trained) == 1  # the first pipeline's, nothing since
    assert {p: p.read_bytes() for p in (tmp_path / "sft").rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_a_found_sft_output_without_a_run_record_is_skipped_with_a_note_that_it_was_not_compared(
    stages, tmp_path, tokenizer, capsys, method
):
    """An SFT output made by `run_sft` from Python (or an earlier trl_dpr) has no run_complete.json: nothing says which
    recipe made it, so it is used as before, and one line says it was not compared and how to train it anew."""
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    stages(method, sft, sft_overrides={"learning_rate": 3e-4})
    out = capsys.readouterr().out
    assert f"found in {sft}, skipped" in out
    assert f"{sft} has no run record (run_complete.json: " in out and f"remove {sft}." in out
    assert stages.sft_runs == [] and stages.trained == ["DPR" if method == "dpr" else "self-play"]


def test_a_found_sft_output_of_other_arguments_is_trained_again_when_its_recipe_overwrites(
    stages, tmp_path, tokenizer, capsys
):
    """overwrite_output_dir in the SFT recipe: as `trl-dpr sft --overwrite_output_dir true` would, the SFT of other
    arguments is trained again (from the start, not resumed from its checkpoint), and the stage says why."""
    from trl_dpr.running.checkpointing import RunFingerprint, mark_run_finished

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    old = RunFingerprint("0" * 64)
    old.parts = {"arguments": "0" * 64}
    mark_run_finished(sft, old)
    (sft / "checkpoint-4").mkdir()
    sft_training_args, trained = stages("dpr", sft, sft_overrides={"overwrite_output_dir": True})
    assert sft_training_args.resume_from_checkpoint is None and trained == ["DPR"]
    assert f"the run in {sft} had other arguments, trained again (overwrite_output_dir in " in capsys.readouterr().out


@pytest.mark.parametrize("sft_stage", ["found", "trained first"])
@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_refuses_answers_past_the_sft_models_context_before_it_trains(
    stages, tmp_path, tokenizer, method, sft_stage
):
    """The candidate shares π_SFT's context (512 positions): an evaluation of max_new_tokens 1000 is refused before the
    training, whether π_SFT was there or its SFT stage wrote it in the same command."""
    if sft_stage == "found":
        save_sft_output(tmp_path / "sft", tokenizer)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=4, max_new_tokens=1000)
    with pytest.raises(ValueError, match=r"\+ max_new_tokens 1000 is more than model SFT's context of 512 tokens"):
        stages(method, tmp_path / "sft", str(evaluation))
    assert stages.trained == []  # refused before the RL stage
    assert len(stages.sft_runs) == (sft_stage == "trained first")  # after the SFT stage that wrote π_SFT


def save_remote_code_sft_output(path: Path, tokenizer, max_positions: int) -> Path:
    """An SFT output whose config is code of its own (`auto_map`): transformers reads it only trusted."""
    from .test_bad_input import save_remote_code_model

    save_sft_output(path, tokenizer)
    remote = save_remote_code_model(path.parent / "remote-code", tokenizer, max_positions)
    for name in ("configuration_ctx.py", "config.json"):
        (path / name).write_bytes((remote / name).read_bytes())
    return path


@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipeline_checks_a_remote_code_sft_models_context_with_the_recipes_trust_remote_code(
    stages, tmp_path, tokenizer, method
):
    """The recipe trusts π_SFT's code and its evaluation YAML does not say: the evaluation will load π_SFT trusted, so
    its context (64 positions, readable only trusted) refuses answers of 96 tokens before the training."""
    save_remote_code_sft_output(tmp_path / "sft", tokenizer, max_positions=64)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=4, max_new_tokens=96)
    with pytest.raises(ValueError, match=r"\+ max_new_tokens 96 is more than model SFT's context of 64 tokens"):
        stages(method, tmp_path / "sft", str(evaluation), "--trust_remote_code", "true")
    assert stages.trained == []


class EvaluationStarted(Exception):
    """Raised where the evaluation after training starts (`run_evaluation`), with the config it was given."""


@pytest.mark.parametrize("in_yaml", [None, False])
@pytest.mark.parametrize("method", ["dpr", "spin", "gsil"])
def test_every_pipelines_evaluation_gets_the_recipes_trust_remote_code_unless_its_yaml_sets_it(
    stages, tmp_path, tokenizer, monkeypatch, method, in_yaml
):
    """Trusted by the recipe, π_SFT and the candidate are evaluated trusted when the evaluation YAML does not set
    trust_remote_code; `trust_remote_code: false` in it is the user's word and is kept."""
    import trl_dpr.evaluation

    def run_evaluation(config, *args, **kwargs):
        raise EvaluationStarted(config)

    monkeypatch.setattr(trl_dpr.evaluation, "run_evaluation", run_evaluation)
    save_remote_code_sft_output(tmp_path / "sft", tokenizer, max_positions=512)
    in_yaml = {} if in_yaml is None else {"trust_remote_code": in_yaml}
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml", demo_num_prompts=4, **in_yaml)
    with pytest.raises(EvaluationStarted) as started:
        stages(method, tmp_path / "sft", str(evaluation), "--trust_remote_code", "true")
    assert stages.trained == ["DPR" if method == "dpr" else "self-play"]
    assert started.value.args[0].trust_remote_code is in_yaml.get("trust_remote_code", True)


@pytest.mark.parametrize("form", ["yaml", "EvaluationConfig"])
@pytest.mark.parametrize(("training", "in_config"), [(True, False), (False, False), (False, True), (True, True)])
def test_evaluate_against_sft_forwards_the_training_runs_trust_remote_code_from_yaml_and_from_python_alike(
    tmp_path, monkeypatch, caplog, form, training, in_config
):
    """From Python, an `EvaluationConfig` gets the training run's True as a YAML that leaves the key unset does (its
    False cannot be told from the default, so the change is logged); a True of its own is never turned off."""
    import trl_dpr.evaluation
    from trl_dpr.evaluation import EvaluationConfig
    from trl_dpr.running.pipeline import evaluate_against_sft
    from trl_dpr.running.recipe_parser import load_evaluation_config

    def run_evaluation(config, *args, **kwargs):
        raise EvaluationStarted(config)

    monkeypatch.setattr(trl_dpr.evaluation, "run_evaluation", run_evaluation)
    yaml_path = demo_evaluation_yaml(tmp_path / "evaluate.yaml", **({"trust_remote_code": True} if in_config else {}))
    given = load_evaluation_config(yaml_path) if form == "EvaluationConfig" else str(yaml_path)
    assert form == "yaml" or isinstance(given, EvaluationConfig)
    with caplog.at_level("WARNING", logger="trl_dpr.running.pipeline"), pytest.raises(EvaluationStarted) as started:
        evaluate_against_sft(given, str(tmp_path / "sft"), str(tmp_path / "dpr"), trust_remote_code=training)
    assert started.value.args[0].trust_remote_code is (training or in_config)
    logged = [r.message for r in caplog.records if "trust_remote_code=True, as the training run did" in r.message]
    assert len(logged) == (form == "EvaluationConfig" and training and not in_config)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ: Linux")
@pytest.mark.parametrize("method", ["dpr", "spin"])
def test_an_evaluation_that_cannot_finish_writing_eval_results_leaves_the_earlier_one_whole(
    tmp_path, monkeypatch, method
):
    """The report is written beside the earlier one and renamed over it: a full disk (here a file size limit) or a
    kill mid-write, while a finished run is evaluated again, never leaves a truncated eval_results.json."""
    import resource
    import signal

    import trl_dpr.evaluation
    from trl_dpr.lfd.self_play import SelfPlayRun, evaluate_last_iterate
    from trl_dpr.running.pipeline import evaluate_against_sft

    report = {"table_markdown": "| DPR | 90.0 |", "answers": ["a long answer " * 20] * 200}  # ~60 kB, past the limit
    monkeypatch.setattr(
        trl_dpr.evaluation, "run_evaluation", lambda config, *a, **k: SimpleNamespace(as_dict=lambda: report)
    )
    policy = tmp_path / method
    policy.mkdir()
    earlier = json.dumps({"table_markdown": "| DPR | 84.2 |"})
    (policy / "eval_results.json").write_text(earlier)
    evaluation = demo_evaluation_yaml(tmp_path / "evaluate.yaml")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))
    try:
        with pytest.raises(OSError):
            if method == "dpr":
                evaluate_against_sft(evaluation, str(tmp_path / "sft"), str(policy))
            else:
                evaluate_last_iterate(evaluation, str(tmp_path / "sft"), SelfPlayRun(str(policy), "SPIN", []))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert (policy / "eval_results.json").read_text() == earlier
    assert sorted(path.name for path in policy.iterdir()) == ["eval_results.json"]  # no half-written file left


# ---- the same command again -------------------------------------------------------------------------------------------


@pytest.fixture
def dpr_runs(tmp_path, monkeypatch):
    """`dpr_runs(*overrides)`: `trl-dpr dpr`'s main on the demo recipe into tmp_path/dpr (no SFT stage, no
    evaluation), its training replaced by a recorder that writes a model and the evaluation table `dpr_runs.table`
    (None: none); returns the KL coefficients trained with so far."""
    import trl_dpr.scripts.dpr

    trained = []

    def train(script_args, training_args, model_args, inputs):
        trained.append(training_args.kl_coef)
        start_writing(training_args.output_dir)  # as the trainer's train() does first
        output = Path(training_args.output_dir)
        (output / "model.safetensors").write_bytes(b"weights")
        if run.table:
            (output / "eval_results.json").write_text(json.dumps({"table_markdown": run.table}))

    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", train)

    def run(*overrides: str) -> list[float]:
        recipe = ["--config", str(ROOT / "recipes/demo/dpr.yaml"), "--sft_config", "", "--evaluation_config", ""]
        run_recipe("dpr", [*recipe, "--output_dir", str(tmp_path / "dpr"), "--num_train_samples", "8", *overrides])
        return trained

    run.table = "| DPR | 84.2 |"
    return run


def test_the_same_dpr_command_again_trains_nothing_and_shows_the_finished_runs_evaluation(dpr_runs, tmp_path, capsys):
    assert dpr_runs() == [1.0]
    capsys.readouterr()
    assert dpr_runs() == [1.0]  # returned normally: exit code 0
    shown = capsys.readouterr().out
    assert f"Already finished: {tmp_path / 'dpr'} holds this run" in shown
    assert "| DPR | 84.2 |" in shown and "--overwrite_output_dir true" in shown


def test_resuming_a_finished_dpr_run_trains_nothing_and_says_it_is_finished(dpr_runs, tmp_path, capsys):
    assert dpr_runs() == [1.0]
    capsys.readouterr()
    for resume in ("true", str(tmp_path / "dpr" / "checkpoint-100")):  # its last checkpoint: a step past max_steps
        assert dpr_runs("--resume_from_checkpoint", resume) == [1.0]  # returned normally: exit code 0
        assert f"Already finished: {tmp_path / 'dpr'} holds this run" in capsys.readouterr().out


def test_a_changed_dpr_command_is_refused_a_finished_runs_folder_unless_it_overwrites(dpr_runs):
    assert dpr_runs() == [1.0]
    with pytest.raises(ValueError, match=r"already holds a run \(model.safetensors\).*--overwrite_output_dir true"):
        dpr_runs("--kl_coef", "0.5")
    assert dpr_runs("--kl_coef", "0.5", "--overwrite_output_dir", "true") == [1.0, 0.5]
    assert dpr_runs("--kl_coef", "0.5") == [1.0, 0.5]  # the folder now holds the kl_coef 0.5 run, finished
    with pytest.raises(ValueError, match="already holds a run"):
        dpr_runs()  # and no longer the first one


class Trained(Exception):
    """Raised where a self-play iteration would start training (`load_policy`): the tests ask whether it would."""


@pytest.fixture
def self_play_runs(tmp_path, tokenizer, monkeypatch):
    """`self_play_runs(method, *overrides)`: `trl-dpr spin|gsil`'s main on its demo recipe (one iteration, no SFT stage,
    no evaluation) from a tiny SFT output into tmp_path/<method>, where iteration 0 is planted as trained: the real
    self-play run claims, checks and publishes it, trains nothing, then writes the evaluation table
    `self_play_runs.table` (None: none). Returns how many
    times the self-play stage ran; an iteration that would train appends its π_t's folder name to `started` and raises
    `Trained`."""
    import trl_dpr.lfd.self_play

    sft = save_sft_output(tmp_path / "sft", tokenizer)
    stages_run, real_run = [], trl_dpr.lfd.self_play.run_self_play

    def load_policy(path, init_kwargs):
        self_play_runs.started.append(Path(path).name)
        raise Trained

    def run_self_play(*args, **kwargs):
        stages_run.append(1)
        run = real_run(*args, **kwargs)
        if self_play_runs.table:  # as its evaluation (evaluate_last_iterate) writes it
            (Path(run.output_dir) / "eval_results.json").write_text(
                json.dumps({"table_markdown": self_play_runs.table})
            )
        return run

    monkeypatch.setattr(trl_dpr.lfd.self_play, "load_policy", load_policy)
    monkeypatch.setattr(trl_dpr.lfd.self_play, "run_self_play", run_self_play)

    def self_play_runs(method: str, *overrides: str) -> int:
        output = tmp_path / method
        if not output.exists():
            (output / "iteration-0").mkdir(parents=True)
            (output / "iteration-0" / "model.safetensors").write_bytes(b"weights of iteration 0")
            (output / "iteration-0" / "self_play_iteration.json").write_text(json.dumps({"iteration": 0}))
        recipe = ["--config", str(ROOT / f"recipes/demo/{method}.yaml"), "--sft_config", "", "--evaluation_config", ""]
        run_recipe(
            method,
            [*recipe, "--model_name_or_path", str(sft), "--output_dir", str(output), "--num_train_samples", "8"]
            # iteration 0 is planted without its answers: iteration 1 would be refused for lacking them, before π_1 loads
            + ["--num_iterations", "1", "--previous_iteration_pairs", "false", *overrides],
        )
        return len(stages_run)

    self_play_runs.started, self_play_runs.table = [], "| SPIN | 80.1 |"
    yield self_play_runs
    for method in ("spin", "gsil"):  # a run stopped by `Trained` still holds its folder
        release_output_dir(tmp_path / method)


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_the_same_self_play_command_again_trains_nothing_and_shows_the_finished_runs_evaluation(
    self_play_runs, tmp_path, capsys, method
):
    assert self_play_runs(method) == 1
    assert (tmp_path / method / "model.safetensors").read_bytes() == b"weights of iteration 0"  # π_T published
    capsys.readouterr()
    assert self_play_runs(method) == 1  # the stage did not run again; returned normally: exit code 0
    shown = capsys.readouterr().out
    assert f"Already finished: {tmp_path / method} holds this run" in shown
    assert "| SPIN | 80.1 |" in shown and "--overwrite_output_dir true" in shown
    assert self_play_runs.started == []


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_a_self_play_command_with_other_settings_is_refused_naming_them_unless_it_overwrites(self_play_runs, method):
    assert self_play_runs(method) == 1
    with pytest.raises(
        ValueError, match=r"other settings \(learning_rate: 1e-05 → 2e-05\).*overwrite_output_dir: true"
    ):
        self_play_runs(method, "--learning_rate", "2e-5")
    with pytest.raises(Trained):  # starts over: π_0 (the SFT output) answers for iteration 0 again
        self_play_runs(method, "--learning_rate", "2e-5", "--overwrite_output_dir", "true")
    assert self_play_runs.started == ["sft"]
    with pytest.raises(ValueError, match=r"other settings \(learning_rate: 2e-05 → 1e-05\)"):
        self_play_runs(method)  # the folder is no longer the first run's


def test_resuming_a_finished_self_play_run_trains_nothing_and_says_it_is_finished(self_play_runs, tmp_path, capsys):
    assert self_play_runs("spin") == 1
    capsys.readouterr()
    assert self_play_runs("spin", "--resume_from_checkpoint", "true") == 1  # the stage did not run again
    assert f"Already finished: {tmp_path / 'spin'} holds this run" in capsys.readouterr().out
    assert self_play_runs.started == []


def test_more_self_play_iterations_continue_the_finished_run_instead_of_calling_it_finished(self_play_runs, tmp_path):
    assert self_play_runs("spin") == 1
    assert (tmp_path / "spin" / RUN_COMPLETE_NAME).is_file()
    with pytest.raises(Trained):
        self_play_runs("spin", "--num_iterations", "2")
    assert self_play_runs.started == ["iteration-0"]  # π_1 answers for iteration 1; iteration 0 is kept
    assert not (tmp_path / "spin" / RUN_COMPLETE_NAME).exists()  # claimed, not finished: no longer a finished run


def test_a_self_play_command_with_overwrite_output_dir_starts_its_unchanged_run_over(self_play_runs, tmp_path):
    assert self_play_runs("spin") == 1
    with pytest.raises(Trained):  # not `Already finished`, nor a resume of iteration 0
        self_play_runs("spin", "--overwrite_output_dir", "true")
    assert self_play_runs.started == ["sft"]  # π_0 answers for iteration 0 again
    assert not (tmp_path / "spin" / "iteration-0").exists()


# ---- a new run in the folder drops the old run's evaluation table ------------------------------------------------------


def test_a_dpr_run_started_over_without_an_evaluation_does_not_show_the_old_runs_table(dpr_runs, tmp_path, capsys):
    assert dpr_runs() == [1.0]
    dpr_runs.table = None  # the new run has no evaluation stage
    again = ("--learning_rate", "2e-5", "--overwrite_output_dir", "true")
    assert dpr_runs(*again) == [1.0, 1.0]
    assert not (tmp_path / "dpr" / "eval_results.json").exists()  # nor does its model card read the old one
    capsys.readouterr()
    assert dpr_runs(*again[:2]) == [1.0, 1.0]
    shown = capsys.readouterr().out
    assert "Already finished" in shown and "84.2" not in shown


@pytest.mark.parametrize("overrides", [("--overwrite_output_dir", "true"), ("--num_iterations", "2")])
def test_a_self_play_run_started_over_or_continued_drops_the_old_runs_table(self_play_runs, tmp_path, overrides):
    assert self_play_runs("spin") == 1
    assert (tmp_path / "spin" / "eval_results.json").is_file()
    with pytest.raises(Trained):
        self_play_runs("spin", *overrides)
    assert not (tmp_path / "spin" / "eval_results.json").exists()  # the table of a model the folder no longer holds


def test_a_dpr_run_with_merge_adapter_and_no_push_merges_once_after_its_evaluation(dpr_runs, monkeypatch):
    """Trial B, finding 5: without push_to_hub, merge_adapter was ignored. The merged card carries the evaluation."""
    import trl_dpr.scripts.dpr

    events, trainer = [], SimpleNamespace(create_model_card=lambda **_: events.append("card"))
    recorder = trl_dpr.scripts.dpr.run_dpr  # dpr_runs' stand-in for the training

    def train(script_args, *args, **kwargs):
        events.append(f"train, merge_adapter={script_args.merge_adapter}")
        recorder(script_args, *args, **kwargs)
        return trainer

    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", train)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", lambda *args, **kwargs: events.append("evaluate"))
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_trainer_output", lambda t: events.append(("merge", t is trainer)))
    dpr_runs("--evaluation_config", "recipes/evaluate/demo.yaml", "--merge_adapter", "true")
    assert events == ["train, merge_adapter=False", "evaluate", "card", ("merge", True)]


# ---- a failed evaluation keeps the trained run, finished ---------------------------------------------------------------


class EvaluationFailed(Exception):
    """Raised by the evaluation stage: the judge's API is down, a bad benchmark file, a full disk."""


def fail_evaluation(*args, **kwargs):
    raise EvaluationFailed


def test_a_dpr_run_whose_evaluation_fails_is_kept_finished_and_the_same_command_again_only_evaluates(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    import trl_dpr.scripts.dpr
    from trl_dpr.running.checkpointing import is_claimed

    evaluation = ("--evaluation_config", "recipes/evaluate/demo.yaml")
    evaluated, table = [], "| DPR | 90.0 |"

    def evaluate(config, sft_path, policy_path, **kwargs):
        evaluated.append(policy_path)
        (Path(policy_path) / "eval_results.json").write_text(json.dumps({"table_markdown": table}))

    dpr_runs.table = None  # the evaluation writes it, when it does not fail
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", fail_evaluation)
    monkeypatch.chdir(ROOT)
    with pytest.raises(EvaluationFailed):
        dpr_runs(*evaluation)
    assert "the same command again runs only its evaluation" in capsys.readouterr().err
    assert not is_claimed(tmp_path / "dpr")
    assert (tmp_path / "dpr" / RUN_COMPLETE_NAME).is_file()  # trained and finished: not stranded
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", evaluate)
    assert dpr_runs(*evaluation) == [1.0]  # trained once only
    assert evaluated == [str(tmp_path / "dpr")] and not is_claimed(tmp_path / "dpr")
    assert "its evaluation did not finish: evaluating it" in capsys.readouterr().out
    assert dpr_runs(*evaluation) == [1.0] and len(evaluated) == 1  # now finished with its evaluation
    shown = capsys.readouterr().out
    assert "Already finished" in shown and table in shown


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_a_self_play_run_whose_evaluation_fails_is_kept_finished_and_the_same_command_again_only_evaluates(
    self_play_runs, tmp_path, monkeypatch, method
):
    import trl_dpr.lfd.self_play
    from trl_dpr.running.checkpointing import is_claimed

    evaluated = []
    self_play_runs.table = None
    monkeypatch.setattr(trl_dpr.lfd.self_play, "evaluate_last_iterate", fail_evaluation)
    monkeypatch.chdir(ROOT)
    with pytest.raises(EvaluationFailed):
        self_play_runs(method, "--evaluation_config", "recipes/evaluate/demo.yaml")
    assert not is_claimed(tmp_path / method)
    assert (tmp_path / method / RUN_COMPLETE_NAME).is_file()
    monkeypatch.setattr(
        trl_dpr.lfd.self_play, "evaluate_last_iterate", lambda config, sft, run, *args: evaluated.append(run)
    )
    assert self_play_runs(method, "--evaluation_config", "recipes/evaluate/demo.yaml") == 1  # not trained again
    (run,) = evaluated
    assert Path(run.output_dir) == tmp_path / method and self_play_runs.started == []


def test_a_dpr_run_trained_without_an_evaluation_is_evaluated_by_the_same_command_naming_one(
    dpr_runs, monkeypatch, capsys
):
    """The evaluation settings are not the run: naming an evaluation_config on a run finished without one evaluates
    it, once; it is not trained again, nor refused as another run."""
    import trl_dpr.scripts.dpr

    evaluated = []
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", lambda config, *a, **kw: evaluated.append(config))
    dpr_runs.table = None
    assert dpr_runs() == [1.0]
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    assert dpr_runs("--evaluation_config", "recipes/evaluate/demo.yaml") == [1.0]  # not trained again
    assert evaluated == ["recipes/evaluate/demo.yaml"]
    assert "it was trained without an evaluation_config: evaluating it." in capsys.readouterr().out
    assert dpr_runs("--evaluation_config", "recipes/evaluate/demo.yaml") == [1.0] and len(evaluated) == 1
    assert "Already finished" in capsys.readouterr().out
    assert dpr_runs() == [1.0] and len(evaluated) == 1  # none named again: nothing to evaluate, the same run


def test_an_answer_check_that_cannot_be_imported_is_refused_before_the_dpr_run_trains(
    dpr_runs, tmp_path, monkeypatch, tokenizer
):
    """The evaluation imports an `answer_check` of yours only after training: a typo in its module is refused first."""
    sft = save_sft_output(tmp_path / "sft", tokenizer)
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps({"prompt": "Convert 100 °C to Fahrenheit.", "answer": "212"}) + "\n")
    evaluation = demo_evaluation_yaml(
        tmp_path / "eval.yaml", benchmarks=["jsonl"], jsonl_path=str(held_out), answer_check="my_chekcs:fahrenheit"
    )
    evaluation = Path(evaluation)
    values = yaml.safe_load(evaluation.read_text())
    values.pop("demo_num_prompts")
    evaluation.write_text(yaml.safe_dump(values))
    monkeypatch.chdir(ROOT)  # the folder the command runs in: no my_chekcs.py there
    with pytest.raises(ValueError, match=r"answer_check 'my_chekcs:fahrenheit': cannot import 'my_chekcs'"):
        dpr_runs("--evaluation_config", str(evaluation), "--model_name_or_path", str(sft))
    assert not (tmp_path / "dpr" / "model.safetensors").exists()  # not trained


@pytest.mark.parametrize("method", ["spin", "gsil"])
def test_a_self_play_run_whose_evaluation_yaml_was_edited_is_evaluated_again_not_trained(
    self_play_runs, tmp_path, monkeypatch, capsys, method
):
    import trl_dpr.lfd.self_play

    evaluation, evaluated = Path(demo_evaluation_yaml(tmp_path / "eval.yaml")), []

    def evaluate(config, sft, run, *args):
        evaluated.append(Path(config).read_text())
        table = f"| {run.method} | evaluation {len(evaluated)} |"
        (Path(run.output_dir) / "eval_results.json").write_text(json.dumps({"table_markdown": table}))

    monkeypatch.setattr(trl_dpr.lfd.self_play, "evaluate_last_iterate", evaluate)
    self_play_runs.table = None  # the evaluation writes it
    assert self_play_runs(method, "--evaluation_config", str(evaluation)) == 1
    assert self_play_runs(method, "--evaluation_config", str(evaluation)) == 1 and len(evaluated) == 1
    demo_evaluation_yaml(evaluation, max_new_tokens=4)  # edited after its evaluation
    capsys.readouterr()
    assert self_play_runs(method, "--evaluation_config", str(evaluation)) == 1  # not trained again
    assert len(evaluated) == 2 and "max_new_tokens: 4" in evaluated[1]
    assert "evaluation settings (evaluation_config) changed since it was evaluated: evaluating it again." in (
        capsys.readouterr().out
    )
    assert self_play_runs(method, "--evaluation_config", str(evaluation)) == 1 and len(evaluated) == 2
    shown = capsys.readouterr().out
    assert "Already finished" in shown and "evaluation 2 |" in shown and self_play_runs.started == []


# ---- a failed merge or push keeps the trained run, finished, with what is still to do ---------------------------------

EVALUATION = ("--evaluation_config", "recipes/evaluate/demo.yaml")


class MergeFailed(Exception):
    """Raised by the merge after the evaluation: a full disk, a base model that cannot be downloaded."""


def fail(error: type[Exception]):
    def failing(*args, **kwargs):
        raise error

    return failing


def record_steps(dpr_runs, monkeypatch) -> list:
    """Replace `trl-dpr dpr`'s training (dpr_runs' recorder, returning a trainer stand-in), evaluation, merges and push
    with recorders; returns the list they append to, in the order they ran."""
    import trl_dpr.scripts.dpr

    events, trainer, recorder = [], SimpleNamespace(create_model_card=lambda **_: None), trl_dpr.scripts.dpr.run_dpr

    def train(*args, **kwargs):
        events.append("train")
        recorder(*args, **kwargs)
        return trainer

    def evaluate(config, sft_path, policy_path, **kwargs):
        events.append("evaluate")
        (Path(policy_path) / "eval_results.json").write_text(json.dumps({"table_markdown": "| DPR | 90.0 |"}))
        return {"win_rate": 0.9}

    dpr_runs.table = None  # the evaluation writes it
    monkeypatch.chdir(ROOT)  # EVALUATION's path
    monkeypatch.setattr(trl_dpr.scripts.dpr, "run_dpr", train)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", evaluate)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_trainer_output", lambda t: events.append("merge"))
    merge_again = lambda *args: events.append(("merge again", *args))  # noqa: E731
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_output_dir", merge_again, raising=False)  # not before the fix
    monkeypatch.setattr(trl_dpr.scripts.dpr, "push_trainer_output", lambda t, **kwargs: events.append("push"))
    return events


def pending(tmp_path) -> list[str]:
    return json.loads((tmp_path / "dpr" / RUN_COMPLETE_NAME).read_text())["pending"]


def test_a_dpr_run_whose_merge_fails_after_its_evaluation_merges_when_the_same_command_runs_again(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    import trl_dpr.scripts.dpr
    from trl_dpr.running.checkpointing import is_claimed

    events = record_steps(dpr_runs, monkeypatch)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_trainer_output", fail(MergeFailed))
    with pytest.raises(MergeFailed):
        dpr_runs(*EVALUATION, "--merge_adapter", "true")
    assert "The merge did not finish" in capsys.readouterr().err
    assert pending(tmp_path) == ["merge"] and not is_claimed(tmp_path / "dpr")  # evaluated; finished, free
    assert dpr_runs(*EVALUATION, "--merge_adapter", "true") == [1.0]  # trained once only, evaluated once only
    assert events == ["train", "evaluate", ("merge again", str(tmp_path / "dpr"), "float32")]  # the recipe's dtype
    assert "its merge did not finish: merging its adapter." in capsys.readouterr().out
    assert pending(tmp_path) == [] and not is_claimed(tmp_path / "dpr")
    dpr_runs(*EVALUATION, "--merge_adapter", "true")
    assert "Already finished" in capsys.readouterr().out and len(events) == 3  # nothing done again


def test_a_dpr_run_whose_evaluation_fails_evaluates_and_then_merges_when_the_same_command_runs_again(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    import trl_dpr.scripts.dpr

    events = record_steps(dpr_runs, monkeypatch)
    evaluate = trl_dpr.scripts.dpr.evaluate_against_sft
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", fail_evaluation)
    with pytest.raises(EvaluationFailed):
        dpr_runs(*EVALUATION, "--merge_adapter", "true")
    assert pending(tmp_path) == ["evaluation", "merge"] and events == ["train"]  # nothing merged before its table
    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", evaluate)
    capsys.readouterr()
    assert dpr_runs(*EVALUATION, "--merge_adapter", "true") == [1.0]
    assert events == ["train", "evaluate", ("merge again", str(tmp_path / "dpr"), "float32")]
    assert (
        "its evaluation and merge did not finish: evaluating it, then merging its adapter." in capsys.readouterr().out
    )
    assert pending(tmp_path) == []


def test_a_dpr_run_whose_push_fails_leaves_the_trl_dpr_push_line_with_the_recipes_repo_merge_privacy_and_branch(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    import shlex

    import trl_dpr.running.pipeline
    import trl_dpr.running.push
    import trl_dpr.scripts.dpr

    monkeypatch.setattr(trl_dpr.running.pipeline, "check_hub_push", lambda args: None)  # offline here: no Hub check
    events = record_steps(dpr_runs, monkeypatch)
    monkeypatch.setattr(trl_dpr.scripts.dpr, "push_trainer_output", fail(ConnectionError))
    hub = ("--push_to_hub", "true", "--hub_model_id", "me/dpr-demo", "--hub_private_repo", "true")
    hub += ("--hub_revision", "exp-1", "--merge_adapter", "true")
    with pytest.raises(ConnectionError):
        dpr_runs(*hub)
    err = capsys.readouterr().err
    assert pending(tmp_path) == ["push"]  # a push merges first when it merges: no merge of its own is pending
    assert dpr_runs(*hub) == [1.0] and events == ["train"]  # nothing trained, merged or pushed again
    out = capsys.readouterr().out
    assert "Already finished" in out
    (line,) = [line for line in out.splitlines() if line.startswith("Not pushed yet: ")]
    command = line.removeprefix("Not pushed yet: ").removesuffix(" (its push did not finish)")
    assert f"Push it: {command}" in err  # the failed run said it too
    # The line, run by trl-dpr push's own parser, merges and pushes as the recipe would have.
    argv = shlex.split(command)
    assert argv[:2] == ["trl-dpr", "push"]
    pushed = []
    monkeypatch.setattr(trl_dpr.running.push, "_unfinished", lambda folder: None)
    monkeypatch.setattr(trl_dpr.running.push, "_check_mergeable", lambda folder, name: None)
    monkeypatch.setattr(trl_dpr.running.push, "_check_hub_destination", lambda repo: None)
    monkeypatch.setattr(trl_dpr.running.push, "merge_adapter_folder", lambda adapter, merged, **_: merged)
    monkeypatch.setattr(trl_dpr.running.push, "push_folder", lambda *args, **kwargs: pushed.append((args, kwargs)))
    trl_dpr.running.push.main(argv[2:])
    ((args, kwargs),) = pushed
    assert args == (f"{tmp_path / 'dpr'}-merged", "me/dpr-demo")
    assert kwargs["private"] is True and kwargs["revision"] == "exp-1"


def test_a_merged_dpr_run_whose_evaluation_yaml_was_edited_is_evaluated_and_then_merged_again(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    """`<output_dir>-merged` copies the card and eval_results.json when it merges: an evaluation redone without the
    merge left the merged model's card with the old table. A merge that fails then is pending for the next run."""
    import trl_dpr.scripts.dpr

    events = record_steps(dpr_runs, monkeypatch)
    evaluation = Path(demo_evaluation_yaml(tmp_path / "eval.yaml"))
    merging = ("--evaluation_config", str(evaluation), "--merge_adapter", "true")
    dpr_runs(*merging)
    assert events == ["train", "evaluate", "merge"] and pending(tmp_path) == []
    demo_evaluation_yaml(evaluation, max_new_tokens=4)  # edited after the run merged
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_output_dir", fail(MergeFailed))
    capsys.readouterr()
    with pytest.raises(MergeFailed):
        dpr_runs(*merging)
    assert "changed since it was evaluated: evaluating it again, then merging its adapter again." in (
        capsys.readouterr().out
    )
    assert events == ["train", "evaluate", "merge", "evaluate"] and pending(tmp_path) == ["merge"]
    monkeypatch.setattr(trl_dpr.scripts.dpr, "merge_output_dir", lambda *args: events.append(("merge again", *args)))
    dpr_runs(*merging)  # evaluated with these settings already: only the merge that failed, in the recipe's dtype
    assert events[4:] == [("merge again", str(tmp_path / "dpr"), "float32")] and pending(tmp_path) == []
    assert "its merge did not finish: merging its adapter." in capsys.readouterr().out
    dpr_runs(*merging)
    assert "Already finished" in capsys.readouterr().out and len(events) == 5


def test_a_pushed_dpr_run_evaluated_again_says_its_hub_copy_keeps_the_old_table_with_the_push_line(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    import shlex

    import trl_dpr.running.pipeline

    monkeypatch.setattr(trl_dpr.running.pipeline, "check_hub_push", lambda args: None)  # offline here: no Hub check
    events = record_steps(dpr_runs, monkeypatch)
    evaluation = Path(demo_evaluation_yaml(tmp_path / "eval.yaml"))
    hub = ("--evaluation_config", str(evaluation), "--push_to_hub", "true", "--hub_model_id", "me/dpr-demo")
    dpr_runs(*hub)
    assert events == ["train", "evaluate", "push"] and pending(tmp_path) == []
    capsys.readouterr()
    dpr_runs(*hub)  # the same settings: nothing to say about the Hub copy
    assert "earlier evaluation table" not in capsys.readouterr().out
    demo_evaluation_yaml(evaluation, max_new_tokens=4)
    dpr_runs(*hub)
    assert events == ["train", "evaluate", "push", "evaluate"]  # not pushed: the user's network and token
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "earlier evaluation table" in line]
    assert line.startswith("Its Hub copy keeps the earlier evaluation table; to push this one: trl-dpr push ")
    argv = shlex.split(line.split("to push this one: ")[1])
    assert argv == ["trl-dpr", "push", str(tmp_path / "dpr"), "--to", "me/dpr-demo"]


def test_a_card_an_earlier_trl_dpr_wrote_gets_the_new_table_in_place_of_its_exact_old_one_or_is_left_and_said(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    """Its card has no markers around the table: the old eval_results.json's table, found exactly as written, is
    replaced and a note of yours after it stays; a table you edited is not found: the card stays, and one line says so."""
    import trl_dpr.scripts.dpr

    record_steps(dpr_runs, monkeypatch)
    tables = []

    def evaluate(config, sft_path, policy_path, **kwargs):
        tables.append(f"| Method | win |\n|---|---|\n| DPR | {50 + len(tables)}.0 |")
        (Path(policy_path) / "eval_results.json").write_text(json.dumps({"table_markdown": tables[-1]}))
        return {"table_markdown": tables[-1]}

    monkeypatch.setattr(trl_dpr.scripts.dpr, "evaluate_against_sft", evaluate)
    evaluation = Path(demo_evaluation_yaml(tmp_path / "eval.yaml"))
    dpr_runs("--evaluation_config", str(evaluation))
    card, note = tmp_path / "dpr" / "README.md", "Note by me: judged by hand, see my blog."
    earlier = "# tiny-dpr\n\n## Evaluation\n\n{}\n\n{}\n\n### Framework versions\n\n- TRL: 0.0\n"
    card.write_text(earlier.format(tables[0], note))  # as an earlier trl_dpr wrote it, then you added the note
    demo_evaluation_yaml(evaluation, max_new_tokens=4)
    capsys.readouterr()
    dpr_runs("--evaluation_config", str(evaluation))
    written = card.read_text()
    assert tables[1] in written and tables[0] not in written and note in written
    assert written.index(tables[1]) < written.index(note) and "keeps its earlier table" not in capsys.readouterr().err
    edited = earlier.format(tables[1].replace("|---|", "|:---:|", 1), note)  # the table's text edited by hand
    card.write_text(edited)
    demo_evaluation_yaml(evaluation, max_new_tokens=2)
    dpr_runs("--evaluation_config", str(evaluation))
    assert len(tables) == 3 and card.read_text() == edited
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "keeps its earlier table" in line]
    assert line.startswith(f"{card} keeps its earlier table: ") and "eval_results.json" in line


def test_a_dpr_run_recorded_finished_without_pending_steps_by_an_earlier_trl_dpr_is_finished(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    events = record_steps(dpr_runs, monkeypatch)
    assert dpr_runs(*EVALUATION, "--merge_adapter", "true") == [1.0]
    record = tmp_path / "dpr" / RUN_COMPLETE_NAME
    written = json.loads(record.read_text())
    assert written.pop("pending") == []
    record.write_text(json.dumps(written))  # as an earlier trl_dpr wrote it
    capsys.readouterr()
    dpr_runs(*EVALUATION, "--merge_adapter", "true")
    assert "Already finished" in capsys.readouterr().out and events == ["train", "evaluate", "merge"]
    (tmp_path / "dpr" / "eval_results.json").unlink()  # its evaluation did not finish: evaluated again, as before
    dpr_runs(*EVALUATION, "--merge_adapter", "true")
    assert events == ["train", "evaluate", "merge", "evaluate"]  # its merge is not known to be pending: not redone


def test_a_run_recorded_by_the_trl_dpr_before_whose_evaluation_yaml_alone_was_edited_is_evaluated_again_not_refused(
    dpr_runs, tmp_path, monkeypatch, capsys
):
    """The trl_dpr before this one digested the evaluation YAML's text with the run's: its record of a run whose only
    config file is that YAML, edited since, is the same trained run, evaluated again (it was refused as another)."""
    from trl_dpr.running.checkpointing import run_fingerprint
    from trl_dpr.scripts.dpr import make_parser

    events = record_steps(dpr_runs, monkeypatch)
    evaluation = Path(demo_evaluation_yaml(tmp_path / "eval.yaml"))
    dpr_runs("--evaluation_config", str(evaluation))
    argv = ["--config", str(ROOT / "recipes/demo/dpr.yaml"), "--sft_config", "", "--evaluation_config", ""]
    argv += ["--output_dir", str(tmp_path / "dpr"), "--num_train_samples", "8", "--evaluation_config", str(evaluation)]
    earlier = run_fingerprint(*make_parser().parse_args_and_config(argv)[:3])
    record = {"arguments_sha256": earlier.earlier[0], "parts": earlier.earlier_parts}  # as that trl_dpr wrote it
    assert "config files" in record["parts"] and "config files" not in earlier.parts  # the YAML its only one
    (tmp_path / "dpr" / RUN_COMPLETE_NAME).write_text(json.dumps(record))
    capsys.readouterr()
    dpr_runs("--evaluation_config", str(evaluation))  # unchanged: finished, as before
    assert "Already finished" in capsys.readouterr().out and events == ["train", "evaluate"]
    demo_evaluation_yaml(evaluation, max_new_tokens=4)
    dpr_runs("--evaluation_config", str(evaluation))
    assert events == ["train", "evaluate", "evaluate"]  # not trained again, not refused
    assert "changed since it was evaluated: evaluating it again." in capsys.readouterr().out
    dpr_runs("--evaluation_config", str(evaluation))
    assert "Already finished" in capsys.readouterr().out and len(events) == 3


@pytest.mark.parametrize("stage", ["sft", "dpr"])
def test_overwrite_output_dir_is_a_key_and_a_flag_of_the_sft_recipe_as_of_dprs(stage, tmp_path):
    from importlib import import_module

    make_parser = import_module(f"trl_dpr.scripts.{stage}").make_parser
    recipe = yaml.safe_load((ROOT / f"recipes/demo/{stage}.yaml").read_text())
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "key.yaml").write_text(yaml.safe_dump({**recipe, "overwrite_output_dir": True}))
    parsed = {
        name: make_parser().parse_args_and_config(["--config", str(tmp_path / "plain.yaml"), *flags])[1]
        for name, flags in (("default", []), ("flag", ["--overwrite_output_dir", "true"]))
    }
    parsed["key"] = make_parser().parse_args_and_config(["--config", str(tmp_path / "key.yaml")])[1]
    assert {name: args.overwrite_output_dir for name, args in parsed.items()} == {
        "default": False,
        "flag": True,
        "key": True,
    }


@pytest.mark.parametrize(
    ("output_dir", "expected"),
    [
        ("runs/demo/dpr", "runs/demo/eval/dpr"),
        ("runs/p/dpr_sr", "runs/p/eval/dpr_sr"),  # an ablation beside runs/p/dpr: a folder of its own
        ("runs/demo/dpr/", "runs/demo/eval/dpr"),
        ("runs/demo/dpr/../dpr_sr", "runs/demo/eval/dpr_sr"),
        (".", "../eval/{cwd}"),  # never inside the run being evaluated
    ],
)
def test_each_runs_evaluation_is_in_a_folder_of_its_own_beside_the_run_never_inside_it(
    output_dir, expected, tmp_path, monkeypatch
):
    """The pipeline's evaluation folder, written out by hand: `<parent>/eval/<run folder>` of the run's absolute path
    (runs/p/dpr and runs/p/dpr_sr each get their own cached answers)."""
    from trl_dpr.running.pipeline import evaluation_dir

    monkeypatch.chdir(tmp_path)
    want = (tmp_path / expected.format(cwd=tmp_path.name)).resolve()
    assert Path(evaluation_dir(output_dir)).resolve() == want
    assert not Path(evaluation_dir(output_dir)).resolve().is_relative_to((tmp_path / output_dir).resolve())
