#!/usr/bin/env bash
# Runs every multi-rank launch listed in tests/parallel/launches.tsv, for real, under mpirun (MPI
# controller) or horovodrun (Gloo controller), and prints how many tests ran on each launcher. The counts
# come from the JUnit XML file every rank writes (tests/parallel/rank_pytest.sh, junit_counts.py): rank 0's
# are reported; a launch fails when the launcher exits non-zero, or any rank's file is missing or reports a
# failure or an error, or rank 0 passed no test.
# Usage: tests/parallel/run_all.sh [FILTER]   (FILTER: a regex on the launch row, e.g. "horovodrun.*2x2")
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
export PATH="$(dirname "$PYTHON"):$PATH"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore OMPI_MCA_rmaps_base_oversubscribe=1
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-120}
LAUNCH_TIMEOUT=${LAUNCH_TIMEOUT:-900}
filter=${1:-.}
logroot=$(mktemp -d /tmp/horovod-torus-parallel.XXXXXX)
export HOROVOD_TORUS_CACHE_DIR="$logroot/crossover-cache"   # launches with the calibrated crossover: a fresh cache
declare -A passed failed launches
total_fail=0; total_pass=0; bad_launches=0
n=0
while IFS=$'\t' read -r launcher np grid targets extra_env; do
  [[ -z "$launcher" || "$launcher" == \#* ]] && continue
  [[ "$launcher	$np	$grid	$targets	$extra_env" =~ $filter ]] || continue
  n=$((n + 1)); logdir="$logroot/$n-$launcher-np$np-$grid"; mkdir -p "$logdir"
  echo "== $launcher -np $np grid $grid ${extra_env:+[$extra_env] }: $targets"
  xs=(); for kv in $extra_env; do xs+=(-x "$kv"); done
  case "$launcher" in   # the command line from horovod_torus.launchers: every rank here
    mpirun|horovodrun) mapfile -d '' cmd < <("$PYTHON" -m horovod_torus.launchers "$launcher" --print0 --local \
                 --np "$np" -x HOROVOD_TORUS_GRID="$grid" -x PAR_LOGDIR="$logdir" "${xs[@]}" \
                 -- bash tests/parallel/rank_pytest.sh $targets) ;;
    *) echo "unknown launcher '$launcher' in launches.tsv" >&2; exit 2 ;;
  esac
  timeout --kill-after=30 "$LAUNCH_TIMEOUT" "${cmd[@]}" > "$logdir/launcher.log" 2>&1 < /dev/null
  rc=$?
  counts=$("$PYTHON" tests/parallel/junit_counts.py "$logdir" "$np"); xml_rc=$?
  read -r p f _ summary <<<"$(head -n 1 <<<"$counts")"
  [[ "$p" =~ ^[0-9]+$ && "$f" =~ ^[0-9]+$ ]] || { p=0; f=0; summary="no JUnit XML counts ($counts)"; }
  if [ "$rc" -ne 0 ] || [ "$xml_rc" -ne 0 ]; then
    bad_launches=$((bad_launches + 1))
    echo "   FAILED (exit $rc): logs in $logdir"; tail -n +2 <<<"$counts" | sed "s|^|   |"
    tail -n 30 "$logdir/launcher.log"
    for r in "$logdir"/rank*.log; do grep -E "^(FAILED|ERROR)|Error" "$r" | head -5 | sed "s|^|   $(basename "$r"): |"; done
  fi
  echo "   rank 0: ${summary:-no pytest summary}"
  passed[$launcher]=$(( ${passed[$launcher]:-0} + p )); failed[$launcher]=$(( ${failed[$launcher]:-0} + f ))
  launches[$launcher]=$(( ${launches[$launcher]:-0} + 1 ))
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
done < tests/parallel/launches.tsv
echo "== multi-rank tests per launcher (each test ran on every rank of its launch)"
for l in "${!launches[@]}"; do
  echo "   $l: ${launches[$l]} launches, ${passed[$l]} tests passed, ${failed[$l]} failed"
done
echo "parallel: $total_pass passed, $total_fail failed (rank 0), $bad_launches launch(es) failed on some rank"
[ "$bad_launches" -eq 0 ] && [ "$total_fail" -eq 0 ] && [ "$total_pass" -gt 0 ]
