# One-off probe behind docs/cluster_probes.md (not a test): exchanges with rank xor 1 in a loop for ARGV[1] seconds,
# to watch the TCP connections (`ss -tin` inside a node) while they run.
import sys, time, numpy as np
from mpi4py import MPI
from horovod_torus.mpi import TorusComm
comm = MPI.COMM_WORLD
tc = TorusComm.create(comm, "2x4")
col = tc.column
p, me = col.Get_size(), col.Get_rank()
n = 4 * 1024 * 1024 // 4
a = np.ones(n, np.float32); b = np.empty(n, np.float32)
ts=[]
t0=time.time()
while time.time()-t0 < float(sys.argv[1]):
    col.Barrier(); t = time.perf_counter()
    col.Sendrecv(a, dest=me^1, recvbuf=b, source=me^1); ts.append(time.perf_counter()-t)
print(comm.rank, MPI.Get_processor_name(), "pair^1 med", round(sorted(ts)[len(ts)//2],3), flush=True)
tc.free()
