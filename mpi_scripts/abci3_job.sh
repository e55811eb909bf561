#!/bin/bash
# ABCI 3.0 (PBS Professional; Compute Node (H): 8 H100 per node, node-local NVMe at $PBS_LOCALDIR):
# ResNet-50 on ImageNet, one rank per GPU, grid from horovod_torus.plan, resumable. Submit from the
# repository root (the job starts in $PBS_O_WORKDIR):
#   qsub -P GROUP -q rt_HF -l select=8 -l walltime=12:00:00 mpi_scripts/abci3_job.sh     # 64 GPUs
#   IMAGENET_DIR=/groups/GROUP/imagenet qsub -v IMAGENET_DIR ... ; resubmit the same line to resume.
# rt_HF = a whole node; `select=N` = N nodes. Module names and versions below are examples: `module avail`
# lists the site's (ABCI 3.0's Open MPI is HPC-X). `-v USE_SSH=1` lets mpirun start ranks on the other
# nodes over ssh, as in ABCI 3.0's MPI examples. Build the venv once as in docs/guide/clusters.md.
#PBS -q rt_HF
#PBS -l select=1
#PBS -l walltime=12:00:00
#PBS -v USE_SSH=1
#PBS -j oe
set -euo pipefail
cd "${PBS_O_WORKDIR:-$(dirname "$0")/..}"
if [ "${DRY_RUN:-0}" != 1 ]; then
  source /etc/profile.d/modules.sh
  module load ${ABCI_MODULES:-hpcx cuda/12.6 cudnn/9.5 nccl/2.23}
fi

NPERNODE=${NPERNODE:-8}
: "${PBS_NODEFILE:?not inside an ABCI 3.0 (PBS) job: submit with qsub (DRY_RUN=1 needs a job too)}"
NODES=$(sort -u "$PBS_NODEFILE" | wc -l)
HOSTFILE=${TMPDIR:-/tmp}/hosts.${PBS_JOBID:-$$}
# the job's hostfile, made here, is removed at exit; a dry run keeps it (its printed mpirun line names it)
[ "${DRY_RUN:-0}" = 1 ] || trap 'rm -f "$HOSTFILE"' EXIT
sort -u "$PBS_NODEFILE" | sed "s/$/ slots=$NPERNODE/" > "$HOSTFILE"
LOCAL_DIR=${PBS_LOCALDIR:-}
PLAN_PRESET=abci3
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5} HOROVOD_FUSION_THRESHOLD=${HOROVOD_FUSION_THRESHOLD:-$((64 * 1024 * 1024))}
source mpi_scripts/job_common.sh
