"""torus_allreduce / grouped_torus_allreduce against Horovod's flat hvd.allreduce and numpy, per rank."""
import numpy as np
import pytest
import tensorflow as tf
import horovod.tensorflow as flat_hvd

DTYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]
SHAPES = [(), (0,), (1,), (2,), (3,), (5, 7), (2, 3, 4), (1001,)]


def rank_input(rank, shape, dtype, seed=0):
    """Deterministic, rank-dependent input: every rank can compute every other rank's tensor."""
    rng = np.random.default_rng(seed * 1000 + 17)
    base = rng.integers(-8, 9, size=shape)
    return (base * (rank + 1) + rank).astype(np.float64 if dtype == "bfloat16" else dtype)


def expected_sum(size, shape, dtype, seed=0):
    return np.sum([rank_input(r, shape, dtype, seed).astype(np.float64) for r in range(size)], axis=0)


def tol(dtype, size, magnitude):
    """Tolerance that scales with the rank count: N additions, each rounding by one ulp of the result."""
    eps = {"float16": 2 ** -10, "bfloat16": 2 ** -7, "float32": 2 ** -23, "float64": 2 ** -52}.get(dtype, 0)
    return eps * size * max(1.0, magnitude) * 2


def as_tf(array, dtype):
    return tf.cast(tf.constant(array), getattr(tf, dtype))


def to_np(t):
    return tf.cast(t, tf.float64).numpy() if t.dtype in (tf.bfloat16, tf.float16) else t.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_every_dtype_op_and_shape_matches_flat_allreduce(hvd, world, dtype, op):
    size, rank = world
    hop = getattr(hvd, op)
    inputs = [as_tf(rank_input(rank, s, dtype, i), dtype) for i, s in enumerate(SHAPES)]
    torus = [hvd.torus_allreduce(t, op=hop) for t in inputs]
    # Horovod 0.28.1 has no bfloat16 kernels: that dtype is checked against numpy alone.
    flat = None if dtype == "bfloat16" else [flat_hvd.allreduce(t, op=hop) for t in inputs]
    for i, (shape, out) in enumerate(zip(SHAPES, torus)):
        assert out.shape == shape and out.dtype == inputs[i].dtype
        exp = expected_sum(size, shape, dtype, i)
        if op == "Average":
            exp = np.trunc(exp / size) if dtype.startswith("int") else exp / size
        mag = float(np.max(np.abs(exp))) if exp.size else 0.0
        np.testing.assert_allclose(to_np(out), exp, rtol=0, atol=tol(dtype, size, mag) + (0 if dtype.startswith("int") else 0))
        if flat is not None:
            np.testing.assert_allclose(to_np(out), to_np(flat[i]), rtol=0, atol=tol(dtype, size, mag))


def test_grouped_mixed_dtypes_inside_tf_function(hvd, world):
    size, rank = world
    specs = [((3, 3), "float32"), ((), "int64"), ((0, 2), "float32"), ((4,), "float64"), ((2,), "int32"),
             ((5,), "float16"), ((1,), "float32"), ((6,), "bfloat16")]
    inputs = [as_tf(rank_input(rank, s, d, i), d) for i, (s, d) in enumerate(specs)]

    @tf.function
    def step(ts):
        return hvd.grouped_torus_allreduce(ts, op=hvd.Sum, name="grouped")

    out = step(inputs)
    flat = [flat_hvd.allreduce(t, op=hvd.Sum) for t, (_, d) in zip(inputs, specs) if d != "bfloat16"]
    flat_iter = iter(flat)
    for i, ((shape, d), o) in enumerate(zip(specs, out)):
        exp = expected_sum(size, shape, d, i)
        assert o.shape == shape and o.dtype == inputs[i].dtype
        mag = float(np.max(np.abs(exp))) if exp.size else 0.0
        np.testing.assert_allclose(to_np(o), exp, rtol=0, atol=tol(d, size, mag))
        if d != "bfloat16":
            np.testing.assert_allclose(to_np(o), to_np(next(flat_iter)), rtol=0, atol=tol(d, size, mag))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_prescale_and_postscale_applied_once(hvd, world, dtype):
    size, rank = world
    t = as_tf(rank_input(rank, (4, 3), dtype), dtype)
    kw = dict(prescale_factor=0.5, postscale_factor=3.0)
    torus = [hvd.torus_allreduce(t, op=op, **kw) for op in (hvd.Sum, hvd.Average)]
    flat = [flat_hvd.allreduce(t, op=op, **kw) for op in (hvd.Sum, hvd.Average)]
    for a, b in zip(torus, flat):
        mag = float(np.max(np.abs(to_np(b))))
        np.testing.assert_allclose(to_np(a), to_np(b), rtol=0, atol=tol(dtype, size, mag) * 4)
    if dtype in ("float32", "float64"):
        exp = expected_sum(size, (4, 3), dtype) * 0.5 * 3.0
        np.testing.assert_allclose(to_np(torus[0]), exp, rtol=1e-6)
        np.testing.assert_allclose(to_np(torus[1]), exp / size, rtol=1e-6)


