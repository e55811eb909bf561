#!/usr/bin/env bash
# A rank that skips a torus call (mpi transport): every other rank must stop within the deadline (10 s here)
# with a message naming the call, and mpirun must exit non-zero. Prints "stall: 1 passed" or fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
log=$(mktemp /tmp/horovod-torus-stall.XXXXXX)
source mpi_scripts/launcher.sh
launcher_command cmd mpirun --local --np 4 -x HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=10 -x PYTHONPATH="$PWD" \
  -- "$PYTHON" tests/parallel/test_stall_mpi.py
start=$(date +%s)
timeout 90 "${cmd[@]}" > "$log" 2>&1 < /dev/null
rc=$?; took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "has waited 10 s for the other ranks" "$log" && [ "$took" -lt 80 ]; then
  echo "stall: 1 passed (mpirun exit $rc after ${took} s; message: $(grep -m1 'has waited' "$log" | cut -c1-160))"
else
  echo "stall: FAILED (exit $rc after ${took} s), log $log"; tail -20 "$log"; exit 1
fi
