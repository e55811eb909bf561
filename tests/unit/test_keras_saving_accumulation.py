"""The DistributedOptimizer's state comes back exactly through model.save + hvd.load_model, tf.train.Checkpoint
and the app's CheckpointStore, for backward_passes_per_step 1, 2 and 4, with and without mixed precision;
plain keras.models.load_model restores iterations and moments; loads that would drop state raise (no MPI).

The model trains 5 steps, so with k = 2 and k = 4 the accumulators hold the partial sum of one pass when
it is saved: they are non-zero, and their exact return is checked with the rest.
"""
import contextlib
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import horovod_torus.tensorflow.keras as khvd
from horovod_torus.tensorflow.keras.optimizer import _DistributedOptimizerMixin
from horovod_torus.tensorflow.keras.optimizer_state import WrapperState, saved_backward_passes
from keras_app.checkpoint import CheckpointError, CheckpointStore

CASES = [(k, mp) for mp in (False, True) for k in (1, 2, 4)]
IDS = [f"k{k}{'-mixed_float16' if mp else ''}" for k, mp in CASES]
STEPS = 5


def identity(tensors, op, name, compression, prescale_factor, postscale_factor):
    return [t * 1 for t in tensors]


@contextlib.contextmanager
def policy(mixed):
    keras.config.set_dtype_policy("mixed_float16" if mixed else "float32")
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


def _data(steps=STEPS):
    rng = np.random.default_rng(0)
    return rng.normal(size=(2 * steps, 3)).astype("float32"), rng.normal(size=(2 * steps, 2)).astype("float32")


def _compiled(k, mixed):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    inner = keras.optimizers.Adam(0.01)
    if mixed:
        inner = keras.optimizers.LossScaleOptimizer(inner, initial_scale=64.0)
    opt = khvd.DistributedOptimizer(inner, backward_passes_per_step=k, strategy=identity)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    return model, opt


def _trained(k, mixed, steps=STEPS):
    model, opt = _compiled(k, mixed)
    x, y = _data(steps)
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
    return model, opt


def _values(variables):
    return [np.array(v) for v in variables]


def _own(opt):
    """The wrapper's variables (accumulators, pass count), by their names."""
    return [v for v in opt.variables if "hvd_" in v.path.split("/")[-1]]


def _wrapped(opt):
    """The wrapped optimizer's variables, in its order."""
    return [v for v in opt.variables if "hvd_" not in v.path.split("/")[-1]]


def _assert_state_equal(opt, saved_opt):
    assert [(tuple(v.shape), v.dtype) for v in opt.variables] == [(tuple(v.shape), v.dtype)
                                                                  for v in saved_opt.variables]
    for got, want in zip(_values(opt.variables), _values(saved_opt.variables), strict=True):
        np.testing.assert_array_equal(got, want)


def _check_trained(opt, k):
    """The saved state is worth checking: iterations advanced, moments and (k > 1) accumulators non-zero."""
    assert int(opt.iterations.numpy()) == STEPS
    own = _own(opt)
    assert len(own) == (0 if k == 1 else 5)                 # 4 accumulators + the pass count
    if k > 1:
        assert int(own[-1].numpy()) == STEPS and all(np.any(np.array(a)) for a in own[:-1])
    assert all(np.any(np.array(v)) for v in opt.variables if "momentum" in v.path or "velocity" in v.path)


@pytest.mark.parametrize("k, mixed", CASES, ids=IDS)
def test_save_and_hvd_load_model_restore_every_variable_exactly(tmp_path, k, mixed):
    with policy(mixed):
        model, opt = _trained(k, mixed)
        _check_trained(opt, k)
        path = str(tmp_path / "m.keras")
        model.save(path)
        loaded = khvd.load_model(path, strategy=identity)
        _assert_state_equal(loaded.optimizer, opt)
        assert loaded.optimizer._hvd_passes == k
        assert saved_backward_passes(path) == (None if k == 1 else k)
        _assert_state_equal(khvd.load_model(path, strategy=identity, backward_passes_per_step=k).optimizer, opt)
        x, y = _data(3)                                  # both continue identically (update on step 6/8)
        model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
        loaded.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
        _assert_state_equal(loaded.optimizer, opt)
        for a, b in zip(loaded.weights, model.weights):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_loss_scale_optimizer_around_the_wrapper_loads_in_its_form(tmp_path, k):
    """LossScaleOptimizer(DistributedOptimizer(opt, k)) (the second mixed-precision form) comes back from
    hvd.load_model with every variable, the partial gradient sum included, and trains on identically;
    with k > 1 in that form (the file has the wrapper's state inside the LossScaleOptimizer)."""
    with policy(True):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        dist = khvd.DistributedOptimizer(keras.optimizers.Adam(0.01), backward_passes_per_step=k,
                                         strategy=identity)
        opt = keras.optimizers.LossScaleOptimizer(dist, initial_scale=64.0, dynamic_growth_steps=3)
        model.compile(optimizer=opt, loss="mse", jit_compile=False)
        x, y = _data()
        model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
        assert int(np.array(opt.dynamic_scale)) == 128          # grown once: the scale is state too
        path = str(tmp_path / "m.keras")
        model.save(path)
        assert saved_backward_passes(path, "optimizer/inner_optimizer") == (None if k == 1 else k)
        loaded = khvd.load_model(path, strategy=identity)
        _assert_state_equal(loaded.optimizer, opt)
        if k > 1:
            assert isinstance(loaded.optimizer, keras.optimizers.LossScaleOptimizer)
            inner = loaded.optimizer.inner_optimizer
            assert khvd.is_distributed_optimizer(inner) and inner._hvd_passes == k
            assert loaded.optimizer.dynamic_growth_steps == 3
            assert int(np.array(_own(opt)[-1])) == STEPS and np.any(np.array(_own(opt)[0]))  # a partial sum
        x, y = _data(3)
        model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
        loaded.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0)
        _assert_state_equal(loaded.optimizer, opt)
        for a, b in zip(loaded.weights, model.weights):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k, mixed", CASES, ids=IDS)
