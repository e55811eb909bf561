"""The elastic torus's transport (every phase a global ``hvd.alltoall`` with zero splits outside the row or
column) against Horovod's flat ``hvd.allreduce`` and numpy, per rank, on the launch's grid.

Run by tests/parallel/run_all.sh under horovodrun and mpirun (the transport is plain Horovod ops on the
global set: it needs no elastic launch to be checked).
"""
import numpy as np
import pytest
import tensorflow as tf
import horovod.tensorflow as flat_hvd

from horovod_torus.process_sets import TorusProcessSets
from horovod_torus.tensorflow.elastic_transport import GlobalSetTransport
from horovod_torus.tensorflow.torus import TorusAllreduce

SHAPES = [(1,), (3,), (5, 7), (1001,)]


@pytest.fixture(scope="module")
def elastic_torus(hvd):
    sets = TorusProcessSets.build(hvd.grid(), hvd.rank(), flat_hvd.ProcessSet, flat_hvd.global_process_set)
    return TorusAllreduce(sets, "horovod", None, 0, horovod_transport=GlobalSetTransport(sets, name="gst"))


def rank_input(rank, shape, dtype):
    base = np.random.default_rng(23).integers(-8, 9, size=shape)
    return (base * (rank + 1) + rank).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_sum_matches_flat_allreduce_and_numpy(hvd, world, elastic_torus, shape, dtype):
    size, rank = world
    x = tf.constant(rank_input(rank, shape, dtype))
    got = elastic_torus([x], op=hvd.Sum, name=f"gst_{dtype}_{'x'.join(map(str, shape))}")[0].numpy()
    flat = flat_hvd.allreduce(x, op=flat_hvd.Sum).numpy()
    want = np.sum([rank_input(r, shape, dtype) for r in range(size)], axis=0)
    np.testing.assert_array_equal(flat, want)
    if dtype == "int32":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_average_of_a_list_inside_tf_function_matches_numpy(hvd, world, elastic_torus):
    size, rank = world
    xs = [tf.constant(rank_input(rank, s, "float32")) for s in SHAPES]

    @tf.function
    def step(tensors):
        return elastic_torus(tensors, op=hvd.Average, name="gst_fn")

    outs = [o.numpy() for o in step(xs)]
    for s, o in zip(SHAPES, outs):
        want = np.mean([rank_input(r, s, "float32") for r in range(size)], axis=0)
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


def test_every_rank_of_a_column_holds_the_same_bits(hvd, world, elastic_torus):
    """Phase 2 sums the column's copies in rank order on every rank: the results are bit-identical."""
    size, rank = world
    x = tf.constant(np.random.default_rng(rank).standard_normal(4099).astype(np.float32))
    got = elastic_torus([x], op=hvd.Sum, name="gst_bits")[0].numpy()
    everyone = flat_hvd.allgather(tf.constant(got[None])).numpy()
    assert all(np.array_equal(everyone[0], everyone[r]) for r in range(size))