def test_fp16_compression(hvd, world):
    size, rank = world
    t = as_tf(rank_input(rank, (17,), "float32") / 7.0, "float32")
    out = hvd.torus_allreduce(t, op=hvd.Average, compression=hvd.Compression.fp16)
    ref = flat_hvd.allreduce(t, op=hvd.Average, compression=hvd.Compression.fp16)
    assert out.dtype == tf.float32
    exp = expected_sum(size, (17,), "float32") / 7.0 / size
    np.testing.assert_allclose(out.numpy(), exp, rtol=0, atol=tol("float16", size, np.abs(exp).max()) * 4)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=tol("float16", size, np.abs(exp).max()) * 4)


def test_large_buffer_of_many_gradients(hvd, world):
    """A step's worth of gradients (ResNet-like shapes) in one grouped call, in tf.function."""
    size, rank = world
    shapes = [(3, 3, 16, 32), (32,), (32,), (1, 1, 32, 64), (64,), (640, 10), (10,)]
    rng = np.random.default_rng(rank)
    inputs = [tf.constant(rng.normal(size=s).astype(np.float32)) for s in shapes]
    out = tf.function(lambda ts: hvd.grouped_torus_allreduce(ts))(inputs)
    ref = flat_hvd.grouped_allreduce(inputs)
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o.numpy(), r.numpy(), rtol=1e-5, atol=1e-6 * size)
    assert not np.allclose(out[0].numpy(), inputs[0].numpy())  # really reduced, not passed through


def test_unsupported_dtype_raises_type_error_naming_it(hvd):
    with pytest.raises(TypeError, match="bool"):
        hvd.torus_allreduce(tf.zeros([3], tf.bool))
    with pytest.raises(TypeError, match="complex64"):
        hvd.grouped_torus_allreduce([tf.zeros([2]), tf.zeros([3], tf.complex64)])


def torus_transports(hvd):
    """The torus strategies this launch can run: torus:horovod always, torus:mpi under the MPI controller."""
    return ["torus:horovod"] + (["torus:mpi"] if hvd.torus_comm() is not None else [])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_small_integer_dtypes_match_flat_allreduce(hvd, world, dtype):
    size, rank = world
    x = tf.constant((np.arange(9) % 5 + rank).astype(dtype))
    ref = np.sum([(np.arange(9) % 5 + r) for r in range(size)], axis=0).astype(dtype)
    if dtype in ("int8", "uint8"):  # Horovod 0.28.1 has no 16-bit integer all-reduce kernels
        np.testing.assert_array_equal(flat_hvd.allreduce(x, op=flat_hvd.Sum).numpy(), ref)
    for strategy in torus_transports(hvd):
        out = hvd.allreduce(x, op=hvd.Sum, strategy=strategy)
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(out.numpy(), ref, err_msg=strategy)


def test_gradient_flows_through_the_allreduce_on_every_transport(hvd, world):
    size, _ = world
    for strategy in torus_transports(hvd) + ["torus"]:
        v = tf.Variable([1.0, 2.0, 3.0])
        with tf.GradientTape(persistent=True) as tape:
            s = hvd.allreduce(v, op=hvd.Sum, strategy=strategy)
            a = hvd.allreduce(v * 2.0, op=hvd.Average, strategy=strategy)
        np.testing.assert_array_equal(tape.gradient(s, v).numpy(), [size] * 3, err_msg=strategy)   # Horovod: [N]*3
        np.testing.assert_array_equal(tape.gradient(a, v).numpy(), [2.0] * 3, err_msg=strategy)


