# One-off probe behind docs/cluster_probes.md (not a test; run it on an emulated cluster, see that file).
import sys, time, numpy as np
from mpi4py import MPI
from horovod_torus.mpi import TorusComm, torus_allreduce
comm = MPI.COMM_WORLD
tc = TorusComm.create(comm, "2x4")
r = comm.rank
def med(xs): return sorted(xs)[len(xs)//2]
for mib in [int(a) for a in sys.argv[1:]] or [8, 32]:
    n = mib * 1024 * 1024 // 4
    x = np.random.rand(n).astype(np.float32)
    out = np.empty_like(x)
    res = {}
    for it in range(4):
        comm.Barrier(); t = time.perf_counter(); comm.Allreduce(x, out); comm.Barrier()
        res.setdefault("flat", []).append(time.perf_counter() - t)
        comm.Barrier(); t = time.perf_counter(); torus_allreduce(tc, x); comm.Barrier()
        res.setdefault("torus", []).append(time.perf_counter() - t)
        comm.Barrier(); t0 = time.perf_counter()
        s = tc.reduce_scatter(x, "sum"); comm.Barrier(); t1 = time.perf_counter()
        s2 = tc.allreduce(s, "sum"); comm.Barrier(); t2 = time.perf_counter()
        o = tc.allgather(s2); comm.Barrier(); t3 = time.perf_counter()
        res.setdefault("p1", []).append(t1 - t0); res.setdefault("p2", []).append(t2 - t1); res.setdefault("p3", []).append(t3 - t2)
        # column alone, no CPU reduce: plain sendrecv ring timing
    if r == 0:
        print(mib, "MiB", {k: round(med(v[1:]), 3) for k, v in res.items()}, "column", tc.algorithm_for(x.nbytes), flush=True)
tc.free()
