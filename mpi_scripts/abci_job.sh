#!/bin/bash
# ABCI job script template: ResNet-50 on ImageNet, 4 V100 per node (one rank per GPU), 2D torus with a
# node per row (X = 4 GPUs of a node, Y = nodes), the paper's batch-size control (16 then 32 per GPU).
#   qsub -g GROUP -l rt_F=8 -l h_rt=12:00:00 mpi_scripts/abci_job.sh     # 8 nodes = 32 GPUs, 4x8 grid
# Edit the module versions and IMAGENET_DIR for your group. The venv is built once as in README "Install
# on a cluster" (tensorflow GPU build, Horovod with NCCL).
#$ -l rt_F=8
#$ -l h_rt=12:00:00
#$ -j y
#$ -cwd
set -euo pipefail
source /etc/profile.d/modules.sh
module load python/3.11 cuda/12.2 cudnn/8.9 nccl/2.18 hpcx/2.12     # HPC-X = ABCI's Open MPI
source .venv/bin/activate

NPERNODE=4
NODES=$(sort -u "$SGE_JOB_HOSTLIST" | wc -l)
NP=$((NODES * NPERNODE))
HOSTFILE=$(mktemp)
sort -u "$SGE_JOB_HOSTLIST" | sed "s/$/ slots=$NPERNODE/" > "$HOSTFILE"
IMAGENET_DIR=${IMAGENET_DIR:-/groups/$USER/imagenet/tfrecords}   # train-*-of-01024, validation-*-of-00128

# Batch-size control as in Mikami et al.: 16 images per GPU for the 5 warm-up epochs, then 32.
SCHEDULE="0:$((16 * NP)),5:$((32 * NP))"
export NCCL_IB_HCA=mlx5 HOROVOD_FUSION_THRESHOLD=$((64 * 1024 * 1024))
HOSTFILE=$HOSTFILE NP=$NP NPERNODE=$NPERNODE CORES_PER_RANK=10 \
  bash mpi_scripts/mpirun.sh --preset imagenet_abci --grid "${NPERNODE}x${NODES}" \
    --data-dir "$IMAGENET_DIR" --batch-schedule "$SCHEDULE" --train-examples 1281167 --val-examples 50000 \
    --output-dir "runs/imagenet-${JOB_ID:-local}" "$@"
