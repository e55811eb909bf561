"""horovod_torus.tensorflow.keras.saving.load_model keeps the optimizer state that re-wrapping loses (no MPI).

The identity strategy stands in for the all-reduce of one process, so a loaded model must continue
exactly like the model that was saved.
"""
import numpy as np
import pytest
import keras

import horovod_torus.tensorflow.keras as khvd
from horovod_torus.tensorflow.keras.optimizer import is_distributed_optimizer
from horovod_torus.tensorflow.keras.saving import load_model


def identity(tensors, op, name, compression, prescale_factor, postscale_factor):
    return [t * 1 for t in tensors]


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")


def _trained(tmp_path, optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=khvd.DistributedOptimizer(optimizer, strategy=identity), loss="mse",
                  metrics=["mae"])
    x, y = _data()
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)        # 4 steps
    path = str(tmp_path / "model.keras")
    model.save(path)
    return model, path


@pytest.mark.parametrize("make", [lambda: keras.optimizers.Adam(0.01), lambda: keras.optimizers.SGD(0.1, 0.9)])
def test_iterations_and_moments_survive_and_training_continues_identically(tmp_path, make):
    model, path = _trained(tmp_path, make())
    saved = [np.array(v) for v in model.optimizer.variables]
    assert int(model.optimizer.iterations.numpy()) == 4
    assert any(np.abs(v).sum() > 0 for v in saved[2:])                     # real moments
    loaded = load_model(path, strategy=identity)
    opt = loaded.optimizer
    assert is_distributed_optimizer(opt) and type(opt).__name__ == type(model.optimizer).__name__
    assert int(opt.iterations.numpy()) == 4
    assert [v.shape for v in opt.variables] == [v.shape for v in model.optimizer.variables]
    for a, b in zip(opt.variables, saved):
        np.testing.assert_array_equal(np.array(a), b)
    x, y = _data()
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)        # 4 more steps, both
    loaded.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
    assert int(opt.iterations.numpy()) == 8
    for a, b in zip(loaded.weights, model.weights):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)
    assert loaded.get_compile_config()["metrics"] == ["mae"]


def test_model_saved_without_optimizer_and_bad_kwargs(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "bare.keras")
    model.save(path)
    assert getattr(load_model(path, strategy=identity), "optimizer", None) is None
    _, path = _trained(tmp_path, keras.optimizers.Adam(0.01))
    with pytest.raises(ValueError, match="backward_passes_per_step=0"):
        load_model(path, strategy=identity, backward_passes_per_step=0)
