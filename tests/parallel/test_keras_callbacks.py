"""Keras 3 callbacks under a real launch: exact learning rates, metric averages, broadcast of state."""
import numpy as np
import pytest
import keras
import tensorflow as tf
import horovod.tensorflow as flat_hvd

SPE = 4   # steps per epoch


class Recorder(keras.callbacks.Callback):
    """Learning rate seen at each batch start, and the logs at each epoch end."""

    def __init__(self):
        super().__init__()
        self.lrs, self.logs, self.epoch = {}, {}, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs[(self.epoch, batch)] = float(self.model.optimizer.learning_rate.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self.logs[epoch] = dict(logs)


def tiny_fit(callbacks, epochs, initial_epoch=0, lr=1.0, seed=0, scale=1.0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(SPE * 2, 2)).astype("float32") * scale
    model.fit(x, x[:, :1], batch_size=2, epochs=epochs, initial_epoch=initial_epoch, shuffle=False,
              verbose=0, callbacks=callbacks)
    return model


def warmup_lr(initial, size, warmup, epoch, batch):
    """Horovod's formula, written out: the rate before batch `batch` of epoch `epoch`."""
    e = epoch + (batch + 1) / SPE
    return initial / size * (e * (size - 1) / warmup + 1)


def test_warmup_lr_per_step_and_resume_mid_warmup(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, _ = world
    full, resumed = Recorder(), Recorder()
    tiny_fit([khvd.callbacks.LearningRateWarmupCallback(0.8, warmup_epochs=3, momentum_correction=False),
              full], epochs=4)
    tiny_fit([khvd.callbacks.LearningRateWarmupCallback(0.8, warmup_epochs=3, momentum_correction=False),
              resumed], epochs=3, initial_epoch=1)
    for e in range(3):
        for b in range(SPE):
            assert full.lrs[(e, b)] == np.float32(warmup_lr(0.8, size, 3, e, b)), (e, b)
    assert full.lrs[(2, SPE - 1)] == np.float32(0.8)                 # warm-up ends on the target
    assert all(full.lrs[(3, b)] == np.float32(0.8) for b in range(SPE))  # and stays there
    for e in (1, 2):
        for b in range(SPE):
            assert resumed.lrs[(e, b)] == full.lrs[(e, b)], (e, b)
    assert full.logs[0]["lr"] == full.logs[0]["learning_rate"] == np.float32(warmup_lr(0.8, size, 3, 0, SPE - 1))


def test_fractional_warmup_reaches_and_holds_exactly_the_target(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, _ = world
    rec = Recorder()
    tiny_fit([khvd.callbacks.LearningRateWarmupCallback(0.2, warmup_epochs=0.5, momentum_correction=False),
              rec], epochs=3, lr=0.2 / size)
    ramp = [np.float32(warmup_lr(0.2, size, 0.5, 0, b)) for b in range(2)]   # batches 0, 1 of epoch 0
    assert ramp[-1] == np.float32(0.2)
    want = ramp + [np.float32(0.2)] * (3 * SPE - 2)                           # then exactly the target
    assert [rec.lrs[(e, b)] for e in range(3) for b in range(SPE)] == want
    assert [rec.logs[e]["lr"] for e in range(3)] == [np.float32(0.2)] * 3


def test_schedule_per_epoch_staircase_and_smooth(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    stair, smooth = Recorder(), Recorder()
    tiny_fit([khvd.callbacks.LearningRateScheduleCallback(0.5, 0.1, start_epoch=1, end_epoch=3,
                                                          momentum_correction=False), stair],
             epochs=4, lr=0.25)
    want = {0: 0.25, 1: 0.5, 2: 0.05, 3: 0.05}
    for e, lr in want.items():
        assert [stair.lrs[(e, b)] for b in range(SPE)] == [np.float32(lr)] * SPE, e
        assert stair.logs[e]["lr"] == np.float32(lr)
    tiny_fit([khvd.callbacks.LearningRateScheduleCallback(1.0, lambda ep: 1.0 / (1.0 + ep), staircase=False,
                                                          momentum_correction=False), smooth], epochs=2)
    for e in range(2):
        for b in range(SPE):
            assert smooth.lrs[(e, b)] == np.float32(1.0 / (1.0 + e + b / SPE))


def test_metric_average_with_rank_dependent_metrics(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    raw, averaged = Recorder(), Recorder()

    class RankMetric(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["rank_metric"] = float(rank + 1) * (epoch + 1)
            logs["per_class"] = np.array([rank, 2.0 * rank], np.float32)

    tiny_fit([RankMetric(), raw, khvd.callbacks.MetricAverageCallback(), averaged], epochs=2,
             seed=10 + rank, scale=1.0 + rank)    # rank-dependent data: rank-dependent losses
    raw_losses = flat_hvd.allgather(tf.constant([[raw.logs[e]["loss"] for e in range(2)]], tf.float64))
    for e in range(2):
        assert averaged.logs[e]["rank_metric"] == pytest.approx((size + 1) / 2 * (e + 1), rel=1e-12)
        np.testing.assert_allclose(averaged.logs[e]["per_class"], [(size - 1) / 2, size - 1], rtol=1e-12)
        assert averaged.logs[e]["loss"] == pytest.approx(float(np.mean(raw_losses.numpy()[:, e])), rel=1e-12)
    if size > 1:
        assert len(set(raw_losses.numpy()[:, 0].tolist())) == size    # the raw values did differ


def test_metric_average_rejects_different_metric_names_on_every_rank(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    cb = khvd.callbacks.MetricAverageCallback()
    logs = {"loss": 1.0, ("acc" if rank == 0 else "accuracy"): 0.5}
    if size == 1:
        pytest.fail("needs at least 2 ranks")
    with pytest.raises(ValueError, match="ranks log different metrics"):
        cb.on_epoch_end(0, logs)


def test_broadcast_model_and_lazily_created_optimizer_state(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    keras.utils.set_random_seed(rank)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = khvd.DistributedOptimizer(keras.optimizers.Adam(0.01 * (rank + 1)))
    model.compile(optimizer=opt, loss="mse")
    assert not opt.built
    cb = khvd.callbacks.BroadcastGlobalVariablesCallback(0)
    cb.set_model(model)
    cb.on_train_begin()                      # builds the Adam slots, then broadcasts everything
    built = opt.built
    flat = tf.concat([tf.reshape(tf.cast(v.value, tf.float64), [-1])
                      for v in model.variables + opt.variables], 0)
    gathered = flat_hvd.allgather(flat[tf.newaxis]).numpy()
    # built optimizer, rank-dependent state: iterations and a moment slot
    opt.iterations.assign(rank + 5)
    opt.variables[2].assign(tf.fill(opt.variables[2].shape, float(rank)))
    cb2 = khvd.callbacks.BroadcastGlobalVariablesCallback(size - 1)
    cb2.set_model(model)
    cb2.on_train_begin()
    state = flat_hvd.allgather(tf.constant([[float(opt.iterations.numpy()),
                                             float(opt.variables[2].numpy().ravel()[0])]])).numpy()
    assert built and len(opt.variables) > 2
    for r in range(size):
        np.testing.assert_array_equal(gathered[r], gathered[0])
    assert float(opt.learning_rate.numpy()) == np.float32(0.01)
    np.testing.assert_array_equal(state, [[size - 1 + 5, size - 1]] * size)
