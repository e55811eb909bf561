#!/bin/bash
# The previous ABCI system (Univa Grid Engine; Compute Node (V): 4 V100 per node, node-local SSD at
# $SGE_LOCALDIR): ResNet-50 on ImageNet, one rank per GPU, grid from horovod_torus.plan, resumable.
#   qsub -g GROUP -l rt_F=8 -l h_rt=12:00:00 mpi_scripts/abci_job.sh     # 8 nodes = 32 GPUs
# Resubmit the same line to resume (the output folder does not depend on the job id). Edit the module
# versions for your site; build the venv once as in docs/guide/clusters.md.
#$ -l rt_F=1
#$ -l h_rt=12:00:00
#$ -j y
#$ -cwd
set -euo pipefail
if [ "${DRY_RUN:-0}" != 1 ]; then
  source /etc/profile.d/modules.sh
  module load ${ABCI_MODULES:-python/3.11 cuda/12.2 cudnn/8.9 nccl/2.18 hpcx/2.12}   # HPC-X = Open MPI
fi

NPERNODE=${NPERNODE:-4}
: "${SGE_JOB_HOSTLIST:?not inside an ABCI (Grid Engine) job: submit with qsub (DRY_RUN=1 needs a job too)}"
NODES=$(sort -u "$SGE_JOB_HOSTLIST" | wc -l)
HOSTFILE=${TMPDIR:-/tmp}/hosts.${JOB_ID:-$$}
# the job's hostfile, made here, is removed at exit; a dry run keeps it (its printed mpirun line names it)
[ "${DRY_RUN:-0}" = 1 ] || trap 'rm -f "$HOSTFILE"' EXIT
sort -u "$SGE_JOB_HOSTLIST" | sed "s/$/ slots=$NPERNODE/" > "$HOSTFILE"
LOCAL_DIR=${SGE_LOCALDIR:-}
PLAN_PRESET=abci
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5} HOROVOD_FUSION_THRESHOLD=${HOROVOD_FUSION_THRESHOLD:-$((64 * 1024 * 1024))}
source mpi_scripts/job_common.sh
