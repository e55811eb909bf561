#!/usr/bin/env bash
# Runs pytest on one rank. Rank 0 prints to the terminal; every rank also logs to $PAR_LOGDIR/rank<R>.log
# and writes its JUnit XML report to $PAR_LOGDIR/rank<R>.xml (read by tests/parallel/junit_counts.py).
# The rank comes from the launcher: OMPI_COMM_WORLD_RANK (mpirun), HOROVOD_RANK (horovodrun), PMI_RANK.
rank=${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:-${PMI_RANK:-0}}}
log="${PAR_LOGDIR:-/tmp}/rank${rank}.log"
xml="${PAR_LOGDIR:-/tmp}/rank${rank}.xml"
rm -f "$xml"          # a rank that dies before pytest writes it leaves no report, not an old one
opts=(-q -p no:cacheprovider -o addopts="" --junitxml="$xml")
if [ "$rank" = 0 ]; then
  "$PYTHON" -m pytest "${opts[@]}" "$@" 2>&1 | tee "$log"; exit "${PIPESTATUS[0]}"
else
  "$PYTHON" -m pytest "${opts[@]}" "$@" > "$log" 2>&1
fi
