#!/usr/bin/env bash
# Everything a GPU should run, in one window of ≤ 9 minutes: the wheels it brings installed, the GPU tier, then the
# benchmarks (benchmarks/gpu_run.py: 8B-shape DPR steps at the recipe's generation settings, one generate call at
# batch 2 and at the rollout batch, the 24 GiB fit on a capped card, DPR / GRPO in alternating pairs), each stage's log
# and JSON lines under one folder, and a summary table at the end.
#
#   bash benchmarks/gpu_run.sh --download   # here, with a package index: the wheels into benchmarks/gpu_wheels/
#                                           # (git-ignored, ≤ 60 MiB: trl, datasets, dill, multiprocess, bitsandbytes,
#                                           # transformers 5.24 (the tested one; the GPU image has 5.17), trl_dpr)
#   bash benchmarks/gpu_run.sh              # there, from the repository root, offline (DEVELOPERS.md)
#   bash benchmarks/gpu_run.sh --skip-tier  # there, a second window: the benchmarks alone
#   bash benchmarks/gpu_run.sh --stages dpr_over_grpo,fit_24_gib  # there: only what is still owed (names: gpu_run.py)
#   bash benchmarks/gpu_run.sh --smoke      # here, on the CPU: the same stages at toy sizes, ≤ 3 minutes
#
# Output: benchmarks/results/gpu_run-<UTC time>[-smoke]/ (or $GPU_RUN_OUT): one .log per stage, .jsonl records,
# tier.xml, summary.md. PYTHON (default: .venv/bin/python if there, else python3) runs everything.
set -uo pipefail

cd "$(dirname "$0")/.."
WHEELS=benchmarks/gpu_wheels
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PINS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 bitsandbytes==0.50.2 transformers==5.24.0)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

download() {  # the GPU image: Python 3.12, x86-64, with torch, accelerate, peft, pandas, pyarrow, xxhash, pytest
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" --dest "$WHEELS" "${PINS[@]}" || exit 1
  "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$WHEELS" . || exit 1
  ls -l "$WHEELS"
  local mib=$(( $(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1) / 1048576 ))
  echo "$WHEELS: $(ls "$WHEELS" | wc -l) wheels, $mib MiB (carry limit 60 MiB)"
  (( mib <= 60 )) || { echo "over 60 MiB: carry less" >&2; exit 1; }
}

mode=gpu; extra=()
case "${1:-}" in
  --download) download; exit ;;
  --smoke) mode=smoke; extra=(--smoke) ;;
  --skip-tier) extra=(--skip-tier) ;;
  --stages) extra=(--stages "${2:?--stages needs a comma-separated list: bash benchmarks/gpu_run.sh --stages dpr_over_grpo,fit_24_gib}") ;;
  "") ;;
  *) echo "usage: bash benchmarks/gpu_run.sh [--download | --smoke | --skip-tier | --stages a,b,...]" >&2; exit 2 ;;
esac

start=$SECONDS
OUT=${GPU_RUN_OUT:-benchmarks/results/gpu_run-$(date -u +%Y%m%d-%H%M%S)$([[ $mode == smoke ]] && echo -smoke)}
mkdir -p "$OUT"
install_row="smoke: the environment's own packages, nothing installed"
if [[ $mode == gpu ]]; then
  "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA here: bash benchmarks/gpu_run.sh --smoke runs on the CPU')" || exit 1
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run bash benchmarks/gpu_run.sh --download where pip can reach an index, and carry $WHEELS" >&2; exit 1; }
  image=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('transformers'))" 2>/dev/null || echo none)
  # Into a folder of its own, first on the path: the image's transformers 5.17 stays, the tested 5.24 wins.
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_run_site \
    "$WHEELS"/*.whl > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
  export PYTHONPATH=/tmp/gpu_run_site${PYTHONPATH:+:$PYTHONPATH}
  install_row="$(ls "$WHEELS"/*.whl | wc -l) wheels, $(( $(du -cb "$WHEELS"/*.whl | tail -1 | cut -f1) / 1048576 )) MiB, in $(( SECONDS - start )) s (the image's transformers $image, shadowed)"
  window=$(( 540 - (SECONDS - start) - 15 ))
else
  window=$(( 180 - 10 ))
fi
"$PYTHON" benchmarks/gpu_run.py --out "$OUT" --window-seconds "$window" --install-row "$install_row" "${extra[@]}" 2>&1 | tee "$OUT/run.log"
status=${PIPESTATUS[0]}
echo "all in $(( SECONDS - start )) s; logs, JSON lines and summary.md: $OUT"
exit "$status"
