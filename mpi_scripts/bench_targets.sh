#!/usr/bin/env bash
# The performance targets, measured side by side: RUNS rounds, each round one all-reduce launch (the MPI
# baselines first, before Horovod starts; then torus and ring, their order alternating between rounds) at
# 8 B, 4 KB, 64 KB, 1 MB, 16 MB, 100 MB, then one ResNet-50 training launch per strategy (order
# alternating) through the DistributedOptimizer path. Prints each ratio's median with min-max over the
# rounds, its target and pass/miss.
#   bash mpi_scripts/bench_targets.sh                 # 4 ranks, 2x2, 3 rounds -> runs/bench_targets/
# Variables: NP 4 | GRID 2x2 | RUNS 3 | ITERS 10 | OUT runs/bench_targets | TRAIN_STEPS 5 | BATCH 8 | IMAGE 64
#            SIZES 8,4K,64K,1M,16M,100M | HOROVOD_TORUS_MIN_BYTES (the torus' crossover; both sides see the
#            same Horovod settings: HOROVOD_CYCLE_TIME etc. apply to torus and ring alike)
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}; GRID=${GRID:-2x2}; OUT=${OUT:-runs/bench_targets}; ITERS=${ITERS:-10}; RUNS=${RUNS:-3}
SIZES=${SIZES:-8,4K,64K,1M,16M,100M}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore
source mpi_scripts/launcher.sh
run() { local cmd; launcher_command cmd mpirun --local --np "$NP" -- "$@"; "${cmd[@]}"; }   # NP ranks here
mkdir -p "$OUT"
for k in $(seq 1 "$RUNS"); do
  if (( k % 2 )); then order="mpi,mpi-torus,torus,ring"; pair="torus ring"; else order="mpi,mpi-torus,ring,torus"; pair="ring torus"; fi
  echo "== round $k of $RUNS: all-reduce ($order)"
  run "$PYTHON" -m horovod_torus.bench --sizes "$SIZES" -n "$ITERS" -w 3 --grid "$GRID" \
    --strategies "$order" --json "$OUT/allreduce-$k.json" | tail -n 3
  for s in $pair; do
    echo "== round $k: ResNet-50 steps, strategy $s"
    run "$PYTHON" -m horovod_torus.bench.train --strategy "$s" --grid "$GRID" --batch-size "${BATCH:-8}" \
      --image-size "${IMAGE:-64}" --steps "${TRAIN_STEPS:-5}" --warmup-steps 2 --sync-iters 3 \
      --json "$OUT/train-$s-$k.json" | grep -E "step \(ms\)|images/s" || true
  done
done
"$PYTHON" -m horovod_torus.bench.targets "$OUT" "$RUNS"
