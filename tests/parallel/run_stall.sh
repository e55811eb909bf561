#!/usr/bin/env bash
# Stalls on the mpi transport end with a Python exception on every waiting rank, never a hang:
#  1. numpy API: rank 3 skips a torus call; ranks 0-2 must raise TorusStallError within the deadline + 10 s
#     (10 s here) naming call 3 and rank 3, and run their cleanup;
#  2. Keras: TerminateOnNaN stops rank 0 only (no StopTogetherCallback); ranks 1-3 must get fit's error naming
#     rank 0 within the deadline + 10 s, and their finally blocks must run;
#  3. numpy API, column_algorithm="tree": rank 3 stops inside the column phase (after the call's check);
#     ranks 0-2, blocked in the tree's point-to-point steps, must raise TorusStallError naming rank 3.
# In all, mpirun must exit non-zero (MPI_Abort at exit ends the rank that left). Prints "stall: 3 passed".
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
source mpi_scripts/launcher.sh
passed=0

# run_case SCRIPT OK_REGEX OK_COUNT FINALLY_REGEX FINALLY_COUNT
run_case() {
  local script=$1 ok_re=$2 ok_n=$3 fin_re=$4 fin_n=$5 log dir start rc took ok fin
  log=$(mktemp /tmp/horovod-torus-stall.XXXXXX); dir=$(mktemp -d /tmp/horovod-torus-stall.XXXXXX)
  launcher_command cmd mpirun --local --np 4 -x HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=10 -x PYTHONPATH="$PWD" \
    -x STALL_DIR="$dir" -- "$PYTHON" "$script"
  start=$(date +%s)
  timeout 120 "${cmd[@]}" > "$log" 2>&1 < /dev/null
  rc=$?; took=$(( $(date +%s) - start ))
  cat "$dir"/rank*.txt > "$dir/all" 2>/dev/null   # one file per rank: the launcher's output interleaves
  ok=$(grep -cE "$ok_re" "$dir/all"); fin=$(grep -cE "$fin_re" "$dir/all")
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$ok" -eq "$ok_n" ] && [ "$fin" -eq "$fin_n" ] \
     && ! grep -qE "^(KERAS |COLUMN )?STALL WRONG" "$dir/all" && [ "$took" -lt 100 ]; then
    passed=$((passed + 1))
    echo "   $script: passed (mpirun exit $rc after ${took} s; $(grep -m1 -E "$ok_re" "$dir/all" | cut -c1-120))"
  else
    echo "   $script: FAILED (exit $rc after ${took} s, $ok/$ok_n raised, $fin/$fin_n cleaned up), log $log"
    tail -20 "$log"
  fi
}

run_case tests/parallel/test_stall_mpi.py "^STALL OK rank [012] call 3 missing \[3\]" 3 "^CLEANUP rank [012]" 3
run_case tests/parallel/test_stall_keras.py "^KERAS STALL OK rank [123]" 3 "^FINALLY rank [0123]" 4
run_case tests/parallel/test_stall_column.py "^COLUMN STALL OK rank [012] call 2 missing \[3\]" 3 "^COLUMN CLEANUP rank [012]" 3
echo "stall: $passed passed"
[ "$passed" -eq 3 ]
