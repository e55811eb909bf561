"""Factories of the built-in strategies named in :mod:`horovod_torus.strategies.registry`.

The torus ones return a strategy bound to the process's :class:`TorusAllreduce` (made by ``init``): the
data path then calls that object directly, with no global look-up per call.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd

from horovod_torus.tensorflow import runtime

__all__ = ["ring_allreduce", "ring", "torus", "torus_horovod", "torus_mpi"]


def ring_allreduce(tensors, op=_hvd.Average, name=None, compression=_hvd.Compression.none,
                   prescale_factor=1.0, postscale_factor=1.0):
    """``"ring"``: Horovod's flat ``grouped_allreduce`` over the global process set (the reference).

    One fused Horovod response for all ``tensors`` (Horovod's ring, or its NCCL/MPI all-reduce).
    Accepts every Horovod op (Average, Sum, Min, Max, Product, Adasum) and returns a list.
    """
    tensors = list(tensors)
    if not tensors:
        return []
    return list(_hvd.grouped_allreduce(tensors, op=op, name=name, compression=compression,
                                       prescale_factor=prescale_factor, postscale_factor=postscale_factor))


def ring():
    return ring_allreduce


def torus():
    return runtime.torus().strategy()


def torus_horovod():
    return runtime.torus().strategy("horovod")


def torus_mpi():
    return runtime.torus().strategy("mpi")
