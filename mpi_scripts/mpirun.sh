#!/usr/bin/env bash
# Generic multi-node launcher for keras_app.train under Open MPI:
#   HOSTFILE=hosts NP=16 NPERNODE=4 bash mpi_scripts/mpirun.sh --preset imagenet_abci --grid 4x4
# One rank per GPU (or per socket on CPU), ranks of a node consecutive (so a torus row = a node with
# --grid NPERNODExNODES), each bound to its share of cores, NUMA-aware. Every variable below that is set
# in the caller's environment is exported to all ranks with -x.
#   HOSTFILE   Open MPI hostfile ("host slots=4" lines); unset: this machine only
#   NP         total ranks (default: 4)          NPERNODE  ranks per node (default: 4)
#   CORES_PER_RANK  cores bound to each rank (default: this node's cores / NPERNODE)
#   PYTHON     interpreter on every node (default: this repo's .venv)
#   MPI_EXTRA  extra mpirun options, e.g. "--mca btl_tcp_if_include ib0"
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
NPERNODE=${NPERNODE:-4}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
CORES_PER_RANK=${CORES_PER_RANK:-$(( $(nproc) / NPERNODE > 0 ? $(nproc) / NPERNODE : 1 ))}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-300}
exports=()
for v in PATH LD_LIBRARY_PATH PYTHONPATH TF_CPP_MIN_LOG_LEVEL HOROVOD_STALL_SHUTDOWN_TIME_SECONDS \
         HOROVOD_TORUS_GRID HOROVOD_FUSION_THRESHOLD HOROVOD_CYCLE_TIME HOROVOD_TIMELINE \
         NCCL_DEBUG NCCL_IB_HCA NCCL_SOCKET_IFNAME CUDA_VISIBLE_DEVICES; do
  [ -n "${!v:-}" ] && exports+=(-x "$v")
done
hosts=()
[ -n "${HOSTFILE:-}" ] && hosts=(--hostfile "$HOSTFILE")
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
# shellcheck disable=SC2086
exec mpirun "${root[@]}" "${hosts[@]}" -np "$NP" \
  --map-by "ppr:$NPERNODE:node:PE=$CORES_PER_RANK" --bind-to core --report-bindings \
  "${exports[@]}" ${MPI_EXTRA:-} \
  "$PYTHON" -m keras_app.train "$@"
