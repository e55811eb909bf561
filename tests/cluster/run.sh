#!/usr/bin/env bash
# Multi-host test on an emulated cluster: 2 nodes x 2 ranks, unshaped. Runs
# tests/cluster/test_multihost.py on every rank in the rails wiring under mpirun, then under horovodrun
# --gloo, and removes the cluster afterwards whatever happens (trap). Counts come from every rank's JUnit
# XML (tests/parallel/junit_counts.py): a launch fails when any rank's file is missing or reports a
# failure or an error. Needs root (network namespaces): without it the test is
# skipped with a message, unless CLUSTER_TEST=require (then it fails). Then the elastic test on its own
# emulated 2 x 2 cluster (tests/cluster/test_elastic_cluster.py: a node lost and added back), about 1-3 min.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHON="${PYTHON:-$PWD/.venv/bin/python}"
export PATH="$(dirname "$PYTHON"):$PATH"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=120
unset HOROVOD_TORUS_GRID HOROVOD_TORUS_TRANSPORT HOROVOD_TORUS_BACKEND
export HOROVOD_TORUS_MIN_BYTES=0   # the test checks the three phases across nodes, at every size
NAME=${CLUSTER_TEST_NAME:-httest}
cluster() { local sub=$1; shift; "$PYTHON" -m tools.cluster "$sub" --name "$NAME" "$@"; }
source tests/cluster/can_run.sh
if ! cluster_can_run; then
  msg="cluster test: needs root and iproute2/util-linux (network namespaces)"
  if [ "${CLUSTER_TEST:-}" = require ]; then echo "FAILED: $msg" >&2; exit 1; fi
  echo "SKIPPED: $msg"; exit 0
fi
logroot=$(mktemp -d /tmp/horovod-torus-cluster-test.XXXXXX)
trap 'cluster down >/dev/null 2>&1; ip netns list | grep -q "^$NAME-" && echo "cluster test: namespaces left: $(ip netns list)" >&2' EXIT
trap 'exit 130' INT TERM
cluster down >/dev/null 2>&1  # a leftover from an interrupted run
fail=0; total=0; nodes=2; per_node=2
# the rails wiring (one NIC per rank) under both launchers
for launcher in mpirun horovodrun; do
  wiring=rails
  cluster down >/dev/null 2>&1
  cluster up --nodes "$nodes" --ranks-per-node "$per_node" --wiring "$wiring" --rate none --subnet 10.214.0.0/16 || exit 1
  export PAR_LOGDIR="$logroot/$launcher"; mkdir -p "$PAR_LOGDIR"
  echo "== cluster test ($NAME: 2 nodes x 2 ranks, $wiring wiring) under $launcher"
  cluster run --launcher "$launcher" --timeout 300 -- bash tests/parallel/rank_pytest.sh tests/cluster/test_multihost.py \
    > "$PAR_LOGDIR/launcher.log" 2>&1
  rc=$?
  counts=$("$PYTHON" tests/parallel/junit_counts.py "$PAR_LOGDIR" $((nodes * per_node))); xml_rc=$?
  read -r p _ _ summary <<<"$(head -n 1 <<<"$counts")"
  [[ "$p" =~ ^[0-9]+$ ]] || { p=0; summary="no JUnit XML counts ($counts)"; }
  echo "   rank 0: ${summary:-no pytest summary} (exit $rc)"
  if [ "$rc" -ne 0 ] || [ "$xml_rc" -ne 0 ]; then
    fail=1; echo "   FAILED: logs in $PAR_LOGDIR"; tail -n +2 <<<"$counts" | sed "s|^|   |"
    tail -n 30 "$PAR_LOGDIR/launcher.log"
    for r in "$PAR_LOGDIR"/rank*.log; do grep -E "^(FAILED|ERROR)|Error" "$r" | head -5 | sed "s|^|   $(basename "$r"): |"; done
  fi
  total=$((total + p))
done
echo "cluster: $total passed on 2 launchers, $([ $fail = 0 ] && echo ok || echo FAILED)"
cluster down >/dev/null 2>&1
# the elastic torus on the emulated cluster (tests/cluster/test_elastic_cluster.py brings up its own 2 x 2
# cluster): an uninterrupted run, then node1 lost mid-epoch and added back; pytest runs here, in the host
echo "== cluster elastic test (2 nodes x 2 ranks, node wiring): node1 lost mid-epoch and added back"
xml="$logroot/elastic.xml"
timeout --kill-after=30 1200 "$PYTHON" -m pytest -q -p no:cacheprovider --junitxml="$xml" \
  tests/cluster/test_elastic_cluster.py > "$logroot/elastic.log" 2>&1
rc=$?
read -r ep ef _ <<<"$("$PYTHON" tests/parallel/junit_counts.py --file "$xml")"
echo "cluster elastic: ${ep:-0} passed, ${ef:-1} failed (exit $rc)"
if [ "$rc" -ne 0 ] || [ "${ep:-0}" -ne 2 ]; then fail=1; tail -n 40 "$logroot/elastic.log"; fi
exit $fail
