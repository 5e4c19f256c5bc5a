# The two commands a new user types on a fresh clone:
#   make demo   # the embedded LfD pipeline, offline on CPU: SFT (+ reference checkpoint) → DPR → evaluation
#   make test   # the whole test suite: the fast tier, then the slow tier (what CI runs)
# While developing: `make test-fast` (unit and small in-process tests, under a minute on 2 cores).
# Each sets up .venv by itself. TORCH pins the CPU build this project is tested with; override it on a GPU machine,
# e.g. `make demo TORCH=torch`.

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast test-slow lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/accelerate launch --config_file recipes/accelerate_configs/cpu.yaml \
		recipes/dpr.py --config recipes/demo/dpr.yaml

test: test-fast test-slow

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" tests

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests

lint: $(STAMP)
	$(BIN)/ruff check trl_dpr recipes experiments tests benchmarks

clean:
	rm -rf $(VENV) runs/demo
