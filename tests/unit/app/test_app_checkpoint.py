"""Checkpoints: round trip of weights + optimizer state, atomicity (a failed save leaves the previous one
intact), a damaged checkpoint gives a clear error and is left untouched, retention."""
import os

import keras
import numpy as np
import pytest

from keras_app.checkpoint import CheckpointError, CheckpointStore


def _model(seed):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(),
                          keras.layers.Dense(2)])
    m.compile(keras.optimizers.SGD(0.1, momentum=0.9), "mse")
    m.fit(np.random.rand(8, 3), np.random.rand(8, 2), epochs=1, verbose=0)   # builds momentum slots
    return m


def _files(path):
    return {f: open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path))}


def test_round_trip(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=2)
    a = _model(0)
    store.save(3, a, a.optimizer, {"epochs": [{"epoch": 3}]})
    b = _model(1)
    state = store.restore(3, b, b.optimizer)
    assert state == {"epochs": [{"epoch": 3}]}
    for x, y in zip(a.weights + a.optimizer.variables, b.weights + b.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(b.optimizer.iterations.numpy()) == 1
    for e in (4, 5):
        store.save(e, a, a.optimizer, {})
    assert store.epochs() == [4, 5]                      # keep=2


def test_failed_save_leaves_previous_intact(tmp_path):
    store = CheckpointStore(str(tmp_path))
    m = _model(0)
    store.save(1, m, m.optimizer, {})
    before = _files(store.path(1))

    class Broken:
        variables = m.optimizer.variables[:1] + [object()]   # np.asarray(object().numpy()) fails
    with pytest.raises(AttributeError):
        store.save(2, m, Broken(), {})
    assert store.epochs() == [1] and os.listdir(str(tmp_path)) == ["ckpt-0001"]
    assert _files(store.path(1)) == before
    m2 = _model(2)
    store.restore(1, m2, m2.optimizer)


def test_damaged_checkpoint_clear_error_previous_untouched(tmp_path):
    store = CheckpointStore(str(tmp_path))
    m = _model(0)
    store.save(1, m, m.optimizer, {})
    store.save(2, m, m.optimizer, {})
    before = _files(store.path(1))
    with open(os.path.join(store.path(2), "model.weights.h5"), "r+b") as fh:
        fh.seek(200)
        fh.write(b"\x00garbage\x00")
    damaged = _files(store.path(2))
    with pytest.raises(CheckpointError) as err:
        store.restore(2, _model(1), _model(1).optimizer)
    msg = str(err.value)
    assert store.path(2) in msg and "model.weights.h5 does not match its SHA-256" in msg
    assert f"delete {store.path(2)} to resume from {store.path(1)}" in msg
    assert _files(store.path(1)) == before and _files(store.path(2)) == damaged
    m1 = _model(1)
    store.restore(1, m1, m1.optimizer)                  # the previous one still loads


def test_checkpoint_of_another_model(tmp_path):
    store = CheckpointStore(str(tmp_path))
    m = _model(0)
    store.save(1, m, m.optimizer, {})
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    other.compile(keras.optimizers.SGD(0.1), "mse")
    with pytest.raises(CheckpointError, match="does not fit this model/optimizer"):
        store.restore(1, other, other.optimizer)


def _lso_model(seed, wrap=True):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1, momentum=0.9)
    m.compile(keras.optimizers.LossScaleOptimizer(opt, initial_scale=64.0) if wrap else opt, "mse")
    m.fit(np.random.rand(8, 3), np.random.rand(8, 2), epochs=1, verbose=0)
    return m


def test_loss_scale_optimizer_restored_by_name(tmp_path):
    """The wrapper's loss scale and the inner optimizer's slots land in the same roles, whatever Keras
    numbered the optimizers and layers in this process; a checkpoint of another optimizer is refused."""
    from keras_app.checkpoint import optimizer_variable_names
    store = CheckpointStore(str(tmp_path))
    a = _lso_model(0)
    a.optimizer.dynamic_scale.assign(8.0)
    store.save(1, a, a.optimizer, {})
    b = _lso_model(1)
    names = optimizer_variable_names(b.optimizer, b.trainable_variables)
    assert names[:4] == ["optimizer/iteration", "optimizer/learning_rate", "optimizer/step_counter",
                         "optimizer/dynamic_scale"]
    assert "inner_optimizer/var0/momentum" in names and "inner_optimizer/var3/momentum" in names
    store.restore(1, b, b.optimizer)
    assert float(b.optimizer.dynamic_scale.numpy()) == 8.0
    for x, y in zip(a.optimizer.variables, b.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    plain = _lso_model(2, wrap=False)
    with pytest.raises(CheckpointError, match=r"optimizer variables differ.*optimizer/dynamic_scale"):
        store.restore(1, plain, plain.optimizer)
