# One-off probe behind docs/cluster_probes.md (not a test; run it on an emulated cluster, see that file).
import sys, time, numpy as np
from mpi4py import MPI
from horovod_torus.mpi import TorusComm
comm = MPI.COMM_WORLD
tc = TorusComm.create(comm, "2x4")
col = tc.column
p, me = col.Get_size(), col.Get_rank()
def med(xs): return sorted(xs)[len(xs)//2]
n = int(sys.argv[1]) * 1024 * 1024 // 4
a = np.ones(n, np.float32); b = np.empty(n, np.float32)
res = {}
for it in range(4):
    col.Barrier(); t = time.perf_counter()
    col.Sendrecv(a, dest=(me+1)%p, recvbuf=b, source=(me-1)%p); res.setdefault("ring", []).append(time.perf_counter()-t)
    col.Barrier(); t = time.perf_counter()
    col.Sendrecv(a, dest=me^1, recvbuf=b, source=me^1); res.setdefault("pair^1", []).append(time.perf_counter()-t)
    col.Barrier(); t = time.perf_counter()
    col.Sendrecv(a, dest=me^2, recvbuf=b, source=me^2); res.setdefault("pair^2", []).append(time.perf_counter()-t)
    col.Barrier(); t = time.perf_counter()
    if me % 2 == 0: col.Send(a, dest=me+1)
    else: col.Recv(b, source=me-1)
    res.setdefault("oneway", []).append(time.perf_counter()-t)
    col.Barrier(); t = time.perf_counter()
    reqs = [col.Isend(a[:n//2], dest=(me+1)%p, tag=1), col.Isend(a[n//2:], dest=(me-1)%p, tag=2),
            col.Irecv(b[:n//2], source=(me-1)%p, tag=1), col.Irecv(b[n//2:], source=(me+1)%p, tag=2)]
    MPI.Request.Waitall(reqs); res.setdefault("bidir-ring", []).append(time.perf_counter()-t)
if comm.rank == 0:
    mb = n * 4 / 1e6
    print(sys.argv[1], "MiB", {k: (round(med(v[1:]), 3), round(mb / med(v[1:]), 1)) for k, v in res.items()}, "(s, MB/s)", flush=True)
tc.free()
