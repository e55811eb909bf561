"""``torus_allreduce`` / ``grouped_torus_allreduce``: the process's torus (made by ``init``) as functions.

Convenience entry points for scripts: each call goes to :func:`horovod_torus.tensorflow.runtime.torus`,
the :class:`horovod_torus.tensorflow.torus.TorusAllreduce` that ``init`` made, which does the work (see
it for the phases, transports, errors and bytes moved).
"""
from __future__ import annotations

import horovod.tensorflow as _hvd

from horovod_torus.tensorflow import runtime
from horovod_torus.tensorflow.torus import SUPPORTED_DTYPES  # noqa: F401

__all__ = ["torus_allreduce", "grouped_torus_allreduce", "SUPPORTED_DTYPES"]

Average, Compression = _hvd.Average, _hvd.Compression


def torus_allreduce(tensor, op=Average, name=None, compression=Compression.none,
                    prescale_factor=1.0, postscale_factor=1.0):
    """All-reduce one dense tensor over all ranks through the 2D torus.

    Same contract as ``horovod.tensorflow.allreduce`` for dense tensors: the result has the input's shape
    and dtype and equals ``postscale * op_k(prescale * tensor_k)`` over the N ranks k. See
    :meth:`TorusAllreduce.__call__` for the arguments and errors.

    Example (under ``horovodrun -np 4``)::

        import tensorflow as tf, horovod_torus.tensorflow as hvd
        hvd.init(grid="2x2")
        print(hvd.torus_allreduce(tf.fill([3], float(hvd.rank())), op=hvd.Sum))   # [6. 6. 6.]
    """
    return runtime.torus()([tensor], op, name, compression, prescale_factor, postscale_factor)[0]


def grouped_torus_allreduce(tensors, op=Average, name=None, compression=Compression.none,
                            prescale_factor=1.0, postscale_factor=1.0):
    """All-reduce many dense tensors through the 2D torus, fused into one buffer per dtype; returns a list.
    See :meth:`horovod_torus.tensorflow.torus.TorusAllreduce.__call__`."""
    return runtime.torus()(tensors, op, name, compression, prescale_factor, postscale_factor)
