"""A rank that skips a torus call on the mpi transport must not leave the others blocked: after the deadline
every waiting rank raises TorusStallError naming the call and the rank that did not arrive, within the
deadline + 10 s, runs its own cleanup, and the job then ends non-zero (MPI_Abort at exit). Launched by
tests/parallel/run_stall.sh with a 10 s deadline; it EXPECTS the launch to fail and checks every rank's line."""
import os
import sys
import time

from stall_report import report, waited_enough  # this script's directory is on sys.path

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, TorusStallError, torus_allreduce


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    deadline = float(os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"])
    tc = TorusComm.create(comm, "2x2")
    assert tc.deadline == deadline
    for k in range(3):
        if rank == 3 and k == 1:
            continue  # rank 3 skips a call and then leaves: the others must not wait forever
        start = time.monotonic()
        try:
            torus_allreduce(tc, np.ones(4))
        except TorusStallError as exc:
            took = time.monotonic() - start
            ok = (exc.call == 3 and exc.missing == (3,) and "call 3" in str(exc) and "rank(s) [3]" in str(exc)
                  and took <= deadline + 10 and waited_enough(took, deadline, str(exc)))
            report(rank, f"STALL {'OK' if ok else 'WRONG'} rank {rank} call {exc.call} missing {list(exc.missing)} "
                         f"after {took:.1f} s: {exc}")
            report(rank, f"CLEANUP rank {rank}")  # a user's finally / on_train_end runs here
            sys.exit(1)
    if rank == 3:
        time.sleep(120)  # alive but never calling again


if __name__ == "__main__":
    main()
