# Sourced by tests/cluster/run.sh and tests/parallel/run_elastic.sh: cluster_can_run succeeds when this
# machine can emulate nodes (root, iproute2's ip, util-linux's unshare: network namespaces).
cluster_can_run() { [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v unshare >/dev/null; }
