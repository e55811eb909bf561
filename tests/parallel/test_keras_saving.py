"""model.save on rank 0 after fit with gradient accumulation, hvd.load_model on every rank: every rank gets
exactly rank 0's saved optimizer state (iterations, moments, the loss scale, the accumulators with rank 0's
partial sum and the pass count), so every rank continues with the same weights.

Each rank fits on its own data for 5 steps, so with k = 2 and k = 4 the accumulators hold one pass of
rank-local gradients when rank 0 saves: they differ between ranks before the load and are equal after.
"""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import horovod.tensorflow as flat_hvd

STEPS = 5


def _barrier(tag):
    flat_hvd.allreduce(tf.constant(0.0), name=f"keras_saving_barrier_{tag}")


def _flat(opt):
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in opt.variables])


def _gathered(vector, tag):
    return flat_hvd.allgather(tf.constant(vector[np.newaxis]), name=f"keras_saving_{tag}").numpy()


def _fit(model, rank, steps):
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(2 * steps, 3)).astype("float32")
    model.fit(x, x[:, :2] * 0.5, batch_size=2, epochs=1, shuffle=False, verbose=0)


@pytest.mark.parametrize("k, mixed", [(2, False), (4, True)], ids=["k2", "k4-mixed_float16"])
def test_saved_on_rank_0_loaded_on_every_rank_equals_the_saved_state(hvd, world, k, mixed):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    keras.config.set_dtype_policy("mixed_float16" if mixed else "float32")
    try:
        keras.utils.set_random_seed(0)                   # the same initial weights on every rank
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        inner = keras.optimizers.Adam(0.01)
        if mixed:
            inner = keras.optimizers.LossScaleOptimizer(inner, initial_scale=64.0)
        model.compile(optimizer=khvd.DistributedOptimizer(inner, backward_passes_per_step=k), loss="mse",
                      jit_compile=False)
        _fit(model, rank, STEPS)
        before = _gathered(_flat(model.optimizer), f"before_{k}")
        path = os.path.join(os.environ.get("PAR_LOGDIR", "/tmp"), f"accumulating-k{k}-np{size}.keras")
        if rank == 0:
            model.save(path)
        _barrier(f"saved_{k}")
        loaded = khvd.load_model(path)
        after = _gathered(_flat(loaded.optimizer), f"after_{k}")
        _fit(loaded, rank, 3)                            # one more update (at step 6 or 8) on every rank
        weights = _gathered(np.concatenate([np.asarray(w, np.float64).ravel() for w in loaded.weights]),
                            f"weights_{k}")
        _barrier(f"loaded_{k}")                          # rank 0 deletes only after every rank has read
        if rank == 0:
            os.remove(path)
    finally:
        keras.config.set_dtype_policy("float32")

    opt = loaded.optimizer
    assert khvd.is_distributed_optimizer(opt) and opt._hvd_passes == k
    assert int(opt.iterations.numpy()) == STEPS + 3
    accumulators = [i for i, v in enumerate(opt.variables) if "hvd_accumulated_gradient" in v.path]
    assert len(accumulators) == 4
    if size > 1:
        assert not np.array_equal(before[0], before[1])  # rank-local partial sums before the save
    for r in range(size):
        np.testing.assert_array_equal(after[r], before[0], err_msg=f"rank {r} loaded state != rank 0's saved")
        np.testing.assert_array_equal(weights[r], weights[0], err_msg=f"rank {r} weights after the load")