def test_plain_keras_load_model_restores_iterations_and_moments(tmp_path, k, mixed):
    with policy(mixed):
        model, opt = _trained(k, mixed)
        path = str(tmp_path / "m.keras")
        model.save(path)
        with warnings.catch_warnings():
            warnings.simplefilter("error")               # Keras warns when it skips the optimizer
            plain = keras.models.load_model(path).optimizer
        assert not khvd.is_distributed_optimizer(plain)
        wrapped = _wrapped(opt)
        assert len(plain.variables) == len(wrapped)
        for got, want in zip(_values(plain.variables), _values(wrapped), strict=True):
            np.testing.assert_array_equal(got, want)
        assert int(plain.iterations.numpy()) == STEPS


@pytest.mark.parametrize("k, mixed", CASES, ids=IDS)
def test_tf_train_checkpoint_restores_every_variable_exactly(tmp_path, k, mixed):
    with policy(mixed):
        model, opt = _trained(k, mixed)
        prefix = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
        fresh, fresh_opt = _compiled(k, mixed)
        status = tf.train.Checkpoint(model=fresh, optimizer=fresh_opt).restore(prefix)
        fresh_opt.build(fresh.trainable_variables)    # deferred restoration fills the created variables
        status.assert_consumed()
        _assert_state_equal(fresh_opt, opt)
        if k > 1:                                     # another k: TensorFlow's own check names the leftovers
            other, other_opt = _compiled(1, mixed)
            status = tf.train.Checkpoint(model=other, optimizer=other_opt).restore(prefix)
            other_opt.build(other.trainable_variables)
            with pytest.raises(AssertionError, match="hvd_"):
                status.assert_consumed()


@pytest.mark.parametrize("k, mixed", CASES, ids=IDS)
def test_app_checkpoint_store_restores_every_variable_exactly(tmp_path, k, mixed):
    with policy(mixed):
        model, opt = _trained(k, mixed)
        store = CheckpointStore(str(tmp_path))
        store.save(1, model, opt, {})
        fresh, fresh_opt = _compiled(k, mixed)
        store.restore(1, fresh, fresh_opt)
        _assert_state_equal(fresh_opt, opt)
        if k > 1:
            other, other_opt = _compiled(1, mixed)
            with pytest.raises(CheckpointError, match="backward_passes_per_step"):
                store.restore(1, other, other_opt)


def test_load_that_would_drop_accumulation_raises_with_the_fix(tmp_path):
    model, _ = _trained(2, False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    with pytest.raises(ValueError, match=r"gradient sum of 1 of the 2 passes.*backward_passes_per_step=1.*"
                                         r"Load with backward_passes_per_step=2"):
        khvd.load_model(path, strategy=identity, backward_passes_per_step=1)
    with pytest.raises(ValueError, match="backward_passes_per_step=4"):
        khvd.load_model(path, strategy=identity, backward_passes_per_step=4)
    other, other_opt = _compiled(1, False)
    other_opt.build(other.trainable_variables)
    with pytest.raises(ValueError, match="Load with backward_passes_per_step=2"):
        other.load_weights(path)
    other, other_opt = _compiled(1, False)
    other.load_weights(path)                       # not built: kept, and refused when build creates them
    with pytest.raises(ValueError, match="Load with backward_passes_per_step=2"):
        other_opt.build(other.trainable_variables)


def test_another_k_loads_when_nothing_is_accumulated(tmp_path):
    """Saved after a multiple of k steps the accumulators are zero: any k takes the state, its cycle
    starting afresh."""
    model, opt = _trained(2, False, steps=4)
    path = str(tmp_path / "m.keras")
    model.save(path)
    for k in (1, 4):
        loaded = khvd.load_model(path, strategy=identity, backward_passes_per_step=k)
        got = loaded.optimizer
        for a, b in zip(_values(_wrapped(got)), _values(_wrapped(opt)), strict=True):
            np.testing.assert_array_equal(a, b)
        assert all(not np.any(np.array(v)) for v in _own(got))


def test_load_weights_into_another_optimizer_raises_instead_of_skipping(tmp_path):
    model, _ = _trained(2, False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    keras.utils.set_random_seed(0)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    other.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                                      strategy=identity), loss="mse")
    other.optimizer.build(other.trainable_variables)
    with pytest.raises(ValueError, match=r"the saved optimizer has 10 variables, this one 2: its state would be dropped"):
        other.load_weights(path)


