"""The callbacks on a tiny Keras model: the learning rate used at every step, across a batch-size change
and across a resume, equals hand-computed values; global_batch and learning_rate reach the logs."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_app.callbacks import BatchSizeControl, LearningRateWarmup
from keras_app.config import OptimConfig

# schedule 0:4,1:8 on 16 examples, 3 epochs, warm-up 1 epoch, base 0.1 at batch 4, cosine to epoch 3.
# epoch 0 (batch 4, 4 steps, peak 0.1): warm-up 0.1 * e at e = 0, .25, .5, .75
# epoch 1, 2 (batch 8, 2 steps each, peak 0.2): 0.2 * (1 + cos(pi * (e - 1) / 2)) / 2 at e = 1, 1.5, 2, 2.5
EXPECTED = [0.0, 0.025, 0.05, 0.075, 0.2, 0.1 * (1 + math.cos(math.pi / 4)), 0.1,
            0.1 * (1 + math.cos(3 * math.pi / 4))]
EXPECTED_BATCH = [4, 4, 4, 4, 8, 8, 8, 8]


class _Seen(keras.callbacks.Callback):
    """The learning rate the optimizer holds while each step runs, and the epoch logs."""

    def __init__(self):
        super().__init__()
        self.lrs, self.logs = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs))


def _run(start, epochs, weights=None):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.5), "mse")
    if weights is not None:
        model.set_weights(weights)
    optim = OptimConfig(base_lr=0.1, base_batch=4, warmup_epochs=1.0, decay="cosine")
    control = BatchSizeControl("0:4,1:8")
    lr_cb = LearningRateWarmup.from_config(optim, 3, control.schedule)
    seen = _Seen()
    x, y = np.ones((16, 2), np.float32), np.ones((16, 1), np.float32)
    for stage in control.stages(epochs):
        if stage.end_epoch <= start:
            continue
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(stage.global_batch).repeat()
        control.set_pipeline_batch(stage.global_batch)
        model.fit(ds, steps_per_epoch=16 // stage.global_batch, initial_epoch=max(start, stage.start_epoch),
                  epochs=stage.end_epoch, callbacks=[control, lr_cb, seen], verbose=0)
    return lr_cb, seen, model


def test_exact_per_step_values_across_batch_change():
    lr_cb, seen, _ = _run(0, 3)
    np.testing.assert_allclose([h[2] for h in lr_cb.history], EXPECTED, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(seen.lrs, EXPECTED, rtol=1e-6, atol=1e-7)   # what the optimizer used
    assert [h[3] for h in lr_cb.history] == EXPECTED_BATCH
    assert [h[0] for h in lr_cb.history] == list(range(8))                  # optimizer steps
    assert [lg["global_batch"] for lg in seen.logs] == [4, 8, 8]
    np.testing.assert_allclose([lg["learning_rate"] for lg in seen.logs], [EXPECTED[i] for i in (3, 5, 7)])


def test_resume_gives_the_same_rates():
    _, first, model = _run(0, 2)                      # epochs 0 and 1, then "crash"
    lr_cb, second, _ = _run(2, 3, model.get_weights())  # resume at epoch 2
    np.testing.assert_allclose(first.lrs + second.lrs, EXPECTED, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose([h[2] for h in lr_cb.history], EXPECTED[6:], rtol=1e-12)


def test_pipeline_batch_mismatch_raises():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    control = BatchSizeControl("0:4,1:8")
    control.set_pipeline_batch(4)
    ds = tf.data.Dataset.from_tensor_slices((np.ones((16, 2)), np.ones((16, 1)))).batch(4).repeat()
    with pytest.raises(RuntimeError, match="yields global batch 4 but the batch schedule"):
        model.fit(ds, steps_per_epoch=2, epochs=2, callbacks=[control], verbose=0)
