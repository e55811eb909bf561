#!/usr/bin/env bash
# The elastic torus on one host (tests/parallel/test_elastic.py): an uninterrupted 4-rank run, then a run
# that loses a "node" (2 ranks, host name 127.0.0.1 or localhost) mid-epoch and gets it back. Each run is
# a real elastic horovodrun --gloo launch; pytest runs here, not under a launcher. About 2-3 minutes.
# Prints "elastic: N passed, M failed". With --unless-cluster (make test) it runs only where tests/cluster/run.sh
# cannot (no root or no network namespaces), since that runs the same scenario on two emulated nodes.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
source tests/cluster/can_run.sh
if [ "${1:-}" = --unless-cluster ] && cluster_can_run; then   # make test: the scenario runs once
  echo "elastic (one host): not run: tests/cluster/run.sh runs the same scenario (tests/elastic_scenario.py)" \
       "on two emulated nodes here; bash tests/parallel/run_elastic.sh runs it on one host"
  exit 0
fi
xml=$(mktemp /tmp/horovod-torus-elastic.XXXXXX.xml)
timeout --kill-after=30 900 "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$xml" tests/parallel/test_elastic.py
rc=$?
read -r p f _ <<<"$("$PYTHON" tests/parallel/junit_counts.py --file "$xml")"
echo "elastic: $p passed, $f failed"
[ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -eq 2 ]
