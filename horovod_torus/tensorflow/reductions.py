"""``allreduce`` and ``grouped_allreduce`` with Horovod's signatures, reducing through a strategy.

Dense tensors go through the strategy (``"torus"`` by default, keyword-only ``strategy=``);
``tf.IndexedSlices`` go through Horovod's sparse path (an all-gather of values and indices), as in Horovod.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY, resolve_strategy
from horovod_torus.tensorflow.gradients import check_process_set

__all__ = ["allreduce", "grouped_allreduce"]

Compression = _hvd.Compression


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
            every rank) or a ``tf.IndexedSlices`` (all-gathered, Horovod's sparse path: op Average/Sum,
            no pre/postscale).
        op: ``hvd.Average`` (None: the default) or ``hvd.Sum``; ``strategy="ring"`` also takes Min, Max,
            Product. ``average`` is Horovod's deprecated boolean form.
        compression, prescale_factor, postscale_factor, name: as in Horovod.
        process_set: only ``hvd.global_process_set``.
        device_dense, device_sparse: ``tf.device`` of each path ('' = TensorFlow's choice).
        ignore_name_scope: accepted for signature compatibility (names come from the strategy).
        strategy: keyword-only; a registered name or a strategy callable.

    Returns:
        A tensor of the input's shape and dtype (IndexedSlices for IndexedSlices).

    Raises:
        ValueError: an unknown strategy, a non-global process set, op and average both given.
        TypeError / ValueError from the strategy: e.g. an unsupported dtype or op for the torus.
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
    if dense:
        with tf.device(device_dense):
            reduced = fn([tf.convert_to_tensor(tensors[i]) for i in dense], op, name, compression,
                         prescale_factor, postscale_factor)
        for i, r in zip(dense, reduced):
            out[i] = r
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _hvd.allreduce(t, device_sparse=device_sparse, op=op,
                                    prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                    name=name and f"{name}_{i}")
    return out
