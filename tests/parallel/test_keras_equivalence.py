"""DistributedOptimizer / DistributedGradientTape against one process trained on the concatenated batches.

Every rank trains on its own per-rank batches; the reference (computed locally on every rank, no
collective) trains one model on the global batches (all ranks' samples, rank order) with the same
optimizer. Mean losses make the two updates equal, so the weights must agree to float32 rounding after
several steps: atol = rtol = 2e-5 (1e-3 with fp16 compression, whose gradients carry 11 bits).
Weights are also compared across ranks (all-gather), and every collective runs before any assertion.
"""
import numpy as np
import pytest
import keras
import tensorflow as tf
import horovod.tensorflow as flat_hvd

STEPS, B, D = 4, 3, 5          # steps, per-rank batch, input features
TOL = dict(atol=2e-5, rtol=2e-5)


def data(size, seed=0, steps=STEPS, per_rank=B):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps, size * per_rank, D)).astype("float32")
    y = rng.normal(size=(steps, size * per_rank, 2)).astype("float32")
    return x, y


def rank_slice(a, rank, per_rank=B):
    return np.concatenate([a[s, rank * per_rank:(rank + 1) * per_rank] for s in range(a.shape[0])])


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((D,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(2)])


def reference(opt, x, y, seed=100, batch=None):
    model = make_model(seed)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x.reshape(-1, D), y.reshape(-1, 2), batch_size=batch or x.shape[1], shuffle=False,
              verbose=0)
    return model.get_weights()


def gather_weights(weights):
    flat = tf.concat([tf.reshape(w, [-1]) for w in weights], 0)
    return flat_hvd.allgather(flat[tf.newaxis]).numpy()


def check(world, got, want, gathered, tol=TOL):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **tol)
    assert gathered.shape[0] == world[0]
    for r in range(world[0]):
        np.testing.assert_array_equal(gathered[r], gathered[0])


@pytest.mark.parametrize("strategy", ["ring", "torus"])
def test_optimizer_fit_matches_single_process_after_broadcast(hvd, world, strategy):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    x, y = data(size)
    model = make_model(100 + rank)    # rank-dependent initial weights: the broadcast must fix them
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), strategy=strategy)
    model.compile(optimizer=opt, loss="mse")
    model.fit(rank_slice(x, rank), rank_slice(y, rank), batch_size=B, shuffle=False, verbose=0,
              callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    got = model.get_weights()
    gathered = gather_weights(got)
    want = reference(keras.optimizers.SGD(0.1, momentum=0.9), x, y)
    check(world, got, want, gathered)
    assert int(opt.iterations.numpy()) == STEPS


@pytest.mark.parametrize("strategy", ["ring", "torus"])
def test_gradient_tape_matches_single_process(hvd, world, strategy):
    size, rank = world
    x, y = data(size, seed=1)
    model = make_model(100)
    opt = keras.optimizers.Adam(0.05)
    xr, yr = rank_slice(x, rank).reshape(STEPS, B, D), rank_slice(y, rank).reshape(STEPS, B, 2)
    unused = tf.Variable(tf.ones([3]))     # no path to the loss: its gradient is None and stays None

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        tape = hvd.DistributedGradientTape(tape, strategy=strategy)
        grads = tape.gradient(loss, model.trainable_variables + [unused])
        opt.apply_gradients(zip(grads[:-1], model.trainable_variables))
        return grads[-1] is None

    nones = [step(xr[s], yr[s]) for s in range(STEPS)]
    got = model.get_weights()
    gathered = gather_weights(got)
    want = reference(keras.optimizers.Adam(0.05), x, y)
    check(world, got, want, gathered)
    assert all(nones)


def test_backward_passes_per_step_accumulates_then_reduces(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    passes = 2
    x, y = data(size, seed=2, steps=STEPS, per_rank=B * passes)
    model = make_model(100)
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.2), backward_passes_per_step=passes,
                                    average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    model.fit(rank_slice(x, rank, B * passes), rank_slice(y, rank, B * passes), batch_size=B,
              shuffle=False, verbose=0)
    got = model.get_weights()
    gathered = gather_weights(got)
    check(world, got, reference(keras.optimizers.SGD(0.2), x, y), gathered)
    assert int(opt.iterations.numpy()) == STEPS * passes


def test_a_later_fits_broadcast_leaves_each_ranks_partial_gradient_sum(hvd, world):
    """Two fits that split an accumulation window (3 local batches, then 5, with k = 2), each with a new
    BroadcastGlobalVariablesCallback, as scripts that build their callback list per fit do: the second
    broadcast must not copy rank 0's accumulators over the others' partial sums (the weights then match the
    single process on all the batches, as one fit does)."""
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    passes = 2
    x, y = data(size, seed=2, steps=STEPS, per_rank=B * passes)
    model = make_model(100 + rank)
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.2), backward_passes_per_step=passes,
                                    average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    xr, yr = rank_slice(x, rank, B * passes), rank_slice(y, rank, B * passes)
    for part in (slice(0, 3 * B), slice(3 * B, None)):
        model.fit(xr[part], yr[part], batch_size=B, shuffle=False, verbose=0,
                  callbacks=[khvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    got = model.get_weights()
    gathered = gather_weights(got)
    check(world, got, reference(keras.optimizers.SGD(0.2), x, y), gathered)
    assert int(opt.iterations.numpy()) == STEPS * passes


def test_fp16_compression_and_predivide(hvd, world):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    x, y = data(size, seed=3)
    model = make_model(100)
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), compression=khvd.Compression.fp16,
                                    gradient_predivide_factor=2.0)
    model.compile(optimizer=opt, loss="mse")
    model.fit(rank_slice(x, rank), rank_slice(y, rank), batch_size=B, shuffle=False, verbose=0)
    got = model.get_weights()
    gathered = gather_weights(got)
    check(world, got, reference(keras.optimizers.SGD(0.1), x, y), gathered, dict(atol=1e-3, rtol=1e-3))


