"""The built-in strategies: ``"ring"`` (the reference) and ``"torus"``."""
from __future__ import annotations

import horovod.tensorflow as _hvd

from horovod_torus.tensorflow.collectives import grouped_torus_allreduce

__all__ = ["ring_allreduce", "torus_allreduce"]

#: ``"torus"``: the 2D-Torus all-reduce (Mikami et al., arXiv 1811.05233), fused per dtype.
torus_allreduce = grouped_torus_allreduce


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
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor))
