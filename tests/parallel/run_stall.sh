#!/usr/bin/env bash
# A rank that skips a torus call (mpi transport): every other rank must raise TorusStallError within the
# deadline + 10 s (10 s here) naming the call and the missing rank, run its cleanup, and mpirun must exit
# non-zero (MPI_Abort at exit ends the rank that left). Prints "stall: 1 passed" or fails.
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
ok=$(grep -c "^STALL OK rank [012] call 3 missing \[3\]" "$log"); cleaned=$(grep -c "^CLEANUP rank [012]" "$log")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$ok" -eq 3 ] && [ "$cleaned" -eq 3 ] && ! grep -q "^STALL WRONG" "$log" \
   && [ "$took" -lt 80 ]; then
  echo "stall: 1 passed (mpirun exit $rc after ${took} s; 3 ranks raised TorusStallError; $(grep -m1 '^STALL OK' "$log" | cut -c1-160))"
else
  echo "stall: FAILED (exit $rc after ${took} s), log $log"; tail -20 "$log"; exit 1
fi