def test_float16_scaling_is_done_in_float32_like_horovod(hvd, world):
    x = tf.constant([55.78125], tf.float16)
    factor = 0.1915194503788923
    ref = flat_hvd.allreduce(x, op=flat_hvd.Sum, prescale_factor=factor).numpy()
    for strategy in torus_transports(hvd):
        out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor, strategy=strategy).numpy()
        assert out[0] == ref[0], (strategy, out, ref)


def test_unsupported_op_and_sparse_input(hvd):
    with pytest.raises(ValueError, match="op=Average or op=Sum"):
        hvd.torus_allreduce(tf.zeros([3]), op=flat_hvd.Max)
    with pytest.raises(TypeError, match="IndexedSlices"):
        hvd.torus_allreduce(tf.IndexedSlices(tf.zeros([1, 2]), tf.constant([0]), tf.constant([3, 2])))


def test_min_max_product_take_horovods_allreduce(hvd):
    """The torus sums; hvd.allreduce(op=Min/Max/Product) through a torus strategy is Horovod's own call."""
    rank, size = flat_hvd.rank(), flat_hvd.size()
    x = tf.constant([3.0, -1.0, 2.0]) * (rank + 1)
    for strategy in ["torus"] + torus_transports(hvd):
        for op, want in ((flat_hvd.Max, np.maximum.reduce), (flat_hvd.Min, np.minimum.reduce),
                         (flat_hvd.Product, np.multiply.reduce)):
            got = hvd.allreduce(x, op=op, strategy=strategy).numpy()
            ref = want([np.array([3.0, -1.0, 2.0], np.float32) * (r + 1) for r in range(size)])
            np.testing.assert_allclose(got, ref, rtol=1e-6)
        grouped = hvd.grouped_allreduce([x, 2 * x], op=flat_hvd.Max, strategy=strategy)
        np.testing.assert_allclose(grouped[1].numpy(), 2 * np.array([3.0, -1.0, 2.0]) * [size, 1, size])


def test_a_captured_eager_tensor_reduces_inside_tf_function(hvd):
    """An eager tensor captured by a tf.function, on ranks that made different numbers of eager tensors
    first: every strategy's result equals numpy's, Sum (the torus) and Max (Horovod's call for every
    strategy). Horovod would name the op after the capture, i.e. the tensor's id, which differs between the
    ranks: they waited on differently named ops until the stall deadline."""
    rank, size = flat_hvd.rank(), flat_hvd.size()
    _ = [tf.constant(float(i)) for i in range(3 * rank + 1)]  # rank-dependent eager tensor ids
    x = tf.constant([3.0, -1.0, 2.0]) * (rank + 1)
    inputs = [np.array([3.0, -1.0, 2.0], np.float32) * (r + 1) for r in range(size)]
    for strategy in ["horovod", "torus"] + torus_transports(hvd):
        for op, want in ((flat_hvd.Sum, np.add.reduce), (flat_hvd.Max, np.maximum.reduce)):
            got = tf.function(lambda: hvd.allreduce(x, op=op, strategy=strategy))().numpy()
            np.testing.assert_allclose(got, want(inputs), rtol=1e-6, err_msg=f"{strategy} {op}")


def test_sparse_rules_checked_before_any_collective(hvd):
    """A list mixing tensors and IndexedSlices with op=Min raises NotImplementedError (Horovod's rule) on
    every rank before the dense part is reduced."""
    slices = tf.IndexedSlices(tf.ones([1, 3]), tf.constant([0]), tf.constant([4, 3]))
    for op in (flat_hvd.Min, flat_hvd.Adasum):
        with pytest.raises(NotImplementedError, match="IndexedSlices"):
            hvd.grouped_allreduce([slices, tf.ones([3])], op=op)


