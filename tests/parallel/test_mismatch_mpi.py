"""The "mpi" backend compares the fused layout across ranks before any data moves: a mismatch raises on
every rank (no hang), and Horovod/MPI stay usable afterwards. (The Horovod backend all-gathers a checksum of
the shapes: tests/parallel/test_mismatch_horovod.py.)"""
import numpy as np
import pytest
import tensorflow as tf


def _raises_everywhere(hvd, fn):
    assert hvd.backend() == "mpi"
    with pytest.raises((tf.errors.OpError, ValueError), match="ranks passed different tensors"):
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
    _raises_everywhere(hvd, lambda: f(tf.ones([3 + rank])))
