#!/usr/bin/env bash
# Runs pytest on one rank. Rank 0 prints to the terminal; every rank also logs to $PAR_LOGDIR/rank<R>.log.
rank=${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:-${PMI_RANK:-0}}}
log="${PAR_LOGDIR:-/tmp}/rank${rank}.log"
if [ "$rank" = 0 ]; then
  "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" "$@" 2>&1 | tee "$log"; exit "${PIPESTATUS[0]}"
else
  "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" "$@" > "$log" 2>&1
fi
