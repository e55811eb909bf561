"""The shipped three-phase algorithm (horovod_torus.phases.allreduce_buffer) on N simulated ranks.

No MPI, no Horovod: horovod_torus.inprocess runs every rank in a thread over a shared board, and every
result is compared with numpy's reduction of the ranks' inputs.
"""
import numpy as np
import pytest

from horovod_torus.inprocess import run_ranks
from horovod_torus.phases import allreduce_buffer
from horovod_torus.scaling import postscale, prescale, scale
from horovod_torus.signature import CallSignature, TorusMismatchError
from horovod_torus.topology import TorusTopology

GRIDS = ["1x1", "1x4", "4x1", "2x2", "3x2", "2x3"]
DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64"]


def inputs(n, size, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return [rng.uniform(-4, 4, size).astype(dtype) for _ in range(n)]
    hi = 20 if np.dtype(dtype).itemsize == 1 else 1000
    lo = 0 if np.dtype(dtype).kind == "u" else -hi
    return [rng.integers(lo, hi, size).astype(dtype) for _ in range(n)]


def torus(grid, bufs, pre=1.0, post=1.0, average=False, algorithm="torus", op="sum"):
    n = TorusTopology.parse(grid).size
    sig = CallSignature(elements=bufs[0].size, dtype=bufs[0].dtype.name, op="Average" if average else "Sum",
                        prescale=pre, postscale=post, algorithm=algorithm)
    f_pre, f_post = prescale(pre), postscale(post, n if average else 1)
    return run_ranks(grid, lambda t: allreduce_buffer(t, bufs[t.rank], sig, f_pre, f_post, op))


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("size", [0, 1, 2, 5, 7, 12, 1001])
def test_sum_every_grid_and_awkward_size_float64(grid, size):
    n = TorusTopology.parse(grid).size
    bufs = inputs(n, size, "float64")
    out = torus(grid, bufs)
    want = np.sum(bufs, axis=0)
    for r in range(n):
        assert out[r].dtype == np.float64 and out[r].shape == (size,)
        np.testing.assert_allclose(out[r], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("grid", ["2x2", "3x2", "1x4", "4x1"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_sum_and_average(grid, dtype):
    n = TorusTopology.parse(grid).size
    bufs = inputs(n, 11, dtype, seed=3)
    for average in (False, True):
        out = torus(grid, bufs, average=average)
        total = np.sum([b.astype(np.float64) for b in bufs], axis=0)
        if np.dtype(dtype).kind == "f":
            want = total / n if average else total
            tol = 2e-2 if dtype == "float16" else 1e-5
            for r in range(n):
                assert out[r].dtype == np.dtype(dtype)
                np.testing.assert_allclose(out[r].astype(np.float64), want, rtol=tol, atol=tol)
        else:
            wrapped = np.sum(bufs, axis=0, dtype=np.dtype(dtype))  # integer sums wrap like the wire type
            want = scale(wrapped, 1.0 / n) if average else wrapped  # Horovod: double, truncated
            for r in range(n):
                assert out[r].dtype == np.dtype(dtype)
                np.testing.assert_array_equal(out[r], want)


@pytest.mark.parametrize("grid", ["2x2", "3x2", "1x1"])
def test_prescale_and_postscale_applied_exactly_once(grid):
    n = TorusTopology.parse(grid).size
    bufs = inputs(n, 9, "float64", seed=5)
    out = torus(grid, bufs, pre=0.5, post=3.0, average=True)
    want = np.sum([b * np.float64(np.float32(0.5)) for b in bufs], axis=0) * (3.0 / n)
    for r in range(n):
        np.testing.assert_allclose(out[r], want, rtol=1e-12)


def test_float16_scales_in_float32_like_horovod():
    # Horovod 0.28.1: 55.78125 * 0.1915194503788923 summed over 4 ranks -> 42.71875 (scaled in float32)
    bufs = [np.array([55.78125], np.float16)] * 4
    out = torus("2x2", bufs, pre=0.1915194503788923)
    assert all(float(o[0]) == 42.71875 for o in out)


@pytest.mark.parametrize("op, ufunc", [("max", np.maximum), ("min", np.minimum), ("prod", np.multiply)])
def test_other_elementwise_ops(op, ufunc):
    bufs = inputs(6, 13, "float64", seed=7)
    out = torus("3x2", bufs, op=op)
    want = ufunc.reduce(np.stack(bufs), axis=0)
    for o in out:
        np.testing.assert_allclose(o, want, rtol=1e-12)


@pytest.mark.parametrize("grid", ["2x2", "3x2", "1x4"])
def test_flat_algorithm_gives_the_same_sum(grid):
    n = TorusTopology.parse(grid).size
    bufs = inputs(n, 10, "int64", seed=9)
    flat, three = torus(grid, bufs, algorithm="flat"), torus(grid, bufs)
    for a, b in zip(flat, three):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, np.sum(bufs, axis=0))


def test_ranks_with_another_op_or_factor_raise_on_every_rank():
    bufs = inputs(4, 2, "float32")

    def call(t):
        sig = CallSignature(2, "float32", op="Sum" if t.rank == 3 else "Average",
                            prescale=2.0 if t.rank == 1 else 1.0)
        return allreduce_buffer(t, bufs[t.rank], sig)

    out = run_ranks("2x2", call)
    assert all(isinstance(o, TorusMismatchError) for o in out)
    assert set(out[0].fields) == {"op", "prescale"}
    assert "rank 3 Sum" in str(out[0]) and "rank 1 2.0" in str(out[2])


def test_same_length_in_another_shape_raises():
    def call(t):
        shape = (3, 4) if t.rank == 2 else (2, 6)
        sig = CallSignature(12, "float32", layout=(("float32", shape),))
        return allreduce_buffer(t, np.ones(12, np.float32), sig)

    out = run_ranks("2x2", call)
    assert all(isinstance(o, TorusMismatchError) and o.fields == ("shapes",) for o in out)


def test_a_skipped_call_is_detected_by_the_call_number():
    # rank 3 skips its first call: its second call meets the others' second call with call number 1 vs 2
    def call(t):
        sig = CallSignature(1, "float64")
        if t.rank != 3:
            allreduce_buffer(t, np.ones(1), sig)
        else:
            t.calls += 1  # a call made on another object of the same transport, or a skipped collective
        return allreduce_buffer(t, np.ones(1), sig)

    out = run_ranks("2x2", call, timeout=3.0)
    assert all(isinstance(o, Exception) for o in out)
    assert any(isinstance(o, TorusMismatchError) and "call" in o.fields for o in out)


@pytest.mark.parametrize("grid", ["1x1", "1x4", "4x1", "2x3"])
@pytest.mark.parametrize("algorithm", ["torus", "flat"])
@pytest.mark.parametrize("post", [1.0, 0.5])
def test_out_receives_the_result_and_may_be_the_input(grid, algorithm, post):
    """allreduce_buffer(..., out=o) returns o holding the result (copied in by the phases where the transport
    cannot write into it: the in-process transport never does), also when o is the input (in place), and
    leaves a distinct input untouched."""
    n = TorusTopology.parse(grid).size
    bufs = inputs(n, 13, "float64", seed=5)
    want = np.sum(bufs, axis=0) * post
    sig = CallSignature(elements=13, dtype="float64", postscale=post, algorithm=algorithm)
    outs = [np.full(13, np.nan) for _ in range(n)]
    got = run_ranks(grid, lambda t: allreduce_buffer(t, bufs[t.rank].copy(), sig, 1.0, post, out=outs[t.rank]))
    copies = [b.copy() for b in bufs]
    inplace = run_ranks(grid, lambda t: allreduce_buffer(t, copies[t.rank], sig, 1.0, post, out=copies[t.rank]))
    for r in range(n):
        assert got[r] is outs[r] and inplace[r] is copies[r]
        np.testing.assert_allclose(outs[r], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(copies[r], want, rtol=1e-12, atol=1e-12)
