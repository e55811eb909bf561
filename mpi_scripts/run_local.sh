#!/usr/bin/env bash
# Train keras_app on N ranks of this machine under mpirun (Open MPI), e.g.
#   bash mpi_scripts/run_local.sh 4 --preset fashion_mnist_demo --grid 2x2
# Every argument after N goes to `python -m keras_app.train`, which rounds a preset's global batches down
# to multiples of N unless --batch-schedule is given (as for `make demo NP=N`). Ranks are not bound to
# cores (N may exceed the core count: --oversubscribe); each rank's TensorFlow thread pools come from the
# preset (--intra-op-threads/--inter-op-threads). Every rank prints to this terminal (the app prints on
# rank 0 only). Every rank allocates through
# tcmalloc (LD_PRELOAD of TCMALLOC, default Debian's libtcmalloc-minimal4, which make setup installs) when
# that file exists and LD_PRELOAD is not set; TCMALLOC= (empty) keeps glibc's malloc. Why: docs/notes/tcmalloc.md.
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-}
if ! [[ $np =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bash mpi_scripts/run_local.sh NP [keras_app.train arguments...]  (NP: ranks, a number >= 1; got '${np}')" >&2
  exit 2
fi
shift
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-300}
TCMALLOC=${TCMALLOC-/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4}
preload=()
if [[ -z ${LD_PRELOAD:-} && -n $TCMALLOC && -r $TCMALLOC ]]; then preload=(-x "LD_PRELOAD=$TCMALLOC"); fi
source mpi_scripts/launcher.sh
launcher_command cmd mpirun --local --np "$np" --mca mpi_yield_when_idle 1 "${preload[@]}" -- "$PYTHON" -m keras_app.train "$@"
start=$(date +%s)
"${cmd[@]}"
echo "run_local.sh: $np ranks finished in $(( $(date +%s) - start )) s"
