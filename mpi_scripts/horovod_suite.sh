#!/usr/bin/env bash
# Horovod 0.28.1's own TensorFlow test file against horovod_torus, with only its import line swapped.
#   git clone --branch v0.28.1 https://github.com/horovod/horovod /path/to/horovod   (not shipped here)
#   bash mpi_scripts/horovod_suite.sh /path/to/horovod [pytest args, e.g. -k allreduce]
# Copies test/parallel/test_tensorflow.py, test/parallel/base_test_tensorflow.py and test/utils/common.py
# to a temporary directory, replaces `import horovod.tensorflow as hvd` by `import horovod_torus.tensorflow
# as hvd` (STOCK=1 keeps Horovod's), and runs it on NP ranks (4: a 2x2 torus) under mpirun; each rank's
# log and JUnit XML are kept in OUT (default runs/horovod_suite). About 30 minutes on 2 cores.
set -euo pipefail
src=${1:?usage: horovod_suite.sh HOROVOD_CHECKOUT [pytest args...]}; shift
root=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-4}; OUT=${OUT:-$root/runs/horovod_suite}; PYTHON=${PYTHON:-$root/.venv/bin/python}
for f in test/parallel/test_tensorflow.py test/parallel/base_test_tensorflow.py test/utils/common.py; do
  [ -f "$src/$f" ] || { echo "ERROR: $src/$f not found: pass a checkout of Horovod v0.28.1" >&2; exit 2; }
done
mkdir -p "$OUT"; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp "$src/test/parallel/test_tensorflow.py" "$src/test/parallel/base_test_tensorflow.py" "$src/test/utils/common.py" "$work/"
echo 'from unittest.mock import *  # common.py imports the old `mock` package' > "$work/mock.py"
[ -n "${STOCK:-}" ] || sed -i 's/^import horovod.tensorflow as hvd$/import horovod_torus.tensorflow as hvd/' "$work/test_tensorflow.py"
grep -m1 "^import horovod" "$work/test_tensorflow.py"
export PYTHONPATH="$root:$work" TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-60}
args=$(printf '%q ' "$@")
source "$root/mpi_scripts/launcher.sh"
launcher_command cmd mpirun --local --np "$NP" -- \
  bash -c "exec '$PYTHON' -m pytest -p no:cacheprovider -q -rf --junitxml='$OUT'/junit-\$OMPI_COMM_WORLD_RANK.xml $args test_tensorflow.py > '$OUT'/rank-\$OMPI_COMM_WORLD_RANK.log 2>&1"
cd "$work"
set +e
"${cmd[@]}"
rc=$?
tail -n 12 "$OUT/rank-0.log"
echo "horovod_suite.sh: exit $rc; logs in $OUT"
exit $rc
