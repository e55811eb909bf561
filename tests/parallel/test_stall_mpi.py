"""A rank that skips a torus call on the mpi transport must not leave the others blocked forever: after
the deadline the watchdog aborts the job. This test is launched by run_all.sh with a 10 s deadline and
EXPECTS the launch to fail: tests/parallel/run_stall.sh checks the exit status and the message."""
import os

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, torus_allreduce


def main():
    comm = MPI.COMM_WORLD
    tc = TorusComm.create(comm, "2x2")
    assert tc.deadline == float(os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"])
    for k in range(3):
        if comm.Get_rank() == 3 and k == 1:
            continue  # rank 3 skips call 1 and then leaves: the others must not wait forever
        torus_allreduce(tc, np.ones(4))
    if comm.Get_rank() == 3:
        import time
        time.sleep(120)  # alive but never calling again


if __name__ == "__main__":
    main()
