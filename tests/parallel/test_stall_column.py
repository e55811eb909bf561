"""A rank that stops inside the column phase (after the call's check passed) must not leave the others
blocked in the point-to-point column algorithm: every waiting rank raises TorusStallError naming the call
and the rank, within the deadline + 10 s, runs its cleanup, and the job ends non-zero (MPI_Abort at exit).
Grid 1x4, column_algorithm="tree" (binomial tree: rank 3's parent is 2, whose parent is 0; rank 1 waits for
0's broadcast). Launched by tests/parallel/run_stall.sh with a 10 s deadline; it EXPECTS the launch to fail."""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, TorusStallError, torus_allreduce
from stall_report import report, waited_enough  # this script's directory is on sys.path


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    deadline = float(os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"])
    tc = TorusComm.create(comm, "1x4", column_algorithm="tree")
    torus_allreduce(tc, np.ones(4))  # call 1: every rank
    if rank == 3:  # call 2: rank 3 passes the check, then stops inside the column phase
        tc.allreduce = lambda shard, op: time.sleep(120)
    start = time.monotonic()
    try:
        torus_allreduce(tc, np.ones(1 << 16))
    except TorusStallError as exc:
        took = time.monotonic() - start
        ok = exc.call == 2 and exc.missing == (3,) and took <= deadline + 10 and waited_enough(took, deadline, str(exc))
        report(rank, f"COLUMN STALL {'OK' if ok else 'WRONG'} rank {rank} call {exc.call} missing "
                     f"{list(exc.missing)} after {took:.1f} s: {exc}")
        report(rank, f"COLUMN CLEANUP rank {rank}")
        sys.exit(1)


if __name__ == "__main__":
    main()
