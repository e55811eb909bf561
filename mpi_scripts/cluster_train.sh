#!/usr/bin/env bash
# ResNet-50 training throughput, torus against ring, on an emulated cluster (root): NODES x RANKS ranks,
# rails wiring, RATE per NIC and direction, horovodrun --gloo (torus on Horovod's ops, ring = Gloo's ring).
# Gradient sync dominates at 200 Mbit/s: ResNet-50 has 102 MB of fp32 gradients.
#   bash mpi_scripts/cluster_train.sh                   # 4 x 2, 200mbit, batch 2 at 32x32 -> runs/cluster_train
#   NODES=2 RATE=1gbit STEPS=5 bash mpi_scripts/cluster_train.sh
# Variables: NODES 4 | RANKS 2 | RATE 200mbit | WIRING rails | BATCH 2 | IMAGE 32 | STEPS 3 | SYNC_ITERS 2 |
#            OUT runs/cluster_train | LAUNCHER horovodrun (or mpirun) | NAME httrn
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export PATH="$(dirname "$PYTHON"):$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=900
NODES=${NODES:-4}; RANKS=${RANKS:-2}; RATE=${RATE:-200mbit}; WIRING=${WIRING:-rails}; NAME=${NAME:-httrn}
OUT=${OUT:-runs/cluster_train}; LAUNCHER=${LAUNCHER:-horovodrun}
cluster() { local sub=$1; shift; "$PYTHON" -m tools.cluster "$sub" --name "$NAME" "$@"; }
mkdir -p "$OUT"
trap 'cluster down' EXIT
trap 'exit 130' INT TERM
cluster up --nodes "$NODES" --ranks-per-node "$RANKS" --wiring "$WIRING" --rate "$RATE" || exit 1
rc=0
for s in torus ring; do
  echo "== $s ($LAUNCHER, $NODES x $RANKS, $WIRING, $RATE)"
  cluster run --launcher "$LAUNCHER" -- "$PYTHON" -m horovod_torus.bench.train --strategy "$s" \
    --batch-size "${BATCH:-2}" --image-size "${IMAGE:-32}" --steps "${STEPS:-3}" --warmup-steps 1 \
    --sync-iters "${SYNC_ITERS:-2}" --grid "${RANKS}x${NODES}" --json "$OUT/$s.json" 2>&1 | grep -v "^\[[0-9]*\]<stderr>" | tail -12 || rc=1
done
"$PYTHON" -c 'import sys; from tools.cluster.results import print_train_comparison; print_train_comparison(sys.argv[1])' "$OUT"
exit $rc