def test_transport_follows_the_launcher(hvd):
    """mpirun (MPI controller, CPU) -> "mpi" transport by default; Gloo -> Horovod ops; env overrides."""
    import os

    expected = os.environ.get("HOROVOD_TORUS_TRANSPORT") or ("mpi" if flat_hvd.mpi_enabled() else "horovod")
    assert hvd.transport() == expected == hvd.settings().transport.replace("auto", expected)
    with pytest.warns(DeprecationWarning, match="use transport"):
        assert hvd.backend() == expected


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("count", [1, 7, (1 << 16) + 3])
def test_horovod_transport_phase_one_matches_numpy(hvd, world, dtype, count):
    """Phase 1 (reduce-scatter on the row) of the Horovod-ops transport, eagerly and in tf.function,
    against numpy with Horovod's uneven split. Under Horovod's Gloo controller it is an alltoall plus a
    local sum (Gloo's own reduce-scatter races with its sends: wrong shard tails on slow links)."""
    from horovod_torus.fusion import shard_counts
    from horovod_torus.tensorflow.runtime import torus_process_sets
    from horovod_torus.tensorflow.transports import HorovodTransport

    size, rank = world
    sets = torus_process_sets()
    if sets.grid.x == 1:
        pytest.skip("X == 1: the grid has no reduce-scatter")
    transport = HorovodTransport(sets, name=f"p1_{dtype}_{count}")
    # mpirun launches run Horovod's MPI controller, horovodrun --gloo launches its Gloo controller
    assert transport.reduce_scatter_via == ("reducescatter" if flat_hvd.mpi_enabled() else "alltoall")
    x = tf.constant(rank_input(rank, (count,), dtype).astype(dtype))
    eager = transport.reduce_scatter(x, "sum")
    fn = tf.function(lambda t: transport.reduce_scatter(t, "sum"))
    traced = fn(x)
    # phase 1 only synchronises a row: wait for every rank, so no row runs ahead to the end of the session
    # and shuts Horovod down under a row still in its alltoall
    flat_hvd.allreduce(tf.constant(0.0), name=f"p1_done_{dtype}_{count}").numpy()
    row = sets.grid.row_members(rank)
    pos = row.index(rank)
    counts = shard_counts(count, sets.grid.x)
    start = sum(counts[:pos])
    exp = np.sum([rank_input(r, (count,), dtype).astype(np.float64) for r in row], axis=0)[start:start + counts[pos]]
    static = fn.get_concrete_function(x).structured_outputs  # the traced graph, not a retrace
    assert tuple(static.shape) == (counts[pos],)  # the graph knows the shard's length statically
    for out in (eager, traced):
        assert out.dtype == x.dtype and tuple(out.shape) == (counts[pos],)
        mag = float(np.max(np.abs(exp))) if exp.size else 0.0  # count 1 on X > 1: some shards are empty
        np.testing.assert_allclose(to_np(out), exp, rtol=0, atol=tol(dtype, len(row), mag))


def test_init_gave_open_mpi_the_column_rule_before_mpi_started(hvd, world):
    """Under Open MPI's mpirun with 3 or more ranks, init pointed MPI at the rules file before it started
    (horovod_torus.ompi_rules), the same file on every rank; a column all-reduce above the rule's threshold
    (the ring, through Horovod's column process set) still equals numpy."""
    import os

    from horovod_torus import ompi_rules
    from horovod_torus.launch import LaunchContext

    size, rank = world
    path = hvd.ompi_rules_file()
    paths = flat_hvd.allgather_object(path, name="test_ompi_rules_paths")
    torus = hvd.torus()
    n = ompi_rules.RING_FROM_BYTES // 4 + 5  # float32 elements per column shard: above the rule's threshold
    x = tf.constant(np.full(n * torus.grid.x, rank + 1, np.float32))
    got = hvd.allreduce(x, op=hvd.Sum, strategy="torus:horovod").numpy()
    np.testing.assert_array_equal(got, np.full(x.shape, size * (size + 1) / 2, np.float32))
    if LaunchContext.from_environ().launcher == "mpirun" and size >= 3:
        assert path is not None and open(path).read() == ompi_rules.rules_text(size)
        assert os.environ["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == path
        assert len({os.path.basename(p) for p in paths}) == 1
    else:
        assert paths == [None] * size
