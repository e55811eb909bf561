"""Per-call cost of the numpy API at small sizes: a bare MPI_Allreduce against the stages of torus_allreduce
(docs/notes/mpi_transport.md). Usage: mpirun -np N python tools/probes/numpy_small_call.py [CALLS] [REPS] [BYTES]."""
import os
import sys
import time
import numpy as np
from mpi4py import MPI
from horovod_torus.mpi import TorusComm, torus_allreduce
from horovod_torus.phases import allreduce_buffer
from horovod_torus.signature import CallSignature


def main():

    comm = MPI.COMM_WORLD
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    nbytes = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    tc = TorusComm.create(comm, min_torus_bytes=1 << 30, cache_dir="off")
    x = np.ones(max(1, nbytes // 4), np.float32)
    out = np.empty_like(x)
    sig = CallSignature(elements=x.size, dtype="float32", layout=(("float32", x.shape),), op="Sum", algorithm="flat")
    both = np.zeros(40, np.int64); red = np.empty_like(both)

    def bare():
        comm.Allreduce(x, out, op=MPI.SUM)
    def ibare():
        r = comm.Iallreduce(x, out, op=MPI.SUM)
        while not r.Test():
            pass
    def check_flat():
        r = tc.comm.Iallreduce(both, red, op=MPI.MAX)
        while not r.Test():
            pass
        tc.comm.Allreduce(x, out, op=MPI.SUM)
    def check_yield_flat():
        r = tc.comm.Iallreduce(both, red, op=MPI.MAX)
        while not r.Test():
            os.sched_yield()
        tc.comm.Allreduce(x, out, op=MPI.SUM)
    def check_block_flat():
        tc.comm.Allreduce(both, red, op=MPI.MAX)
        tc.comm.Allreduce(x, out, op=MPI.SUM)
    def buffer():
        with tc.watch(sig.name):
            allreduce_buffer(tc, x, sig, op="sum", out=out)
    def api():
        torus_allreduce(tc, x)
    def api_out():
        torus_allreduce(tc, x, out)
    native = tc.native
    from horovod_torus.mpi import _native_handles
    handles = _native_handles(x.dtype, "sum")
    both2, red2 = np.zeros(40, np.int64), np.zeros(40, np.int64)
    fcomm = tc._fcomm
    def c_prebound():
        status, h = native.check_flat(fcomm, both2, red2, 16, x, out, *handles)
        if status == 1:  # the check still open after 16 tests: finish it, then the data (as TorusComm does)
            MPI.Request.f2py(h).Wait()
            tc.comm.Allreduce(x, out, op=MPI.SUM)

    cases = {"bare": bare, "ibare(polled)": ibare, "check+flat": check_flat, "check(yield)+flat": check_yield_flat, "check(block)+flat": check_block_flat, "allreduce_buffer": buffer, "torus_allreduce": api, "torus_allreduce(out)": api_out, "C prebound": c_prebound}
    res = {k: [] for k in cases}
    for rep in range(reps):
        for k, f in cases.items():
            for _ in range(50):
                f()
            comm.Barrier()
            t = time.perf_counter()
            for _ in range(n):
                f()
            dt = (time.perf_counter() - t) / n
            res[k].append(comm.allreduce(dt, op=MPI.MAX))
    if comm.rank == 0:
        b = np.median(res["bare"])
        for k, v in res.items():
            print(f"{k:18s} median {np.median(v)*1e6:7.2f} us  min {min(v)*1e6:7.2f} max {max(v)*1e6:7.2f}  x{np.median(v)/b:5.2f}")
    tc.free()


if __name__ == "__main__":
    main()
