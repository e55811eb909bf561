"""The "mpi" transport and the numpy API (horovod_torus.mpi.torus_allreduce) compare the layout across ranks
before any data moves: a mismatch raises on every rank (no hang), and Horovod/MPI stay usable afterwards.
(The Horovod transport all-gathers a checksum of the shapes: tests/parallel/test_mismatch_horovod.py.)"""
import numpy as np
import pytest
import tensorflow as tf


def hvd_mismatch():
    from horovod_torus.signature import TorusMismatchError
    return TorusMismatchError  # a ValueError


def _raises_everywhere(hvd, fn, graph=False):
    assert hvd.transport() == "mpi"
    with pytest.raises(tf.errors.InvalidArgumentError if graph else tf.errors.FailedPreconditionError,
                       match="ranks disagree on"):
        fn()
    ok = hvd.torus_allreduce(tf.ones([3]), op=hvd.Sum)  # still usable, on every rank
    np.testing.assert_array_equal(ok.numpy(), [hvd.size()] * 3)


def test_same_element_count_different_shape(hvd, world):
    _, rank = world
    _raises_everywhere(hvd, lambda: hvd.torus_allreduce(tf.ones([4] if rank == 0 else [2, 2]), op=hvd.Sum))


def test_different_dtype(hvd, world):
    _, rank = world
    _raises_everywhere(hvd, lambda: hvd.torus_allreduce(tf.ones([4], tf.float64 if rank == 0 else tf.float32)))


def test_different_length_inside_tf_function(hvd, world):
    _, rank = world
    f = tf.function(lambda t: hvd.grouped_torus_allreduce([t, tf.ones([2])], op=hvd.Sum))
    _raises_everywhere(hvd, lambda: f(tf.ones([3 + rank])), graph=True)


@pytest.mark.parametrize("mine, others", [(np.ones([2, 6]), np.ones([3, 4])),             # same count
                                          (np.ones([12]), np.ones([13])),                 # length
                                          (np.ones([4], np.float32), np.ones([4])),       # dtype
                                          (np.ones([0]), np.ones([3]))])                  # empty on one rank
def test_numpy_api_mismatch_raises_on_every_rank(world, mine, others):
    from mpi4py import MPI

    from horovod_torus.mpi import torus_allreduce
    _, rank = world
    with pytest.raises(hvd_mismatch(), match="ranks disagree on"):
        torus_allreduce(MPI.COMM_WORLD, mine if rank == 0 else others)
    ok = torus_allreduce(MPI.COMM_WORLD, np.full([2, 3], float(rank)))  # still usable, on every rank
    np.testing.assert_array_equal(ok, np.full([2, 3], float(sum(range(MPI.COMM_WORLD.size)))))
