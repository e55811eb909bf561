"""``allreduce`` and ``grouped_allreduce`` with Horovod's signatures, reducing through a strategy, and the
one sparse path (``tf.IndexedSlices``) that they and the gradient reducer share.

Dense tensors go through the strategy (``"torus"`` by default, keyword-only ``strategy=``);
``tf.IndexedSlices`` are all-gathered (values and indices), as in Horovod.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY, resolve_strategy

__all__ = ["allreduce", "grouped_allreduce", "reduce_sparse", "check_sparse", "check_process_set"]

Compression = _hvd.Compression


def check_process_set(process_set) -> None:
    """Raise ValueError unless ``process_set`` is Horovod's global set (the torus spans all ranks)."""
    if process_set is not _hvd.global_process_set and \
            getattr(process_set, "process_set_id", None) != 0:
        raise ValueError(
            f"process_set={process_set!r}: horovod_torus reduces over all ranks (the torus grid is the "
            f"global set); pass process_set=hvd.global_process_set, or use horovod.tensorflow directly "
            f"for a subset of ranks")


def check_sparse(op, prescale_factor=1.0, postscale_factor=1.0) -> None:
    """Raise NotImplementedError (Horovod 0.28.1's rule for tf.IndexedSlices) for an op other than Average
    or Sum, or a pre/post-scale factor other than 1; called before any collective of the call."""
    if op not in (_hvd.Average, _hvd.Sum):
        raise NotImplementedError(f"op={op!r} is not supported for tf.IndexedSlices (Horovod's rule): use "
                                  f"op=Average or Sum, or sparse_as_dense=True")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError(f"prescale_factor={prescale_factor}/postscale_factor={postscale_factor} are "
                                  f"not supported for tf.IndexedSlices (Horovod's rule; e.g. from "
                                  f"gradient_predivide_factor): use sparse_as_dense=True")


def reduce_sparse(g: tf.IndexedSlices, op, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """All-reduce a ``tf.IndexedSlices`` the Horovod way: all-gather values and indices over all ranks
    (the dense tensors they represent are summed; Average divides the values by N). The one sparse path of
    ``allreduce``, ``grouped_allreduce``, ``DistributedOptimizer`` and ``DistributedGradientTape``.

    Raises (as Horovod 0.28.1 does):
        NotImplementedError: an op other than Average or Sum, or a pre/post-scale factor other than 1
            (e.g. ``gradient_predivide_factor``); pass ``sparse_as_dense=True`` to reduce such gradients
            as dense tensors.
    """
    check_sparse(op, prescale_factor, postscale_factor)
    values = _hvd.allgather(g.values, name=name and f"{name}_values")
    indices = _hvd.allgather(g.indices, name=name and f"{name}_indices")
    if op == _hvd.Average:  # exactly Horovod's: true division (integer values become floating)
        values = values / tf.cast(_hvd.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=g.dense_shape)


def _resolve_op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError(f"pass op={op!r} or the deprecated average={average!r}, not both")
        return _hvd.Average if average else _hvd.Sum
    return _hvd.Average if op is None else op


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=_hvd.global_process_set, ignore_name_scope=False, *,
              strategy=DEFAULT_STRATEGY):
    """All-reduce one tensor over all ranks; ``horovod.tensorflow.allreduce``'s signature + ``strategy=``.

    Args:
        tensor: a dense ``tf.Tensor``/``tf.Variable``/Keras variable (any shape; same shape and dtype on
            every rank) or a ``tf.IndexedSlices`` (:func:`reduce_sparse`).
        op: ``hvd.Average`` (None: the default) or ``hvd.Sum`` through the torus; Min, Max and Product
            go through Horovod's own all-reduce (with every strategy built in); ``average`` is Horovod's
            deprecated boolean form.
        compression, prescale_factor, postscale_factor, name: as in Horovod.
        process_set: only ``hvd.global_process_set``.
        device_dense, device_sparse: ``tf.device`` of each path ('' = TensorFlow's choice).
        ignore_name_scope: accepted for signature compatibility (names come from the strategy).
        strategy: keyword-only; a registered name or a strategy callable.

    Returns:
        A tensor of the input's shape and dtype (IndexedSlices for IndexedSlices). Differentiable: the
        gradient is the same all-reduce of the upstream gradient (as in Horovod).

    Raises:
        ValueError: an unknown strategy, a non-global process set, op and average both given.
        TypeError / ValueError from the strategy: e.g. an unsupported dtype or op for the torus.
        tf.errors.FailedPreconditionError: the ranks passed different shapes, dtypes, op or factors.
    """
    return grouped_allreduce([tensor], average, device_dense, device_sparse, compression, op,
                             prescale_factor, postscale_factor, process_set, ignore_name_scope, name,
                             strategy=strategy)[0]


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=_hvd.global_process_set, ignore_name_scope=False, name=None, *,
                      strategy=DEFAULT_STRATEGY):
    """All-reduce a list of tensors in ONE strategy call; ``horovod.tensorflow.grouped_allreduce``'s
    signature + ``strategy=``. See :func:`allreduce` for the arguments; returns a list."""
    fn = resolve_strategy(strategy)
    op = _resolve_op(op, average)
    check_process_set(process_set)
    tensors = list(tensors)
    out = [None] * len(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if len(dense) < len(tensors):  # sparse members: Horovod's rules checked before any collective
        check_sparse(op, prescale_factor, postscale_factor)
    if dense:
        with tf.device(device_dense):
            reduced = fn([tf.convert_to_tensor(tensors[i]) for i in dense], op, name, compression,
                         prescale_factor, postscale_factor)
        for i, r in zip(dense, reduced):
            out[i] = r
    with tf.device(device_sparse):
        for i, t in enumerate(tensors):
            if isinstance(t, tf.IndexedSlices):
                out[i] = reduce_sparse(t, op, prescale_factor, postscale_factor, name and f"{name}_{i}")
    return out
