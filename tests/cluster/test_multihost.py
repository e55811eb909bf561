"""Multi-host checks on an emulated cluster (run on every rank by tests/cluster/run.sh: 2 nodes x 2 ranks,
rails wiring, unshaped, once under mpirun and once under horovodrun --gloo).

Every test runs all its collectives before asserting, so one rank's failure never leaves the others waiting.
"""
import os
import socket

import numpy as np
import pytest

if "HOROVOD_TORUS_CLUSTER_NIC" not in os.environ:  # set by the cluster's per-rank wrapper
    pytest.skip("runs on an emulated cluster only: bash tests/cluster/run.sh", allow_module_level=True)

import tensorflow as tf  # noqa: E402

RAILS = os.path.exists("/sys/class/net/eth1")  # the rails wiring gives a node one NIC per rank


@pytest.fixture(scope="session")
def hvd():
    import horovod_torus.tensorflow as hvd

    hvd.init()  # default grid: a node's ranks per row
    return hvd


def test_each_emulated_node_is_a_host(hvd):
    hosts = hvd.allgather_object(socket.gethostname())
    nics = hvd.allgather_object(os.environ.get("HOROVOD_TORUS_CLUSTER_NIC"))
    assert (hvd.size(), hvd.local_size()) == (4, 2)
    assert hosts == ["node0", "node0", "node1", "node1"]
    assert hvd.local_rank() == hvd.rank() % 2 and hvd.cross_size() == 2
    # rails: every rank bound to its own NIC, eth<local rank>; one NIC per node: eth0
    assert nics == (["eth0", "eth1", "eth0", "eth1"] if RAILS else ["eth0"] * 4)


def test_default_grid_puts_a_node_in_each_row(hvd):
    g = hvd.grid()
    hosts = hvd.allgather_object(socket.gethostname())
    assert (g.x, g.y) == (2, 2)
    for row in g.rows():
        assert len({hosts[r] for r in row}) == 1, f"row {row} spans hosts {[hosts[r] for r in row]}"
    for col in g.columns():
        assert len({hosts[r] for r in col}) == len(col), f"column {col} has two ranks on one host"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("count", [1, 7, 1 << 20])
def test_torus_equals_ring(hvd, dtype, count):
    rng = np.random.default_rng(1000 * hvd.rank() + count)
    x = tf.constant(rng.integers(-50, 50, size=count).astype(dtype))
    torus = hvd.allreduce(x, op=hvd.Sum, strategy="torus").numpy()
    ring = hvd.allreduce(x, op=hvd.Sum, strategy="ring").numpy()
    expected = sum(np.random.default_rng(1000 * r + count).integers(-50, 50, size=count) for r in range(hvd.size()))
    # small integers: every summation order is exact, so both paths must give the exact sum bit for bit
    wrong = {"torus": int(np.count_nonzero(torus != expected)), "ring": int(np.count_nonzero(ring != expected))}
    assert wrong == {"torus": 0, "ring": 0}, f"elements differing from the exact sum: {wrong} of {count}"
    np.testing.assert_array_equal(torus, ring)


def test_repeated_torus_calls_are_exact(hvd):
    """Eight 2 MiB torus all-reduces in a row, in tf.function, equal the exact sum on every call: the size
    and wiring at which Horovod's Gloo reduce-scatter (which phase 1 no longer uses under Gloo) returned
    wrong shard tails."""
    count = (2 << 20) // 4
    x = tf.constant(((np.arange(count) + hvd.rank()) % 3).astype(np.float32))
    step = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, strategy="torus"))
    outs = [step(x).numpy() for _ in range(8)]
    expected = sum((np.arange(count) + r) % 3 for r in range(hvd.size())).astype(np.float32)
    wrong = [int(np.count_nonzero(o != expected)) for o in outs]
    assert wrong == [0] * 8, f"elements differing from the exact sum, per call: {wrong} of {count}"


def test_mpi_transport_runs_the_column_as_a_ring(hvd):
    """Under mpirun the torus' MPI transport sees columns whose ranks are all on different nodes, takes the
    across-nodes column model, and with HOROVOD_TORUS_COLUMN_ALGORITHM=auto runs phase 2 of an 8 MiB
    buffer as a ring; the results above were checked with it."""
    from horovod_torus.columns import ACROSS_NODES
    from horovod_torus.tensorflow.runtime import torus_comm, transport

    if transport() != "mpi":
        pytest.skip("the Horovod-ops transport (Gloo) has no MPI column communicator")
    tc = torus_comm()
    assert tc.column_model == ACROSS_NODES and tc.algorithm_for(8 << 20) == "ring"


def _tx_bytes(nic):
    with open(f"/sys/class/net/{nic}/statistics/tx_bytes") as f:
        return int(f.read())


def test_column_rings_run_on_their_own_rail(hvd):
    """The torus' column phase (same local rank on both nodes) leaves each node by that rank's NIC."""
    nbytes = 8 << 20
    x = tf.ones([nbytes // 4], tf.float32)
    hvd.allreduce(x, op=hvd.Sum, strategy="torus").numpy()  # warm-up: connections made
    hvd.allreduce(tf.zeros([1]), op=hvd.Sum, strategy="ring").numpy()
    nics = [f"eth{k}" for k in range(2)] if RAILS else ["eth0"]
    before = [_tx_bytes(n) for n in nics]
    out = hvd.allreduce(x, op=hvd.Sum, strategy="torus").numpy()
    hvd.allreduce(tf.zeros([1]), op=hvd.Sum, strategy="ring").numpy()
    after = [_tx_bytes(n) for n in nics]
    sent = [a - b for a, b in zip(after, before)]
    assert out[0] == 4.0
    # each column all-reduces a shard of nbytes / 2 between the two nodes: at least nbytes / 4 leaves by
    # each rail's NIC (the node's two ranks share its counters)
    assert min(sent) >= nbytes // 4, f"bytes sent per NIC {sent}"
