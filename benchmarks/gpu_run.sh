#!/usr/bin/env bash
# Everything a GPU should run, in one window of ≤ 9 minutes: the wheels it brings installed, the GPU tier, then the
# benchmarks (benchmarks/gpu_run.py: 8B-shape DPR steps at the recipe's generation settings, one generate call at
# batch 2 and at the rollout batch, the 24 GiB fit on a capped card, DPR / GRPO in alternating pairs), each stage's log
# and JSON lines under one folder, and a summary table at the end.
#
#   bash benchmarks/gpu_run.sh --download   # here, with a package index: the wheels (trl, datasets, dill,
#                                           # multiprocess, transformers 5.24 (the tested one; the GPU image has
#                                           # 5.17), trl_dpr) into benchmarks/gpu_wheels/ and bitsandbytes' into
#                                           # .gpu_carry/a/ (both git-ignored): a call carries ≤ 64 MiB with the tree,
#                                           # so the first call takes bitsandbytes to /tmp/wheels_a (DEVELOPERS.md)
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
PINS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 bitsandbytes==0.50.2 transformers==5.24.0
      pytest-xdist==3.8.0 execnet==2.1.2)  # xdist: the tier's tests side by side (gpu_run.py)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

FIRST_CARRY=.gpu_carry/a   # bitsandbytes' wheel (41 MiB): the first of two calls, copied to /tmp/wheels_a there
mib_of() { echo $(( $(du -cb "$@" 2>/dev/null | tail -1 | cut -f1) / 1048576 )); }

download() {  # the GPU image: Python 3.12, x86-64, with torch, accelerate, peft, pandas, pyarrow, xxhash, pytest
  rm -rf "$WHEELS" "$FIRST_CARRY" && mkdir -p "$WHEELS" "$FIRST_CARRY"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" --dest "$WHEELS" "${PINS[@]}" || exit 1
  "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$WHEELS" . || exit 1
  mv "$WHEELS"/bitsandbytes-*.whl "$FIRST_CARRY"/
  local exclude; exclude=$(git rev-parse --git-path info/exclude)  # a linked worktree's .git is a file
  grep -qx /.gpu_carry/ "$exclude" 2>/dev/null || { mkdir -p "$(dirname "$exclude")" && echo /.gpu_carry/ >> "$exclude"; }
  ls -l "$FIRST_CARRY" "$WHEELS"
  # One call carries the working tree (tracked and untracked-not-ignored files) plus its carry paths: ≤ 64 MiB each.
  local tree; tree=$(mib_of $( { git ls-files; git ls-files --others --exclude-standard; } | sort -u ))
  local first second; first=$(mib_of "$FIRST_CARRY"/*.whl); second=$(mib_of "$WHEELS"/*.whl)
  echo "first call: $FIRST_CARRY, $first MiB + the tree $tree MiB; second call: $WHEELS, $second MiB + the tree"
  (( first + tree <= 62 && second + tree <= 62 )) || { echo "a call would be over 64 MiB: carry less" >&2; exit 1; }
}

check_wheels() {  # every pinned package and trl_dpr, in $WHEELS or in the first call's /tmp/wheels_a
  local missing=()
  for pin in "${PINS[@]}" trl_dpr==; do
    local name=${pin%%==*}; name=${name//-/_}  # a wheel file names pytest-xdist pytest_xdist
    # compgen, not ls: ls fails when either folder lacks the wheel, and each wheel is in only one of them
    compgen -G "$WHEELS/$name-*.whl" >/dev/null || compgen -G "/tmp/wheels_a/$name-*.whl" >/dev/null || missing+=("$name")
  done
  (( ${#missing[@]} == 0 )) || { echo "no wheel for ${missing[*]} in $WHEELS or /tmp/wheels_a: run bash benchmarks/gpu_run.sh --download here, then the two calls in DEVELOPERS.md" >&2; exit 1; }
}

mode=gpu; extra=()
while (( $# )); do
  case "$1" in
    --download) download; exit ;;
    --smoke) mode=smoke; extra+=(--smoke) ;;
    --skip-tier) extra+=(--skip-tier) ;;
    --stages) extra+=(--stages "${2:?--stages needs a comma-separated list: bash benchmarks/gpu_run.sh --stages dpr_over_grpo,fit_24_gib}"); shift ;;
    *) echo "usage: bash benchmarks/gpu_run.sh [--download | --smoke] [--skip-tier] [--stages a,b,...]" >&2; exit 2 ;;
  esac
  shift
done

start=$SECONDS
OUT=${GPU_RUN_OUT:-benchmarks/results/gpu_run-$(date -u +%Y%m%d-%H%M%S)$([[ $mode == smoke ]] && echo -smoke)}
mkdir -p "$OUT"
install_row="smoke: the environment's own packages, nothing installed"
if [[ $mode == gpu ]]; then
  "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA here: bash benchmarks/gpu_run.sh --smoke runs on the CPU')" || exit 1
  check_wheels
  image=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('transformers'))" 2>/dev/null || echo none)
  # Into a folder of its own, first on the path: the image's transformers 5.17 stays, the tested 5.24 wins.
  "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_run_site \
    "$WHEELS"/*.whl $(ls /tmp/wheels_a/*.whl 2>/dev/null) > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
  export PYTHONPATH=/tmp/gpu_run_site${PYTHONPATH:+:$PYTHONPATH}
  install_row="$(ls "$WHEELS"/*.whl /tmp/wheels_a/*.whl 2>/dev/null | wc -l) wheels, $(mib_of "$WHEELS"/*.whl /tmp/wheels_a/*.whl) MiB, in $(( SECONDS - start )) s (the image's transformers $image, shadowed)"
  window=$(( 540 - (SECONDS - start) - 15 ))
else
  window=$(( 180 - 10 ))
fi
"$PYTHON" benchmarks/gpu_run.py --out "$OUT" --window-seconds "$window" --install-row "$install_row" "${extra[@]}" 2>&1 | tee "$OUT/run.log"
status=${PIPESTATUS[0]}
echo "all in $(( SECONDS - start )) s; logs, JSON lines and summary.md: $OUT"
exit "$status"
