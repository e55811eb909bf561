"""mpirun only: the torus' MPI traffic and the user's own MPI traffic in another thread stay apart."""
import threading

import numpy as np
import tensorflow as tf


def test_user_collectives_in_another_thread_do_not_mix_with_the_torus(hvd, world):
    """The mpi transport runs on a duplicate of the communicator: a user's own MPI_COMM_WORLD traffic from
    a second thread never matches its messages."""
    from mpi4py import MPI

    size, rank = world
    comm = MPI.COMM_WORLD
    seen, stop = [], threading.Event()

    def user_traffic():
        for _ in range(200):
            seen.append(comm.allreduce(rank, op=MPI.SUM))

    t = threading.Thread(target=user_traffic)
    t.start()
    outs = [hvd.allreduce(tf.fill([1000], float(rank)), op=hvd.Sum, strategy="torus:mpi").numpy() for _ in range(20)]
    t.join(60)
    stop.set()
    assert seen == [size * (size - 1) // 2] * 200
    for o in outs:
        np.testing.assert_array_equal(o, np.full(1000, size * (size - 1) / 2))
