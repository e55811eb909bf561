"""A rank that an uncaught error ends (not a torus error) while the others wait for it inside an operation of
Horovod's own (a broadcast), not a torus call: the job must end at once, as it does with Horovod alone, not
at the stall deadline (the exit check would wait for ranks that never reach a torus call).

Rank 0 makes a torus all-reduce, then raises ``RuntimeError``; ranks 1-3 make the same all-reduce, then
broadcast from rank 0. Under mpirun rank 0's exit ends the job with MPI_Abort; under horovodrun --gloo
Horovod's shutdown at rank 0's exit ends the others' broadcast. Each rank reports one line before its last
step; run by tests/parallel/run_stall.sh with a 60 s deadline and a bound of 45 s on the launch."""
import time

from stall_report import report  # this script's directory is on sys.path

import horovod_torus.tensorflow as hvd  # before TensorFlow (oneDNN default)
import numpy as np
import tensorflow as tf


def main():
    hvd.init(grid="2x2")
    rank = hvd.rank()
    total = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy()
    assert np.array_equal(total, [4.0, 8.0]), total
    if rank == 0:
        # the torus call ends on each rank when its own last phase does: let ranks 1-3 finish theirs and reach
        # the broadcast first (a shutdown inside their all-reduce ends them there, and the case tests the broadcast)
        time.sleep(2)
        report(rank, f"CRASH rank {rank} at {time.time():.1f}")
        raise RuntimeError("rank 0 fails outside any torus call")
    report(rank, f"BROADCAST rank {rank}")
    hvd.broadcast_variables([tf.Variable(tf.ones(3))], root_rank=0)
    report(rank, f"STALL WRONG rank {rank}: the broadcast returned")  # rank 0 never broadcasts


if __name__ == "__main__":
    main()
