#!/usr/bin/env bash
# Generic multi-node launcher for keras_app.train (or any module: MODULE) under Open MPI:
#   HOSTFILE=hosts NP=16 NPERNODE=4 bash mpi_scripts/mpirun.sh --preset imagenet_abci --grid 4x4
# One rank per GPU, ranks of a node consecutive (so a torus row = a node with --grid NPERNODExNODES),
# local rank i uses GPU i (horovod_torus.devices), each rank bound to CORES_PER_RANK physical cores of the
# NUMA domain (socket) its GPU hangs off when the GPUs' NUMA nodes can be read here (nvidia-smi + sysfs),
# else to consecutive cores of the node. The command line comes from horovod_torus.launchers, which
# forwards to all ranks every variable set here named HOROVOD_*, NCCL_*, TF_*, UCX_*, OMP_*, plus PATH,
# LD_LIBRARY_PATH, PYTHONPATH, PYTHON, VIRTUAL_ENV, PYTHONWARNINGS, PYTHONUNBUFFERED, CUDA_VISIBLE_DEVICES.
#   HOSTFILE   Open MPI hostfile ("host slots=4" lines); unset: the scheduler's allocation / this machine
#   NP         total ranks (default: 4)          NPERNODE  ranks per node (default: 4)
#   CORES_PER_RANK  physical cores per rank (default: this node's physical cores / NPERNODE, from
#              lscpu -p=core,socket: hardware threads are not counted)
#   PYTHON     interpreter on every node (default: this repo's .venv)
#   MODULE     python module to run (default: keras_app.train; e.g. horovod_torus.doctor)
#   MPI_EXTRA  extra mpirun options, e.g. "--mca btl_tcp_if_include ib0"
#   DRY_RUN=1  print the mpirun command line (shell-quoted) instead of running it
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
NPERNODE=${NPERNODE:-4}
for v in NP NPERNODE; do
  if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then echo "mpirun.sh: $v=${!v}: give a number >= 1" >&2; exit 2; fi
done
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
MODULE=${MODULE:-keras_app.train}
SYSFS=${SYSFS:-/sys}

physical_cores() {   # distinct (core, socket) pairs: physical cores, not hardware threads
  if command -v lscpu >/dev/null 2>&1; then
    lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l
  else
    nproc
  fi
}

gpu_numa_nodes() {   # NUMA node of each GPU in index order ("0 0 0 0 1 1 1 1"), empty when unknown
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local bus node out=()
  while read -r bus; do
    bus=$(echo "$bus" | tr 'A-F' 'a-f' | sed -E 's/^0*([0-9a-f]{4}:)/\1/')
    node=$(cat "$SYSFS/bus/pci/devices/$bus/numa_node" 2>/dev/null || echo -1)
    [ "$node" -ge 0 ] 2>/dev/null || return 0
    out+=("$node")
  done < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null)
  echo "${out[@]:-}"
}

CORES=$(physical_cores)
CORES_PER_RANK=${CORES_PER_RANK:-$(( CORES / NPERNODE > 0 ? CORES / NPERNODE : 1 ))}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-300}

# Rank placement: ppr:K:numa when the node's first NPERNODE GPUs are spread evenly and in order over all
# of its NUMA domains (GPU i on the (i // K)-th domain, the usual numbering), so that local rank i runs
# next to GPU i; otherwise ppr:NPERNODE:node (consecutive cores).
mapping="ppr:$NPERNODE:node:PE=$CORES_PER_RANK"
read -r -a numa <<<"$(gpu_numa_nodes)"
if [ "${#numa[@]}" -ge "$NPERNODE" ]; then
  mapfile -t uniq < <(printf '%s\n' "${numa[@]:0:$NPERNODE}" | sort -un)
  domains=$(find "$SYSFS/devices/system/node" -maxdepth 1 -name 'node[0-9]*' 2>/dev/null | wc -l)
  per=$(( NPERNODE / ${#uniq[@]} ))
  ok=$(( per * ${#uniq[@]} == NPERNODE && ${#uniq[@]} == domains ))
  for ((i = 0; i < NPERNODE; i++)); do
    [ "${numa[$i]}" = "${uniq[$(( i / per ))]}" ] || ok=0
  done
  [ "$ok" = 1 ] && mapping="ppr:$per:numa:PE=$CORES_PER_RANK"
fi

hosts=()
[ -n "${HOSTFILE:-}" ] && hosts=(--hostfile "$HOSTFILE")
source mpi_scripts/launcher.sh
launcher_command cmd mpirun --np "$NP" "${hosts[@]}" --map-by "$mapping" --bind-to core \
  --extra=--report-bindings --extra="${MPI_EXTRA:-}" -- "$PYTHON" -m "$MODULE" "$@"
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
exec "${cmd[@]}"
