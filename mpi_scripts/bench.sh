#!/usr/bin/env bash
# The all-reduce sweep behind the README table: 4 B .. 128 MB (x2 per row), every strategy (torus,
# horovod, mpi-torus, mpi), NP ranks under mpirun, writing the JSON and the plot.
#   bash mpi_scripts/bench.sh                      # 4 ranks on this machine -> docs/bench_allreduce.{json,png}
#   HOSTFILE=hosts NP=16 GRID=4x4 OUT=runs/bench bash mpi_scripts/bench.sh -d float32
# Variables (all optional):
#   NP 4 | GRID 2x2 (X ranks per row; a node per row on a cluster) | MINBYTES 4 | MAXBYTES 128M | FACTOR 2
#   ITERS 5 | WARMUP 2 | OUT docs/bench_allreduce (path prefix of .json and .png) | HOSTFILE (Open MPI hostfile)
#   PYTHON (default: this repo's .venv) | MPI_EXTRA (extra mpirun options)
# Extra arguments go to `python -m horovod_torus.bench` (e.g. --strategies torus horovod, --torus-transport horovod).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
GRID=${GRID:-2x2}
OUT=${OUT:-docs/bench_allreduce}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-300}
if [ -n "${HOSTFILE:-}" ]; then placement=(--hostfile "$HOSTFILE"); else placement=(--oversubscribe); fi
source mpi_scripts/launcher.sh
launcher_command cmd mpirun --np "$NP" "${placement[@]}" --extra="${MPI_EXTRA:-}" -- "$PYTHON" -m horovod_torus.bench \
  -b "${MINBYTES:-4}" -e "${MAXBYTES:-128M}" -f "${FACTOR:-2}" -n "${ITERS:-5}" -w "${WARMUP:-2}" -c 1 \
  --grid "$GRID" --json "$OUT.json" --plot "$OUT.png" "$@"
mkdir -p "$(dirname "$OUT")"
exec "${cmd[@]}"
