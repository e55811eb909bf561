"""Rank-dependent early stops and per-rank random state under a real launch.

A stop decided on one rank (TerminateOnNaN on that rank's NaN loss, EarlyStopping on that rank's metric,
a callback setting ``model.stop_training``) must stop every rank after the same step: otherwise the
other ranks wait forever in the next gradient all-reduce. A watchdog (faulthandler) ends a process that
hangs here after WATCHDOG_S seconds with its stack, so a hang fails the launch instead of blocking it.
The broadcast callback must leave each rank's random state (Dropout masks) its own.
"""
import faulthandler
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf
import horovod.tensorflow as flat_hvd

SPE = 6            # steps per epoch
WATCHDOG_S = 240   # far above a few tiny steps, even on a loaded machine


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class Counter(keras.callbacks.Callback):
    """Batches and epochs this rank ran, as (epoch, batch) pairs and epoch-end calls."""

    def __init__(self):
        super().__init__()
        self.batches, self.epoch_ends, self.epoch = [], [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((self.epoch, batch))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends.append(epoch)


def _fit(callbacks, x=None, epochs=3, seed=0):
    import horovod_torus.tensorflow.keras as khvd
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    if x is None:
        x = np.random.default_rng(seed).normal(size=(SPE * 2, 2)).astype("float32")
    counter = Counter()
    model.fit(x, np.ones((len(x), 1), np.float32), batch_size=2, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0), counter] + callbacks)
    return model, counter


def _gather(counter):
    """Every rank's (batches run, epoch ends run, last batch): equal on all ranks when they stopped together."""
    last = counter.batches[-1]
    row = tf.constant([[len(counter.batches), len(counter.epoch_ends), last[0], last[1]]], tf.int64)
    return flat_hvd.allgather(row, name="faults_counter").numpy()


def _nan_data(rank, size, epoch, batch):
    x = np.random.default_rng(rank).normal(size=(SPE * 2, 2)).astype("float32")
    if rank == size - 1:                      # only the last rank gets a NaN input, at (epoch, batch)
        x[2 * batch] = np.nan                 # batch_size 2, no shuffle: epoch doesn't change the rows
    return x


def test_nan_loss_on_one_rank_stops_every_rank_after_the_same_batch(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    assert size > 1, "needs at least 2 ranks"
    stop = khvd.callbacks.StopTogetherCallback()
    _, counter = _fit([keras.callbacks.TerminateOnNaN(), stop], x=_nan_data(rank, size, 0, 3))
    rows = _gather(counter)
    # the last rank's loss is NaN at batch 3 of epoch 0: every rank ran batches 0..3 and that epoch's end
    np.testing.assert_array_equal(rows, [[4, 1, 0, 3]] * size)
    assert stop.stopped == {"epoch": 0, "batch": 3, "stop_ranks": [size - 1], "nan_ranks": [size - 1]}


def test_nan_loss_without_terminate_on_nan_and_on_nan_raise(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    stop = khvd.callbacks.StopTogetherCallback()         # looks at the loss itself (on_nan="stop")
    _, counter = _fit([stop], x=_nan_data(rank, size, 0, 2))
    rows = _gather(counter)
    np.testing.assert_array_equal(rows, [[3, 1, 0, 2]] * size)
    assert stop.stopped["nan_ranks"] == [size - 1] and stop.stopped["stop_ranks"] == []
    raising = khvd.callbacks.StopTogetherCallback(on_nan="raise")
    counter = Counter()
    error = None
    try:
        _fit([counter, raising], x=_nan_data(rank, size, 0, 1))
    except FloatingPointError as err:
        error = str(err)
    got = flat_hvd.allgather(tf.constant([[len(counter.batches), len(counter.epoch_ends)]], tf.int64),
                             name="faults_raise").numpy()
    assert error is not None and f"non-finite loss on rank(s) [{size - 1}] at epoch 0 batch 1" in error
    np.testing.assert_array_equal(got, [[2, 0]] * size)     # no epoch end (no checkpoint of NaN weights)


def test_one_rank_setting_stop_training_mid_epoch_stops_every_rank(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world

    class StopOnOneRank(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if rank == 1 and (self.epoch, batch) == (1, 4):
                self.model.stop_training = True

    _, counter = _fit([StopOnOneRank(), khvd.callbacks.StopTogetherCallback()])
    np.testing.assert_array_equal(_gather(counter), [[SPE + 5, 2, 1, 4]] * size)


def test_early_stopping_on_a_rank_dependent_metric_stops_every_rank(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world

    class RankMetric(keras.callbacks.Callback):
        """A metric that stops improving after epoch 1 on rank 0 only."""

        def on_epoch_end(self, epoch, logs=None):
            logs["rank_metric"] = 1.0 if (rank == 0 and epoch >= 1) else -float(epoch)

    early = keras.callbacks.EarlyStopping(monitor="rank_metric", mode="min", patience=0)
    stop = khvd.callbacks.StopTogetherCallback()
    _, counter = _fit([RankMetric(), early, stop], epochs=4)
    np.testing.assert_array_equal(_gather(counter), [[2 * SPE, 2, 1, SPE - 1]] * size)
    assert stop.stopped == {"epoch": 1, "batch": None, "stop_ranks": [0], "nan_ranks": []}


def test_stop_together_rejects_bad_on_nan(hvd):
    import horovod_torus.tensorflow.keras as khvd
    with pytest.raises(ValueError, match="on_nan='ignore' must be"):
        khvd.callbacks.StopTogetherCallback(on_nan="ignore")


def test_broadcast_keeps_per_rank_dropout_masks_and_equal_weights(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    keras.utils.set_random_seed(1000 + rank)          # per-rank random state, seeded from the rank
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.Dropout(0.5),
                              keras.layers.Dense(1)])
    model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    cb = khvd.callbacks.BroadcastGlobalVariablesCallback(0)
    cb.set_model(model)
    cb.on_train_begin()
    crc = 0
    for w in model.weights + model.optimizer.variables:
        crc = zlib.crc32(np.asarray(w).tobytes(), crc)
    mask = np.asarray(model.layers[1](tf.ones([4, 64]), training=True)) != 0     # this rank's draw
    rows = flat_hvd.allgather(tf.constant([[crc] + np.packbits(mask).tolist()], tf.int64),
                              name="faults_dropout").numpy()
    assert len(set(rows[:, 0].tolist())) == 1, "weights or optimizer state differ after the broadcast"
    assert len({tuple(r) for r in rows[:, 1:].tolist()}) == size, "ranks drew the same dropout mask"
    assert 0.3 < mask.mean() < 0.7
