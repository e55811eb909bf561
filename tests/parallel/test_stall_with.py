"""The numpy API in a ``with TorusComm.create(...)`` block: rank 3 makes 2 calls and leaves its block while
the others make a third. The end of its block exchanges the exit signature, so ranks 0-2 raise
TorusStallError at once (well within the 10 s deadline) naming rank 3 as having left, and rank 3's block
raises too. Ranks 0-2 catch the error inside their blocks and end them normally (as a user's script may):
the job must still end non-zero with MPI_Abort (nothing freed after a stall, so the exit hook can run).
Launched by tests/parallel/run_stall.sh; it EXPECTS the launch to fail and checks every rank's line."""
import sys
import time

from stall_report import report  # this script's directory is on sys.path

import numpy as np
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, TorusStallError, torus_allreduce


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        with TorusComm.create(comm, "2x2") as tc:
            for k in range(3 if rank != 3 else 2):
                start = time.monotonic()
                try:
                    out = torus_allreduce(tc, np.full(5, rank, np.float64))
                    if not np.array_equal(out, np.full(5, 6.0)):
                        report(rank, f"WITH STALL WRONG rank {rank} call {k + 1} gave {out}")
                except TorusStallError as exc:
                    took = time.monotonic() - start
                    ok = (exc.call == 3 and exc.missing == (3,) and "left the torus" in str(exc) and took < 5)
                    report(rank, f"WITH STALL {'OK' if ok else 'WRONG'} rank {rank} call {exc.call} missing "
                                 f"{list(exc.missing)} after {took:.1f} s: {exc}")
    except TorusStallError as exc:  # rank 3: its block's end found the others in call 3
        ok = rank == 3 and "this rank (rank 3) left the torus" in str(exc)
        report(rank, f"WITH {'LEFT' if ok else 'STALL WRONG'} rank {rank}: {exc}")
        sys.exit(1)
    report(rank, f"WITH END rank {rank}")  # ranks 0-2 end normally: the exit hook must still end the job


if __name__ == "__main__":
    main()
