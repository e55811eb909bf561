"""Label-smoothed cross-entropy for sparse integer labels, built on Keras' own cross-entropy."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops
from keras.src.losses.losses import LossFunctionWrapper  # the base of every Keras loss class

__all__ = ["LabelSmoothedSparseCategoricalCrossentropy", "label_smoothed_sparse_categorical_crossentropy"]


def _check_labels(labels, num_classes):
    """A ``tf.debugging.Assert`` that every label lies in ``[0, num_classes)``; its message names the first
    label outside and the class count. Returns the assert op (None when executed eagerly)."""
    labels = tf.convert_to_tensor(labels)
    num_classes = tf.cast(num_classes, labels.dtype)
    bad = tf.logical_or(labels < 0, labels >= num_classes)
    first_bad = tf.boolean_mask(labels, bad)[:1]
    message = tf.strings.format(
        "label_smoothed_sparse_categorical_crossentropy: label {} is outside [0, num_classes) for "
        "num_classes = {}: labels must be class ids 0..num_classes-1 (check the dataset's label offset "
        "and the model's number of classes)", (first_bad, num_classes))
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [message])


def label_smoothed_sparse_categorical_crossentropy(y_true, y_pred, label_smoothing=0.1, from_logits=False,
                                                   axis=-1):
    """Per-example loss ``-sum_k q_k log p_k`` with ``q = (1 - eps) * onehot(y) + eps / K``.

    Args:
        y_true: integer class ids, shape ``[B]`` or ``[B, 1]``, values in ``[0, K)``.
        y_pred: probabilities (or logits with ``from_logits=True``), shape ``[B, K]``, float.
        label_smoothing: ``eps`` in [0, 1); 0 gives plain sparse categorical cross-entropy.
    Returns:
        float tensor of shape ``[B]``. Equals ``keras.losses.categorical_crossentropy(onehot(y), y_pred,
        label_smoothing=eps)`` (Keras applies ``q = onehot * (1 - eps) + eps / K``), which it calls.
    Raises:
        tf.errors.InvalidArgumentError: a label outside ``[0, K)`` (``one_hot`` would silently give it
            an all-zero row, hence a finite, wrong loss); the message names the first such label and K.
            Checked eagerly and inside ``tf.function`` / ``fit`` (a ``tf.debugging.Assert``); XLA
            (``jit_compile=True``) drops the check.
    Source: Szegedy et al. 2016, "Rethinking the Inception Architecture", section 7.
    """
    num_classes = ops.shape(y_pred)[axis]
    y_true = ops.cast(y_true, "int32")
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    with tf.control_dependencies([_check_labels(y_true, num_classes)]):
        onehot = ops.one_hot(tf.identity(y_true), num_classes, dtype=y_pred.dtype)
    return keras.losses.categorical_crossentropy(onehot, y_pred, from_logits=from_logits,
                                                 label_smoothing=label_smoothing, axis=axis)


@keras.saving.register_keras_serializable(package="keras_app")
class LabelSmoothedSparseCategoricalCrossentropy(LossFunctionWrapper):
    """Keras loss: cross-entropy against ``(1 - eps) * onehot(y) + eps / K`` for integer labels ``y``.

    ``keras.losses.CategoricalCrossentropy(label_smoothing=eps)`` needs one-hot targets and
    ``SparseCategoricalCrossentropy`` has no smoothing; this takes sparse labels (shape ``[B]`` or
    ``[B, 1]``) and computes exactly the former on their one-hot encoding, reduced like any Keras loss
    (default: mean over the batch).

    Example::

        loss = LabelSmoothedSparseCategoricalCrossentropy(0.1, from_logits=True)
        loss([2], [[0.0, 0.0, 0.0]])   # log(3) = 1.0986...
    """

    def __init__(self, label_smoothing=0.1, from_logits=False, axis=-1,
                 reduction="sum_over_batch_size", name="label_smoothed_sparse_categorical_crossentropy",
                 dtype=None):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1)")
        super().__init__(label_smoothed_sparse_categorical_crossentropy, name=name, reduction=reduction,
                         dtype=dtype, label_smoothing=label_smoothing, from_logits=from_logits, axis=axis)
        self.label_smoothing, self.from_logits, self.axis = label_smoothing, from_logits, axis

    def get_config(self):
        return {"name": self.name, "reduction": self.reduction, "label_smoothing": self.label_smoothing,
                "from_logits": self.from_logits, "axis": self.axis}
