"""Validation that is exact on shards of different sizes: every rank sums (loss, top-1 hits, top-5 hits,
examples) over its shard, one all-reduce adds the sums, and the metrics are sums / examples.

Averaging per-rank means with equal weight (Keras ``evaluate`` on each rank + ``MetricAverageCallback``)
is wrong when the shards differ in size: 10 images on 4 ranks are shards of 3, 3, 2, 2, and rank means
1/3, 1/3, 1/2, 0 average to 0.2917 while the exact top-1 is 3/10 = 0.30.
"""
from __future__ import annotations

import time

import keras
import numpy as np
import tensorflow as tf

__all__ = ["FIELDS", "shard_sums", "combine", "ExactValidation"]

#: Order of the summed quantities in the vector every rank contributes to the all-reduce.
FIELDS = ("loss_sum", "top1_hits", "top5_hits", "examples")


def shard_sums(model, dataset, loss_fn, k: int = 5) -> np.ndarray:
    """Sums over one rank's validation shard: float64 ``[4]`` = (sum of per-example loss, top-1 hits,
    top-k hits, examples). ``loss_fn(y, logits)`` is a Keras loss (its mean over a batch is multiplied by
    the batch size). The model runs in inference mode; logits are cast to float32."""
    @tf.function
    def step(x, y):
        logits = tf.cast(model(x, training=False), tf.float32)
        y = tf.cast(y, tf.int32)
        n = tf.cast(tf.shape(y)[0], tf.float64)
        top1 = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y), tf.float64)
        topk = tf.cast(tf.math.in_top_k(y, logits, min(k, logits.shape[-1])), tf.float64)
        loss = tf.cast(loss_fn(y, logits), tf.float64) * n
        return tf.stack([loss, tf.reduce_sum(top1), tf.reduce_sum(topk), n])

    total = np.zeros(len(FIELDS), np.float64)
    for x, y in dataset:
        total += step(x, y).numpy()
    return total


def combine(sums) -> dict:
    """Metrics from summed shard sums: ``{"val_loss", "val_top1", "val_top5", "val_examples"}``.
    Raises ValueError when no rank had an example."""
    loss, top1, top5, n = (float(v) for v in sums)
    if n <= 0:
        raise ValueError("the validation split is empty on every rank: check --val-examples and --data-dir")
    return {"val_loss": loss / n, "val_top1": top1 / n, "val_top5": top5 / n, "val_examples": int(n)}


class ExactValidation(keras.callbacks.Callback):
    """At the end of every ``every``-th epoch (and the last one), evaluate this rank's shard, all-reduce the
    sums (``allreduce_sum``: float64 [4] -> float64 [4] summed over ranks, a collective every rank calls at
    the same epochs; numpy in, array-like out) and write ``val_loss``, ``val_top1``, ``val_top5`` and ``val_seconds`` into the epoch
    logs, identical on every rank. Put it after MetricAverageCallback (which must not average these again)
    and before the recorder/checkpoint callbacks.

    Args:
        dataset: this rank's validation shard (``keras_app.data.val_dataset``).
        loss_fn: the training loss (``loss_fn(y, logits)`` -> batch mean).
        allreduce_sum: e.g. ``lambda v: hvd.allreduce(v, op=hvd.Sum).numpy()``.
        every: validate after epochs e with ``(e + 1) % every == 0``.
        last_epoch: the run's number of epochs (its last epoch is always validated).
        share_state: called with the model before the evaluation, e.g. broadcasting rank 0's
            non-trainable variables (BatchNormalization's moving statistics, which each rank updates from
            its own batches): then every shard is evaluated with the same model, the one rank 0
            checkpoints, and a resumed run continues from exactly the state of the uninterrupted one.
    """

    def __init__(self, dataset, loss_fn, allreduce_sum, every: int = 1, last_epoch: int | None = None,
                 share_state=None):
        super().__init__()
        if every < 1:
            raise ValueError(f"val_every_epochs={every} must be >= 1")
        self.dataset, self.loss_fn, self.allreduce_sum = dataset, loss_fn, allreduce_sum
        self.every, self.last_epoch, self.share_state = every, last_epoch, share_state

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every and epoch + 1 != self.last_epoch:
            return
        t0 = time.perf_counter()
        if self.share_state is not None:
            self.share_state(self.model)
        sums = np.asarray(self.allreduce_sum(shard_sums(self.model, self.dataset, self.loss_fn)), np.float64)
        if logs is not None:
            logs.update(combine(sums))
            logs["val_seconds"] = time.perf_counter() - t0
