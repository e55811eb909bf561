#!/usr/bin/env bash
# The one-host performance targets of issue 23, measured side by side with DEFAULT settings (the torus'
# calibrated crossover): RUNS rounds, each one all-reduce launch under mpirun at 8 B, 4 KB, 64 KB, 1 MB,
# 16 MB, 100 MB: the MPI baselines first, before Horovod starts (mpi-torus and MPI_Allreduce), then the
# torus over Horovod's process sets (torus:horovod), the torus on mpi4py (torus:mpi, what "torus" is under
# mpirun on CPU) and Horovod's flat call (horovod); the order of each group reverses between rounds. With
# GLOO=1 each round adds a horovodrun --gloo launch (torus, horovod); with TRAIN=1 one ResNet-50 training
# launch per strategy. Prints each ratio's median with min-max over the rounds, the algorithm that ran,
# its target and pass/miss (python -m horovod_torus.bench.targets), and writes OUT/targets.json; copy that
# to docs/bench_targets.json and run python -m tools.docs_results for the docs' results page.
# The crossover is calibrated by the first launch and cached in OUT/crossover-cache (HOROVOD_TORUS_CACHE_DIR),
# as a user's repeated runs would; the other rounds read it. About 8 minutes on 2 quiet cores.
#   bash mpi_scripts/bench_targets.sh                 # 4 ranks, 2x2, 5 rounds -> runs/bench_targets/
# A row whose ITERS calls last less than MIN_SECONDS (0.5) times more of them, enough for MIN_SECONDS at the
# pace of the first ITERS (the bench's --min-seconds; 10 calls of 8 B are ~11 ms of a 4-rank launch on 2 cores,
# where one lost time slice moves the ratio 2x).
# Variables: NP 4 | GRID 2x2 | RUNS 5 | ITERS 10 | MIN_SECONDS 0.5 | WARMUP 2 | OUT runs/bench_targets | SIZES 8,4K,64K,1M,16M,100M
#            GLOO 0 | TRAIN 0 | TRAIN_STEPS 5 | BATCH 8 | IMAGE 64. Horovod settings you export (HOROVOD_CYCLE_TIME
#            etc.) apply to both sides; an exported HOROVOD_TORUS_MIN_BYTES replaces the default (auto).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}; GRID=${GRID:-2x2}; OUT=${OUT:-runs/bench_targets}; ITERS=${ITERS:-10}; RUNS=${RUNS:-5}
WARMUP=${WARMUP:-2}; SIZES=${SIZES:-8,4K,64K,1M,16M,100M}; GLOO=${GLOO:-0}; TRAIN=${TRAIN:-0}
MIN_SECONDS=${MIN_SECONDS:-0.5}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore
mkdir -p "$OUT"; rm -f "$OUT"/allreduce-*.json "$OUT"/train-*.json "$OUT"/targets.json
export HOROVOD_TORUS_CACHE_DIR="$(cd "$OUT" && pwd)/crossover-cache"; rm -rf "$HOROVOD_TORUS_CACHE_DIR"
source mpi_scripts/launcher.sh
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then echo "bench_targets.sh: RUNS=$RUNS: give a number of rounds >= 1" >&2; exit 2; fi
run() { local launcher=$1 cmd; shift; launcher_command cmd "$launcher" --local --np "$NP" -- "$@"; "${cmd[@]}"; }
# filtered REGEX LAUNCHER ARGS...: one launch, its output filtered by REGEX; the script stops when the launch
# fails (its own error is on stderr), not when the filter finds nothing
filtered() {
  local regex=$1 status; shift
  set +e; run "$@" | grep -E "$regex"; status=${PIPESTATUS[0]}; set -e
  if [ "$status" -ne 0 ]; then echo "bench_targets.sh: a launch failed (exit $status): $*" >&2; exit 1; fi
}
bench=("$PYTHON" -m horovod_torus.bench --sizes "$SIZES" -n "$ITERS" -w "$WARMUP" --grid "$GRID" --min-seconds "$MIN_SECONDS")
start=$(date +%s)
for k in $(seq 1 "$RUNS"); do
  if (( k % 2 )); then order="mpi-torus,mpi,torus:horovod,torus:mpi,horovod"; pair="torus horovod"
  else order="mpi,mpi-torus,horovod,torus:mpi,torus:horovod"; pair="horovod torus"; fi
  echo "== round $k of $RUNS: all-reduce under mpirun ($order); $(( $(date +%s) - start )) s so far"
  filtered "^#.*(transport|wrong)" mpirun "${bench[@]}" --strategies "$order" --json "$OUT/allreduce-$k.json"
  if [ "$GLOO" = 1 ]; then
    echo "== round $k: all-reduce under horovodrun --gloo (${pair// /,})"
    filtered "^#.*wrong" horovodrun "${bench[@]}" --strategies "${pair// /,}" --json "$OUT/allreduce-gloo-$k.json"
  fi
  if [ "$TRAIN" = 1 ]; then
    for s in $pair; do
      echo "== round $k: ResNet-50 steps, strategy $s"
      filtered "step \(ms\)|images/s" mpirun "$PYTHON" -m horovod_torus.bench.train --strategy "$s" --grid "$GRID" \
        --batch-size "${BATCH:-8}" --image-size "${IMAGE:-64}" --steps "${TRAIN_STEPS:-5}" --warmup-steps 2 \
        --sync-iters 3 --json "$OUT/train-$s-$k.json"
    done
  fi
done
echo "== $RUNS rounds in $(( $(date +%s) - start )) s; the crossover cached: $(ls "$HOROVOD_TORUS_CACHE_DIR" 2>/dev/null | wc -l) file(s)"
"$PYTHON" -m horovod_torus.bench.targets "$OUT" "$RUNS" --json "$OUT/targets.json"
