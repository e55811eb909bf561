"""``DistributedGradientTape``: ``tape.gradient`` returns gradients all-reduced through a strategy."""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY
from horovod_torus.tensorflow.gradients import GradientReducer

__all__ = ["DistributedGradientTape"]


class _DistributedGradientTape(tf.GradientTape):
    """Methods of the tape class built by :func:`DistributedGradientTape` (a subclass of the tape's)."""

    def __init__(self, tape, reducer, persistent=False, watch_accessed_variables=True):
        super().__init__(persistent, watch_accessed_variables)
        self._tape = tape
        self._hvd_reducer = reducer

    def register_local_source(self, source):
        """Registers a source as local to this rank: its gradient is not all-reduced."""
        self._hvd_reducer.register_local_var(source)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """``tf.GradientTape.gradient``, then one strategy call reduces all the dense gradients.

        ``sources`` may be any nest (list, dict) of variables or tensors, Keras 3 variables included;
        the result has the same structure; None gradients stay None.
        """
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        reduced = self._hvd_reducer(tf.nest.flatten(grads), tf.nest.flatten(sources))
        return tf.nest.pack_sequence_as(sources, reduced)


def DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=_hvd.Compression.none,
                            sparse_as_dense=False, op=_hvd.Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=_hvd.global_process_set,
                            scale_local_gradients=True, *, strategy=DEFAULT_STRATEGY, bucket_bytes=None):
    """Wrap a ``tf.GradientTape`` so that ``gradient()`` all-reduces (through the torus by default).

    Same parameters, order and defaults as ``horovod.tensorflow.DistributedGradientTape`` (0.28.1);
    ``strategy`` (a registered name or a strategy callable) is the only addition, keyword-only.
    See :func:`horovod_torus.tensorflow.keras.DistributedOptimizer` for the meaning of each argument.

    Example::

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)                  # strategy="torus"
        grads = tape.gradient(loss, model.trainable_variables)   # averaged over all ranks
        opt.apply_gradients(zip(grads, model.trainable_variables))

    Raises:
        TypeError: ``gradtape`` is not a tf.GradientTape, or a strategy callable with wrong parameters.
        ValueError: an unknown strategy, bad groups, a non-global process set, predivide with op != Average.
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError(f"DistributedGradientTape needs a tf.GradientTape, got {gradtape!r} "
                        f"({type(gradtape).__name__})")
    if isinstance(gradtape, _DistributedGradientTape):
        raise ValueError("this tape is already a DistributedGradientTape; wrap it once")
    reducer = GradientReducer.from_horovod_args(
        strategy=strategy, op=op, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, groups=groups, num_groups=num_groups,
        device_dense=device_dense, device_sparse=device_sparse, scale_local_gradients=scale_local_gradients,
        process_set=process_set, bucket_bytes=bucket_bytes, name="DistributedGradientTape")
    base = type(gradtape)
    cls = type(base.__name__, (_DistributedGradientTape, base), {})
    return cls(gradtape._tape, reducer, gradtape._persistent, gradtape._watch_accessed_variables)