@pytest.mark.parametrize("where", ["inside", "around"])
def test_loss_scale_optimizer_inside_or_around(hvd, world, where):
    import horovod_torus.tensorflow.keras as khvd
    LSO = keras.optimizers.LossScaleOptimizer
    size, rank = world
    x, y = data(size, seed=4)
    model = make_model(100)
    if where == "inside":
        opt = khvd.DistributedOptimizer(LSO(keras.optimizers.SGD(0.1), initial_scale=2.0 ** 8))
    else:
        opt = LSO(khvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), initial_scale=2.0 ** 8)
    model.compile(optimizer=opt, loss="mse")
    model.fit(rank_slice(x, rank), rank_slice(y, rank), batch_size=B, shuffle=False, verbose=0)
    got = model.get_weights()
    gathered = gather_weights(got)
    check(world, got, reference(keras.optimizers.SGD(0.1), x, y), gathered)


def test_overflow_on_one_rank_makes_every_rank_skip_the_step(hvd, world):
    """LossScaleOptimizer inside: the scaled gradients are reduced first, so an inf on the last rank
    reaches all ranks, which all skip the step and halve the loss scale together."""
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    model = make_model(100)
    before = model.get_weights()
    opt = khvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1),
                                                                         initial_scale=2.0 ** 8))
    with tf.GradientTape() as tape:
        loss = opt.scale_loss(tf.reduce_mean(tf.square(model(np.ones((B, D), "float32")) - 1.0)))
    grads = tape.gradient(loss, model.trainable_variables)
    if rank == size - 1:    # an fp16-style overflow in one gradient of one rank only
        grads[0] = grads[0] + np.inf
    opt.apply(grads, model.trainable_variables)
    scale = float(opt.dynamic_scale.numpy())
    after = model.get_weights()
    scales = flat_hvd.allgather(tf.constant([scale])).numpy()
    assert np.all(scales == 2.0 ** 7)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradients_sparse_path_and_sparse_as_dense(hvd, world, sparse_as_dense):
    import horovod_torus.tensorflow.keras as khvd
    size, rank = world
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 7, size=(STEPS, size * B, 2))
    y = rng.normal(size=(STEPS, size * B, 1)).astype("float32")

    def emb_model():
        keras.utils.set_random_seed(7)
        return keras.Sequential([keras.Input((2,), dtype="int32"), keras.layers.Embedding(7, 3),
                                 keras.layers.Flatten(), keras.layers.Dense(1)])

    model = emb_model()
    opt = khvd.DistributedOptimizer(keras.optimizers.SGD(0.3), sparse_as_dense=sparse_as_dense)
    model.compile(optimizer=opt, loss="mse")
    model.fit(rank_slice(ids, rank), rank_slice(y, rank), batch_size=B, shuffle=False, verbose=0)
    got = model.get_weights()
    gathered = gather_weights(got)
    ref = emb_model()
    ref.compile(optimizer=keras.optimizers.SGD(0.3), loss="mse")
    ref.fit(ids.reshape(-1, 2), y.reshape(-1, 1), batch_size=size * B, shuffle=False, verbose=0)
    check(world, got, ref.get_weights(), gathered)


def test_allreduce_strategies_sparse_and_local_sources(hvd, world):
    """hvd.allreduce/grouped_allreduce: torus == ring == numpy; IndexedSlices all-gathered; a local
    source's gradient is not reduced (divided by N, Horovod's scale_local_gradients)."""
    size, rank = world
    x = tf.constant(np.arange(7, dtype=np.float32) * (rank + 1))
    torus = hvd.allreduce(x, op=hvd.Sum)
    ring = hvd.allreduce(x, op=hvd.Sum, strategy="ring")
    avg, sl = hvd.grouped_allreduce(
        [x, tf.IndexedSlices(tf.fill([1, 2], float(rank)), tf.constant([rank]), tf.constant([size, 2]))])
    shared, local = tf.Variable(1.0), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        loss = shared * float(rank + 1) + local * float(rank + 1)
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(local)
    g_shared, g_local = tape.gradient(loss, [shared, local])
    total = np.arange(7) * size * (size + 1) / 2
    np.testing.assert_allclose(torus.numpy(), total, rtol=1e-6)
    np.testing.assert_allclose(ring.numpy(), total, rtol=1e-6)
    np.testing.assert_allclose(avg.numpy(), total / size, rtol=1e-6)
    assert isinstance(sl, tf.IndexedSlices)
    np.testing.assert_allclose(tf.convert_to_tensor(sl).numpy(),
                               np.repeat(np.arange(size, dtype=np.float32)[:, None] / size, 2, 1))
    assert float(g_shared) == pytest.approx((size + 1) / 2)
    assert float(g_local) == pytest.approx((rank + 1) / size)
