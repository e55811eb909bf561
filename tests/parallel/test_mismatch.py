"""Shapes that differ across ranks end in an error on every rank within seconds, not a hang.

Runs in a launch of its own (Horovod shuts down after the error). Rank 0 sends 3 elements, the others 4.
"""
import time

import pytest
import tensorflow as tf


def test_shapes_differing_across_ranks_fail_fast_on_every_rank(hvd, world):
    size, rank = world
    assert size > 1
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        hvd.torus_allreduce(tf.ones([3 if rank == 0 else 4]), op=hvd.Sum, name="mismatch")
    elapsed = time.monotonic() - start
    assert elapsed < 30, f"rank {rank} waited {elapsed:.1f}s"
    assert isinstance(info.value, (tf.errors.OpError, ValueError)), repr(info.value)
