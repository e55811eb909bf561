"""The numpy API's flat call from 1 MiB: one blocking MPI_Allreduce (Open MPI's tuned component) against a
polled MPI_Iallreduce (libnbc), both after the call's check, beside a bare MPI_Allreduce
(docs/notes/mpi_transport.md). The three alternate within every round; each time is the median of the round's
calls, MAX over the ranks. Usage: mpirun -np N python tools/probes/flat_blocking.py [ROUNDS] [SIZE ...]
(sizes in bytes of float32, from 1 MiB: below it the data goes through the C call; default 5 rounds of 1, 4,
16 and 100 MiB). Prints, per size, the median over
rounds [min-max] in ms, and each mode / bare."""
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, torus_allreduce


def main():
    comm = MPI.COMM_WORLD
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sizes = [int(s) for s in sys.argv[2:]] or [1 << 20, 4 << 20, 16 << 20, 100 << 20]
    tc = TorusComm.create(comm, min_torus_bytes=1 << 40, cache_dir="off")  # always the flat call

    def blocking(buf, op, out=None):  # TorusComm.allreduce_flat as a blocking MPI_Allreduce at every size
        out = np.empty_like(buf) if out is None else out
        tc.comm.Allreduce(MPI.IN_PLACE if out is buf else buf, out, op=MPI.SUM)
        return out

    modes = {"blocking": blocking, "libnbc": None}  # None: the committed allreduce_flat (libnbc from 1 MiB)
    for nbytes in sizes:
        x = np.ones(nbytes // 4, np.float32)
        out = np.empty_like(x)
        calls = max(2, min(20, (64 << 20) // nbytes))
        times = {k: [] for k in ("bare", *modes)}
        for r in range(rounds):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for name in order:
                if modes.get(name):
                    tc.allreduce_flat = modes[name]
                elif name != "bare":
                    vars(tc).pop("allreduce_flat", None)
                one = []
                for _ in range(calls + 1):
                    comm.Barrier()
                    t = time.perf_counter()
                    if name == "bare":
                        comm.Allreduce(x, out, op=MPI.SUM)
                    else:
                        torus_allreduce(tc, x, out)
                    one.append(time.perf_counter() - t)
                times[name].append(comm.allreduce(statistics.median(one[1:]), op=MPI.MAX))
        if comm.rank == 0:
            bare = statistics.median(times["bare"])
            cells = [f"{k} {statistics.median(v) * 1e3:.2f} ms [{min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}]"
                     + ("" if k == "bare" else f" x{statistics.median(v) / bare:.2f}") for k, v in times.items()]
            print(f"{nbytes:>10d} B  " + "  ".join(cells), flush=True)
    tc.free()


if __name__ == "__main__":
    main()
