# Shared body of the job templates (abci3_job.sh: PBS Professional, abci_job.sh: UGE, slurm_job.sh:
# Slurm); sourced by them after they set, from their scheduler:
#   NODES        nodes of the job                 NPERNODE  GPUs (= ranks) per node
#   HOSTFILE     Open MPI hostfile ("host slots=N"), or empty when mpirun reads the allocation itself
#   LOCAL_DIR    node-local SSD of the job (same path on every node), or empty
#   PLAN_PRESET  horovod_torus.plan preset of the machine (abci3, abci), or empty (then --nodes etc.)
# and runs ResNet-50 on ImageNet (preset imagenet_abci: the paper's recipe, mixed_float16), one rank per GPU:
#   1. the grid: GRID if set (XxY or ring), else `python -m horovod_torus.plan ... --print-grid`; an XxY
#      whose X*Y is not the rank count stops the script (exit 2, naming the grids that fit);
#   2. staging (STAGE=1, the default when LOCAL_DIR is set): one process per node copies the TFRecord
#      shards its ranks read to LOCAL_DIR/imagenet (`python -m keras_app.data stage`);
#   3. training: mpi_scripts/mpirun.sh with --output-dir OUTPUT_DIR --resume --verbose 2, so a resubmitted
#      job continues after the newest checkpoint of the same OUTPUT_DIR (a stable name, not the job id).
# Variables (all optional): IMAGENET_DIR (shared train-*-of-01024 / validation-*-of-00128 folder),
#   OUTPUT_DIR (runs/imagenet-$NODES-nodes), GRID, STAGE, PYTHON (.venv/bin/python), DRY_RUN=1 (print the
#   mpirun lines instead of running them). Arguments of the job script go on to keras_app.train.
# shellcheck shell=bash

PYTHON=${PYTHON:-$PWD/.venv/bin/python}
source mpi_scripts/launcher.sh
IMAGENET_DIR=${IMAGENET_DIR:-/groups/${USER:-$(id -un)}/imagenet/tfrecords}
OUTPUT_DIR=${OUTPUT_DIR:-runs/imagenet-$NODES-nodes}
NP=$((NODES * NPERNODE))

if [ -n "${GRID:-}" ]; then
  choice=$GRID
elif [ -n "${PLAN_PRESET:-}" ]; then
  choice=$("$PYTHON" -m horovod_torus.plan --preset "$PLAN_PRESET" --nodes "$NODES" \
           --ranks-per-node "$NPERNODE" --print-grid)
else
  choice="${NPERNODE}x${NODES}"          # a node per torus row
fi
# The grid must fit the job (X*Y = NP) before anything runs, DRY_RUN=1 included: a grid that does not fit
# would fail only once the job has waited in the queue and started.
if [ "$choice" != ring ]; then
  if ! [[ "$choice" =~ ^[0-9]+[xX][0-9]+$ ]] || (( 10#${choice%%[xX]*} * 10#${choice#*[xX]} != NP )); then
    fits=(); for ((i = 1; i <= NP; i++)); do (( NP % i )) || fits+=("${i}x$((NP / i))"); done
    echo "job: grid $choice does not fit the job's $NP ranks ($NODES nodes x $NPERNODE per node): X*Y must be" \
         "$NP; valid grids: ${fits[*]} (GRID=${NPERNODE}x${NODES}: a node per row), or GRID=ring" >&2
    exit 2
  fi
fi
if [ "$choice" = ring ]; then topology=(--strategy horovod); else topology=(--strategy torus --grid "$choice"); fi

data_dir=$IMAGENET_DIR
if [ "${STAGE:-1}" = 1 ] && [ -n "${LOCAL_DIR:-}" ]; then
  data_dir=$LOCAL_DIR/imagenet
  hosts=()
  [ -n "${HOSTFILE:-}" ] && hosts=(--hostfile "$HOSTFILE")
  launcher_command stage mpirun --np "$NODES" "${hosts[@]}" --map-by ppr:1:node -- \
    "$PYTHON" -m keras_app.data stage --data-dir "$IMAGENET_DIR" --dest "$data_dir" \
    --world-size "$NP" --ranks-per-node "$NPERNODE"
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "${stage[@]}"; echo; else "${stage[@]}"; fi
fi

# Batch-size control as in Mikami et al.: 16 images per GPU for the 5 warm-up epochs, then 32.
SCHEDULE="0:$((16 * NP)),5:$((32 * NP))"
echo "job: $NODES nodes x $NPERNODE GPUs = $NP ranks, topology ${topology[*]}, data $data_dir, output $OUTPUT_DIR" >&2
HOSTFILE=${HOSTFILE:-} NP=$NP NPERNODE=$NPERNODE bash mpi_scripts/mpirun.sh \
  --preset imagenet_abci "${topology[@]}" --data-dir "$data_dir" --batch-schedule "$SCHEDULE" \
  --train-examples 1281167 --output-dir "$OUTPUT_DIR" --resume --verbose 2 "$@"
