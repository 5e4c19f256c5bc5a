#!/usr/bin/env bash
# The GPU tier (tests/end_to_end/test_gpu.py, docs/gpu_tests.md) on a bare GPU machine that has torch, transformers, accelerate
# and peft but not TRL, and no network. Two steps:
#
#   bash benchmarks/gpu_machine.sh download   # here, with a package index: the wheels below into benchmarks/gpu_wheels/
#                                             # (git-ignored) and trl_dpr's own wheel, built from this tree
#   bash benchmarks/gpu_machine.sh run        # there, offline, from the repository root: installs each wheel whose
#                                             # package is missing (--no-deps --no-index), then runs the tier in one go;
#                                             # its output goes to benchmarks/results/gpu_tier-<date>.log
#
# The versions are the ones the CPU suite is tested with (pyproject.toml's ranges). The binary wheels (bitsandbytes,
# pyarrow, xxhash, multiprocess's dill) are for the Python that downloads them: set GPU_PYTHON_VERSION (e.g. 3.12) when
# the GPU machine's Python differs from this one's. Sized for ≤ 8 minutes with the install (docs/gpu_tests.md).
set -euo pipefail

cd "$(dirname "$0")/.."
WHEELS=benchmarks/gpu_wheels
PYTHON=${PYTHON:-python3}
PINS=(
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 pyarrow==26.0.1
  bitsandbytes==0.50.2 fsspec==2026.9.0 pandas==3.1.1 python-dateutil==4.0.0 tzdata==2026.6
  pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1
)

download() {
  mkdir -p "$WHEELS"
  local target=()
  if [[ -n "${GPU_PYTHON_VERSION:-}" ]]; then
    target=(--python-version "$GPU_PYTHON_VERSION" --platform manylinux_2_28_x86_64 --only-binary=:all:)
  fi
  "$PYTHON" -m pip download --quiet --no-deps --dest "$WHEELS" "${target[@]}" "${PINS[@]}"
  "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$WHEELS" .
  ls -l "$WHEELS"
}

run() {
  local log="benchmarks/results/gpu_tier-$(date +%Y-%m-%d).log"
  mkdir -p benchmarks/results
  {
    "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
    local missing=()
    for pin in "${PINS[@]}"; do
      "$PYTHON" -c "import importlib.metadata as m; m.version('${pin%%==*}')" 2>/dev/null || missing+=("$pin")
    done
    missing+=(trl_dpr==0.1.0)
    echo "installing: ${missing[*]}"
    "$PYTHON" -m pip install --quiet --no-deps --no-index --find-links "$WHEELS" "${missing[@]}"
    export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    time "$PYTHON" -m pytest -q -m gpu tests/end_to_end/test_gpu.py -rs --durations=0
  } 2>&1 | tee "$log"
  echo "log: $log"
}

case "${1:-}" in
  download) download ;;
  run) run ;;
  *) echo "usage: bash benchmarks/gpu_machine.sh download|run" >&2; exit 2 ;;
esac
