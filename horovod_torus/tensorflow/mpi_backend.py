"""The "mpi" backend of the TF torus all-reduce: the three phases on mpi4py sub-communicators.

Why it exists (issue "make the torus fast"): on CPU every Horovod op pays its own negotiation round with
the background thread (cycle time, 1 ms by default) and its own copies, so three Horovod ops in a row
cost about three flat all-reduces on small tensors. When Horovod runs with the MPI controller on CPU the
same job already has MPI, so the fused buffer goes straight through :func:`horovod_torus.mpi.torus_allreduce`
on row/column communicators split from ``MPI_COMM_WORLD`` (ranks equal Horovod's), inside one
``tf.numpy_function``. GPU tensors and Gloo jobs keep the Horovod backend (NCCL/Gloo).

Ordering: the numpy function is stateful, so inside ``tf.function`` TensorFlow's automatic control
dependencies run the calls in program order on every rank, which is the order MPI collectives need.
float16 has no MPI datatype: :mod:`horovod_torus.mpi` moves it as 2-byte words and sums it with numpy.
"""
from __future__ import annotations

import zlib

import numpy as np
import tensorflow as tf
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, check_same_buffer, three_phases

__all__ = ["torus_sum_mpi", "create_torus_comm"]


def create_torus_comm(grid) -> TorusComm:
    """Split MPI_COMM_WORLD by ``grid`` (collective; called once by ``init(backend="mpi")``)."""
    return TorusComm.create(MPI.COMM_WORLD, grid)


def _scale(a: np.ndarray, factor: float) -> np.ndarray:
    """Horovod's ScaleBuffer on CPU: multiply in double precision, integers truncated toward zero."""
    if factor == 1.0:
        return a
    if a.dtype.kind in "iu":
        return (a.astype(np.float64) * factor).astype(a.dtype)
    return (a * factor).astype(a.dtype, copy=False)


def _reduce(tc: TorusComm, a: np.ndarray, prescale: float, postscale: float, signature: int) -> np.ndarray:
    check_same_buffer(tc.comm, a, signature)
    a = _scale(a, prescale)
    out = np.empty_like(a)
    three_phases(tc, a, out, MPI.SUM)
    return _scale(out, postscale)


def torus_sum_mpi(buf: tf.Tensor, tc: TorusComm, prescale: float, postscale: float, divisor: int,
                  shapes=()) -> tf.Tensor:
    """Sum a flat buffer over all ranks through the torus with MPI; scale like Horovod does.

    Args:
        buf: 1-D tensor (float16/32/64, int32/64), same length on every rank.
        tc: the TorusComm made at init.
        prescale, postscale: factors applied before and after the sum (float32 attributes in Horovod, so
            they are rounded to float32 here too); ``divisor`` (N for Average, else 1) divides once.
        shapes: the fused tensors' shapes; their checksum is compared across ranks before the sum.

    Returns:
        A tensor like ``buf`` holding postscale/divisor * sum_k(prescale * buf_k).
    """
    pre = float(np.float32(prescale))
    post = float(np.float32(postscale)) / divisor

    signature = zlib.crc32(repr(tuple(tuple(s) for s in shapes)).encode())

    def fn(a):
        return _reduce(tc, a, pre, post, signature)

    out = tf.numpy_function(fn, [buf], buf.dtype, stateful=True, name="TorusAllreduceMPI")
    out.set_shape(buf.shape)
    return out