def test_files_written_before_the_wrapper_state_was_saved_apart_still_load(tmp_path, monkeypatch):
    """Earlier files hold every variable in optimizer/vars, the wrapper's in the wrapped class' order."""
    def old_save(self, store):
        for i, v in enumerate(super(_DistributedOptimizerMixin, self).variables):
            store[str(i)] = v.numpy()
    for mixed in (False, True):
        with policy(mixed):
            model, opt = _trained(2, mixed)
            path = str(tmp_path / f"old-{mixed}.keras")
            with monkeypatch.context() as m:
                m.setattr(_DistributedOptimizerMixin, "save_own_variables", old_save)
                m.setattr(WrapperState, "save_own_variables", lambda self, store: None)
                model.save(path)
            with warnings.catch_warnings():
                warnings.simplefilter("error")          # plain Keras skips it; load_model does not
                loaded = khvd.load_model(path, strategy=identity, backward_passes_per_step=2)
            _assert_state_equal(loaded.optimizer, opt)


_PLAIN = """
import sys, keras, numpy as np
opt = keras.models.load_model(sys.argv[1]).optimizer
assert not any(m.startswith("horovod") for m in sys.modules), "horovod imported"
want = np.load(sys.argv[2])
got = [np.array(v) for v in opt.variables]
assert len(got) == len(want.files), (len(got), len(want.files))
for i, g in enumerate(got):
    np.testing.assert_array_equal(g, want[f"v{i}"])
print("iterations", int(opt.iterations.numpy()))
"""


def test_plain_keras_without_horovod_torus_restores_iterations_and_moments(tmp_path):
    model, opt = _trained(2, False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    np.savez(tmp_path / "want.npz", **{f"v{i}": a for i, a in enumerate(_values(_wrapped(opt)))})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="error::UserWarning")
    out = subprocess.run([sys.executable, "-c", _PLAIN, path, str(tmp_path / "want.npz")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"iterations {STEPS}" in out.stdout


@pytest.mark.parametrize("k, mixed", [(2, False), (4, True)], ids=["k2", "k4-mixed_float16"])
def test_load_weights_before_build_is_assigned_at_build(tmp_path, k, mixed):
    with policy(mixed):
        model, opt = _trained(k, mixed)
        path = str(tmp_path / "m.weights.h5")
        model.save_weights(path)
        fresh, fresh_opt = _compiled(k, mixed)
        with warnings.catch_warnings():             # a LossScaleOptimizer's inner one (plain Keras) still
            warnings.simplefilter("ignore")         # warns; the wrapper keeps its values, inner's included
            fresh.load_weights(path)                # (Keras alone would drop the optimizer state)
        assert not fresh_opt.built
        fresh_opt.build(fresh.trainable_variables)
        _assert_state_equal(fresh_opt, opt)


def test_a_partial_sum_loaded_on_several_ranks_warns_and_a_window_boundary_does_not(tmp_path, monkeypatch):
    """The file holds the saving rank's accumulators: on more than one rank, loading a partial sum says that
    every rank now has that rank's sum (the resume is then not exact) and how to save for an exact one."""
    import horovod.tensorflow as hvd
    from horovod_torus.tensorflow.keras.optimizer_state import PartialSumWarning

    model, _ = _trained(2, False)                                  # 5 steps: 1 of 2 passes summed
    boundary, _ = _trained(2, False, steps=4)
    model.save(tmp_path / "mid.keras")
    boundary.save(tmp_path / "end.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        khvd.load_model(str(tmp_path / "mid.keras"), strategy=identity)       # one rank: its own sum, exact
    monkeypatch.setattr(hvd, "is_initialized", lambda: True)
    monkeypatch.setattr(hvd, "size", lambda: 4)
    with pytest.warns(PartialSumWarning, match=r"1 of the 2 passes.*save after a multiple of 2 steps"):
        khvd.load_model(str(tmp_path / "mid.keras"), strategy=identity)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        khvd.load_model(str(tmp_path / "end.keras"), strategy=identity)
