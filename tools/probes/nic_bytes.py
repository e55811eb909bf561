"""Bytes each NIC sends per all-reduce: Open MPI's flat MPI_Allreduce against the torus (a measurement tool,
not a test; run it on an emulated cluster, e.g. 4 nodes x 2 ranks, rails wiring)::

    python -m tools.cluster run --nodes 4 --ranks-per-node 2 --wiring rails --rate 200mbit -- \\
        python tools/probes/nic_bytes.py 8

Prints, per call, the slowest rank's time and, for every node, the bytes sent by each of its NICs
(``/sys/class/net/eth<k>/statistics/tx_bytes`` read before and after, every rank between barriers) divided
by the buffer size n. Measured with 8 MiB float32 buffers, 200 Mbit/s per NIC: Open MPI 4.1's default
all-reduce (Rabenseifner: recursive vector halving with distance doubling, the n/2 exchange with the
rank next door, inside the node) and the torus 2x4 both send 0.75 n per NIC; the flat call took 0.58 s
and the torus 0.35 s.
"""
import glob
import sys
import time

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, torus_allreduce


def tx_bytes():
    nics = sorted(glob.glob("/sys/class/net/eth*/statistics/tx_bytes"))
    return [int(open(path).read()) for path in nics]


def main():
    comm = MPI.COMM_WORLD
    mib = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    n = int(mib * 1024 * 1024) // 4
    x = np.ones(n, np.float32)
    out = np.empty_like(x)
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    leaders = comm.Split(0 if local.Get_rank() == 0 else MPI.UNDEFINED, comm.Get_rank())
    with TorusComm.create(comm) as tc:
        calls = {"flat MPI_Allreduce": lambda: comm.Allreduce(x, out),
                 f"torus {tc.grid}": lambda: torus_allreduce(tc, x)}
        for fn in calls.values():  # connections made, buffers touched
            fn()
        for _ in range(2):
            for name, fn in calls.items():
                comm.Barrier()
                before = tx_bytes()
                t = time.perf_counter()
                fn()
                seconds = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
                comm.Barrier()
                sent = [(b - a) / x.nbytes for a, b in zip(before, tx_bytes())]
                per_node = leaders.gather(sent, root=0) if leaders != MPI.COMM_NULL else None
                if comm.Get_rank() == 0:
                    shown = "  ".join(f"node{i}: " + " ".join(f"{v:.2f}" for v in s) for i, s in enumerate(per_node))
                    print(f"{name:>20}: {seconds:.3f} s; bytes sent per NIC / n: {shown}", flush=True)


if __name__ == "__main__":
    main()
