"""The Horovod transport all-gathers a CRC-32 of each call's (dtype, shape) list: shapes that differ across
ranks with the same element count (which fusing into one flat buffer would otherwise hide) and dtypes that
differ raise on every rank, and Horovod stays usable. (Different element counts: test_mismatch.py.)"""
import numpy as np
import pytest
import tensorflow as tf


def _raises_everywhere(hvd, fn, graph=False):
    assert hvd.transport() == "horovod"
    with pytest.raises(tf.errors.InvalidArgumentError if graph else tf.errors.FailedPreconditionError,
                       match="ranks disagree on"):
        fn()
    ok = hvd.torus_allreduce(tf.fill([2, 3], float(hvd.rank())), op=hvd.Sum)  # still usable, on every rank
    np.testing.assert_array_equal(ok.numpy(), np.full([2, 3], sum(range(hvd.size()))))


def test_same_element_count_different_shape(hvd, world):
    _, rank = world
    _raises_everywhere(hvd, lambda: hvd.torus_allreduce(tf.ones([2, 6] if rank == 0 else [3, 4]), op=hvd.Sum))


def test_same_shapes_in_another_order(hvd, world):
    _, rank = world
    shapes = [[4], [2, 3]] if rank == 0 else [[2, 3], [4]]
    _raises_everywhere(hvd, lambda: hvd.grouped_torus_allreduce([tf.ones(s) for s in shapes], op=hvd.Sum))


def test_different_dtype(hvd, world):
    _, rank = world
    _raises_everywhere(hvd, lambda: hvd.torus_allreduce(tf.ones([4], tf.float64 if rank == 0 else tf.float32)))


def test_same_count_different_shape_inside_tf_function(hvd, world):
    _, rank = world
    f = tf.function(lambda t: hvd.grouped_torus_allreduce([t, tf.ones([2])], op=hvd.Sum, name="fn"))
    _raises_everywhere(hvd, lambda: f(tf.ones([1, 6] if rank == 0 else [6, 1])), graph=True)
