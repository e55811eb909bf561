#!/bin/bash
# Slurm with Open MPI (built with Slurm support, so mpirun reads the allocation): ResNet-50 on ImageNet,
# one rank per GPU, resumable. Submit from the repository root:
#   sbatch -A ACCOUNT -p PARTITION -N 8 --ntasks-per-node=4 --gpus-per-node=4 mpi_scripts/slurm_job.sh
# Ranks per node = GPUS_PER_NODE, default $SLURM_NTASKS_PER_NODE (one task slot per GPU: mpirun places
# that many ranks per node); node-local staging when the site
# sets LOCAL_DIR (e.g. LOCAL_DIR=$SLURM_TMPDIR or /local/$SLURM_JOB_ID); the grid comes from
# horovod_torus.plan when PLAN_PRESET or GRID is set, else a node per torus row. Load your site's
# modules (MODULES="openmpi cuda cudnn nccl") or activate them before sbatch.
#SBATCH --job-name=imagenet-torus
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --exclusive
#SBATCH --time=12:00:00
#SBATCH --output=imagenet-torus-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
if [ "${DRY_RUN:-0}" != 1 ] && [ -n "${MODULES:-}" ]; then
  source /etc/profile.d/modules.sh
  module load $MODULES
fi

NPERNODE=${GPUS_PER_NODE:-${SLURM_NTASKS_PER_NODE:-4}}
NODES=${SLURM_JOB_NUM_NODES:?not inside a Slurm job: submit with sbatch}
HOSTFILE=
LOCAL_DIR=${LOCAL_DIR:-${SLURM_TMPDIR:-}}
PLAN_PRESET=${PLAN_PRESET:-}
source mpi_scripts/job_common.sh
