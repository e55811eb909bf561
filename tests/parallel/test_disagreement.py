"""Ranks that disagree get an error on every rank, never a silently wrong number (every torus transport)."""
import numpy as np
import pytest
import tensorflow as tf


def transports(hvd):
    return ["torus:horovod"] + (["torus:mpi"] if hvd.torus_comm() is not None else [])


def _fails_on_every_rank(hvd, strategy, fn, field):
    with pytest.raises(tf.errors.FailedPreconditionError, match=f"ranks disagree on .*{field}") as info:
        fn()
    assert field in info.value.fields
    ok = hvd.allreduce(tf.ones([2]), op=hvd.Sum, strategy=strategy)  # still usable on every rank
    np.testing.assert_array_equal(ok.numpy(), [hvd.size()] * 2)


def test_sum_on_one_rank_average_on_the_others(hvd, world):
    size, rank = world
    x = tf.fill([2], float(rank + 1))
    for s in transports(hvd):
        op = hvd.Sum if rank == size - 1 else hvd.Average
        _fails_on_every_rank(hvd, s, lambda: hvd.allreduce(x, op=op, strategy=s), "op")


def test_different_prescale_factors(hvd, world):
    _, rank = world
    for s in transports(hvd):
        _fails_on_every_rank(hvd, s, lambda: hvd.allreduce(tf.ones([2]), prescale_factor=1.0 + rank, strategy=s),
                             "prescale")


def test_gradient_none_on_some_ranks_only(hvd, world):
    """Rank N-1's loss uses another layer of the same shape: its gradient list has None where the others'
    have a tensor. The sum would mix two layers; instead every rank raises."""
    size, rank = world
    a, b = tf.Variable(tf.ones([3])), tf.Variable(tf.ones([3]))
    for s in transports(hvd):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((b if rank == size - 1 else a) * 2.0)
        tape = hvd.DistributedGradientTape(tape, strategy=s)
        _fails_on_every_rank(hvd, s, lambda: tape.gradient(loss, [a, b]), "name")


def test_tf1_session_graph_with_many_calls(hvd, world):
    """A Session graph orders nothing: many all-reduces in one graph must still pair up right on every
    rank (the mpi transport hands them to Horovod's name-matched ops there)."""
    size, rank = world
    g = tf.Graph()
    with g.as_default():
        outs = [hvd.allreduce(tf.fill([n], float(rank + 1)), op=hvd.Sum) for n in (3, 5, 7, 1000)]
        with tf.compat.v1.Session() as s:
            for _ in range(2):
                res = s.run(outs)
    for o, n in zip(res, (3, 5, 7, 1000)):
        np.testing.assert_array_equal(o, np.full(n, size * (size + 1) / 2))
