"""Horovod's column all-reduce, per rank and column, and the bytes each NIC sent (a measurement tool, not a
test; run it on an emulated cluster, rails wiring, under mpirun)::

    python -m tools.cluster run --nodes 4 --ranks-per-node 2 --wiring rails --rate 200mbit -- \\
        python tools/probes/horovod_columns.py [MIB] [CALLS]

Every call: a barrier, then phase 2 of the Horovod transport alone (``hvd.allreduce`` of MIB/2 MiB float32 on
the column's process set, inside ``tf.function``, as the torus runs it); rank 0 prints each rank's seconds,
grouped by column, and the bytes each node's NICs sent divided by the shard's size. Grid 2 x (world / 2).

What it showed (4 nodes x 2, 200 Mbit/s, 8 MiB, docs/notes/cluster_in_a_box.md): in most calls both
columns take 0.32-0.40 s; in about one call in eight ONE column takes 0.66-0.89 s while the other takes
0.33-0.40 s, with every NIC sending the same 1.5 shards in both kinds of call. The slow column waited for the
other one: Horovod 0.28.1 runs every process set's operations on one background thread per process, whose
cycle starts with a negotiation on the global set, so a rank blocked inside a long CPU ``MPI_Allreduce``
holds back the next cycle of every rank; two columns negotiated one cycle apart run one after the other.
"""
import glob
import os
import sys
import time


def tx_bytes():
    return [int(open(p).read()) for p in sorted(glob.glob("/sys/class/net/eth*/statistics/tx_bytes"))]


def main():
    import tensorflow as tf

    import horovod_torus.tensorflow as hvd

    mib = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])  # before init: the grid is an init argument
    torus = hvd.init(grid=f"2x{world // 2}", min_torus_bytes=0)
    from mpi4py import MPI  # after init: the column rules file is read at MPI_Init (horovod_torus.ompi_rules)

    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    leaders = comm.Split(0 if local.Get_rank() == 0 else MPI.UNDEFINED, comm.Get_rank())
    transport = torus._horovod
    shard = tf.ones([int(mib * 1024 * 1024) // 8], tf.float32)
    column = tf.function(lambda: transport.allreduce(tf.identity(shard), "sum"))
    column().numpy()
    mine = torus.grid.coords(hvd.rank())[1]
    for _ in range(calls):
        comm.Barrier()
        before = tx_bytes()
        start = time.perf_counter()
        column().numpy()
        seconds = time.perf_counter() - start
        comm.Barrier()
        sent = [(b - a) / (shard.shape[0] * 4) for a, b in zip(before, tx_bytes())]
        times = comm.gather((mine, seconds), root=0)
        per_node = leaders.gather(sent, root=0) if leaders != MPI.COMM_NULL else None
        if comm.Get_rank() == 0:
            cols = "  |  ".join(f"column {c}: " + " ".join(f"{t:.2f}" for k, t in times if k == c)
                                for c in range(torus.grid.x))
            nics = " ".join("/".join(f"{v:.2f}" for v in s) for s in per_node)
            print(f"{cols}  s;  NIC bytes / shard per node: {nics}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
