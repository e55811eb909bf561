"""Horovod's reduction ops as the torus layer sees them: which op goes where, and Horovod's own call.

The one owner of op validation for the TensorFlow layer (the torus object, the strategies, the gradient
reducer all ask here) and of the flat Horovod all-reduce that the ``"horovod"`` strategy is:

* ``hvd.Average`` and ``hvd.Sum`` (:data:`TORUS_OPS`) go through the torus;
* ``hvd.Min``, ``hvd.Max`` and ``hvd.Product`` (:data:`HOROVOD_OPS`) go through :func:`horovod_allreduce`
  (the torus sums), so ``hvd.allreduce(x, op=hvd.Max)`` works as with Horovod;
* ``hvd.Adasum`` is refused (:func:`check_op` names it).
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

__all__ = ["TORUS_OPS", "HOROVOD_OPS", "op_label", "check_op", "horovod_allreduce"]

Average, Sum, Compression = _hvd.Average, _hvd.Sum, _hvd.Compression

#: The ops the three phases reduce with.
TORUS_OPS = (_hvd.Average, _hvd.Sum)

#: Element-wise ops the torus strategies hand to Horovod's own all-reduce.
HOROVOD_OPS = (_hvd.Min, _hvd.Max, _hvd.Product)

_LABELS = {getattr(_hvd, n): n for n in ("Average", "Sum", "Max", "Min", "Product", "Adasum")}


def op_label(op) -> str:
    """Horovod's name of ``op`` (``"Average"``, ``"Sum"``, ...), or its repr for anything else."""
    return _LABELS.get(op, repr(op))


def check_op(op, *, horovod_ops: bool = False):
    """``op`` (None -> Average) when the caller supports it; else ValueError naming it and the fix.

    Args:
        op: a Horovod op or None.
        horovod_ops: also accept :data:`HOROVOD_OPS` (strategies and optimizers, which route them to
            :func:`horovod_allreduce`); False: the torus object itself, Average and Sum only.

    Raises:
        ValueError: Adasum (never supported), another op outside the accepted ones.
    """
    if op is None:
        return Average
    if op == _hvd.Adasum:
        raise ValueError("op=Adasum is not supported by horovod_torus: use op=hvd.Average or hvd.Sum")
    if op in TORUS_OPS or (horovod_ops and op in HOROVOD_OPS):
        return op
    hint = ("use strategy='horovod' (Horovod's own all-reduce)" if op in HOROVOD_OPS else
            "use one of hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product")
    raise ValueError(f"torus all-reduce supports op=Average or op=Sum, got op={op_label(op)}: {hint}")


def horovod_allreduce(tensors, op=Average, name=None, compression=Compression.none, prescale_factor=1.0,
                      postscale_factor=1.0) -> list:
    """Horovod's own flat all-reduce of a list: one ``grouped_allreduce`` over the global process set.

    The ``"horovod"`` strategy (alias ``"ring"``, the reference every strategy must equal): one fused
    Horovod response for all ``tensors`` (Horovod's MPI_Allreduce, Gloo ring or NCCL all-reduce). Accepts
    every Horovod op (Average, Sum, Min, Max, Product, Adasum); returns a list of tensors of the inputs'
    shapes and dtypes. Inside a ``tf.function`` without ``name`` the op is named by the graph's own count
    (``HorovodFlatAllreduce``, ``HorovodFlatAllreduce_1``, ...: the same on every rank that traces the same
    function), not after its inputs as Horovod would: a captured eager tensor's name is its process-wide id.
    """
    tensors = list(tensors)
    if not tensors:
        return []
    if name is None and not tf.executing_eagerly():
        # Horovod names an unnamed graph op after its inputs and matches ops across ranks by name; an eager
        # tensor captured by a tf.function is named after its process-wide id, which differs between ranks
        # that made different numbers of eager tensors (they would wait until the stall deadline). The
        # graph's own count is the same on every rank that traces the same function.
        name = tf.compat.v1.get_default_graph().unique_name("HorovodFlatAllreduce")
    return list(_hvd.grouped_allreduce(tensors, op=op, name=name, compression=compression,
                                       prescale_factor=prescale_factor, postscale_factor=postscale_factor))
