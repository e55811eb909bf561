"""Below min_torus_bytes the torus runs one flat all-reduce of the fused buffer: Horovod's own call (on the
MPI transport after the check on its communicator); at and above it the three phases run. Both give the
numpy sum, and Horovod's exact values."""
import contextlib

import numpy as np
import pytest
import tensorflow as tf


@contextlib.contextmanager
def crossover(hvd, nbytes):
    torus = hvd.torus()
    saved = torus.min_torus_bytes
    torus.min_torus_bytes = nbytes
    try:
        yield torus
    finally:
        torus.min_torus_bytes = saved


def strategies(hvd):
    return ["torus:horovod"] + (["torus:mpi"] if hvd.torus_comm() is not None else [])


def test_algorithm_switches_at_the_crossover(hvd, world):
    size, rank = world
    with crossover(hvd, 1024) as torus:
        assert torus.algorithm(1023) == "flat" and torus.algorithm(1024) == "torus"
        for s in strategies(hvd):
            for n in (1, 255, 256, 1000):       # 4 .. 4000 bytes of float32: both sides of 1024
                x = tf.constant(np.arange(n, dtype=np.float32) * (rank + 1))
                got = hvd.allreduce(x, op=hvd.Sum, strategy=s).numpy()
                ring = hvd.allreduce(x, op=hvd.Sum, strategy="ring").numpy()
                want = np.arange(n, dtype=np.float32) * sum(range(1, size + 1))
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(got, ring)


def test_flat_path_is_bit_identical_to_the_ring_with_scaling_and_narrow_dtypes(hvd, world):
    size, rank = world
    with crossover(hvd, 1 << 20):
        for s in strategies(hvd):
            h = tf.constant([55.78125, -3.5, 1e-3], tf.float16) + tf.cast(rank, tf.float16)
            kw = dict(op=hvd.Sum, prescale_factor=0.1915194503788923, postscale_factor=1.7)
            np.testing.assert_array_equal(hvd.allreduce(h, strategy=s, **kw).numpy(),
                                          hvd.allreduce(h, strategy="ring", **kw).numpy())
            i = tf.constant([7, -9, 100], tf.int32) + rank
            np.testing.assert_array_equal(hvd.allreduce(i, op=hvd.Average, strategy=s).numpy(),
                                          hvd.allreduce(i, op=hvd.Average, strategy="ring").numpy())
            b = tf.constant([1, 2, 3], tf.int8) * (rank + 1)
            np.testing.assert_array_equal(hvd.allreduce(b, op=hvd.Sum, strategy=s).numpy(),
                                          np.array([1, 2, 3], np.int8) * sum(range(1, size + 1)))


def test_flat_path_has_a_gradient(hvd, world):
    size, _ = world
    with crossover(hvd, 1 << 20):
        for s in strategies(hvd):
            v = tf.Variable([1.0, 2.0, 3.0])
            with tf.GradientTape() as tape:
                y = hvd.allreduce(v, op=hvd.Sum, strategy=s)
            np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [size] * 3)


def test_flat_path_mismatch_raises_horovods_error_on_every_rank(hvd, world):
    """The signature check covers the flat path too: different prescale factors raise
    FailedPreconditionError (Horovod's type for mismatched collectives) on every rank."""
    size, rank = world
    with crossover(hvd, 1 << 20):
        for s in strategies(hvd):
            with pytest.raises(tf.errors.FailedPreconditionError, match="(?i)mismatch"):
                hvd.allreduce(tf.ones([2]), op=hvd.Sum, prescale_factor=1.0 + rank, strategy=s)
            ok = hvd.allreduce(tf.ones([2]), op=hvd.Sum, strategy=s)   # still usable on every rank
            np.testing.assert_array_equal(ok.numpy(), [size] * 2)


def test_sizes_on_both_sides_of_the_crossover_are_a_mismatch_on_every_rank(hvd, world):
    """Rank 0 below the crossover (the flat call), the others above it (the three phases): both sides enter
    the same check (the MPI transport's flat call too: on its communicator, not Horovod's), so every rank
    raises the mismatch naming the sizes instead of waiting in a different library, eagerly and inside
    tf.function, and the torus stays usable."""
    size, rank = world
    n = 2 if rank == 0 else 300                  # 8 bytes and 1,200 bytes of float32 around 1,024
    with crossover(hvd, 1024):
        for s in strategies(hvd):
            x = tf.ones([n])
            with pytest.raises(tf.errors.FailedPreconditionError, match="(?i)mismatch") as err:
                hvd.allreduce(x, op=hvd.Sum, strategy=s)
            assert "elements" in str(err.value) and "300" in str(err.value), str(err.value)
            with pytest.raises(tf.errors.InvalidArgumentError, match="(?i)mismatch"):
                tf.function(lambda: hvd.allreduce(x, op=hvd.Sum, strategy=s))()
            ok = hvd.allreduce(tf.ones([3]), op=hvd.Sum, strategy=s)
            np.testing.assert_array_equal(ok.numpy(), [size] * 3)


def test_calibrate_sets_the_same_crossover_on_every_rank(hvd, world):
    size, _ = world
    torus = hvd.torus()
    saved = torus.min_torus_bytes
    try:
        sizes = (4096, 65536)
        value = torus.calibrate(sizes=sizes, rounds=3, calls=1)
        assert value in sizes + (16384, 2 ** 62)  # 16 KiB: the midpoint measured after a loss at 4 KiB
        assert torus.min_torus_bytes == value and torus.crossover_source[torus.transport] == "measured"
    finally:
        torus.min_torus_bytes = saved
    gathered = hvd.allgather(tf.constant([value], tf.int64)).numpy()
    assert (gathered == value).all(), gathered
