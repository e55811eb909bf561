"""horovod_torus.mpi.torus_allreduce (mpi4py/numpy) against MPI_Allreduce on the world communicator."""
import numpy as np
import pytest
from mpi4py import MPI

from horovod_torus.mpi import TorusComm, torus_allreduce
from horovod_torus.topology import TorusTopology

COMM = MPI.COMM_WORLD
SHAPES = [(), (0,), (1,), (3,), (4, 5), (1001,), (2, 3, 4)]


def rank_input(rank, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(-9, 10, size=shape) * (rank + 1) + rank).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op", [MPI.SUM, MPI.MAX, MPI.MIN])
def test_matches_mpi_allreduce(dtype, op):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    for i, shape in enumerate(SHAPES):
        send = rank_input(rank, shape, dtype, i)
        out = torus_allreduce(COMM, send, op=op)
        ref = np.empty_like(send)
        COMM.Allreduce(send, ref, op=op)
        assert out.shape == send.shape and out.dtype == send.dtype
        tol = np.finfo(dtype).eps * size * max(1.0, float(np.abs(ref).max(initial=0))) * 2 if "float" in dtype else 0
        np.testing.assert_allclose(out, ref, rtol=0, atol=tol)
        if op == MPI.SUM:  # and against numpy, computed from every rank's (known) input
            exp = np.sum([rank_input(r, shape, "float64", i) for r in range(size)], axis=0)
            np.testing.assert_allclose(out, exp, rtol=0, atol=tol)


def test_in_place_and_non_contiguous_output():
    size, rank = COMM.Get_size(), COMM.Get_rank()
    buf = np.full(7, rank + 1, dtype=np.float64)
    torus_allreduce(COMM, buf, recvbuf=buf)
    np.testing.assert_array_equal(buf, np.full(7, size * (size + 1) / 2))
    out = np.zeros((4, 6), np.float32)[:, ::2]  # non-contiguous view
    torus_allreduce(COMM, np.ones((4, 3), np.float32), recvbuf=out)
    np.testing.assert_array_equal(out, np.full((4, 3), size, np.float32))


def test_explicit_torus_comm_reused():
    size = COMM.Get_size()
    tc = TorusComm.create(COMM, TorusTopology.from_world(size))
    assert tc.row.Get_size() == tc.grid.x and tc.column.Get_size() == tc.grid.y
    for _ in range(3):
        np.testing.assert_array_equal(torus_allreduce(tc, np.arange(5.0)), np.arange(5.0) * size)
    tc.free()


def test_bad_grid_raises_on_every_rank_before_communicating():
    size = COMM.Get_size()
    with pytest.raises(ValueError, match=rf"ranks but the world size is {size}"):
        torus_allreduce(COMM, np.ones(3), grid=TorusTopology(size + 1, 1))
    with pytest.raises(ValueError, match="malformed"):
        torus_allreduce(COMM, np.ones(3), grid="2by2")
    with pytest.raises(TypeError, match="dtype object is not supported"):
        torus_allreduce(COMM, np.ones(3, dtype=object))
    with pytest.raises(TypeError, match="dtype bool is not supported"):
        torus_allreduce(COMM, np.ones(3, dtype=bool))
    COMM.Barrier()  # every rank reached this point: nobody is stuck in a collective


@pytest.mark.parametrize("count", [65536 + 3, 300_001, 1 << 20])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "float16"])
def test_ring_path_for_large_buffers_matches_mpi_allreduce(count, dtype):
    """Buffers >= RING_MIN_BYTES take the Sendrecv rings in phases 1 and 3 (uneven counts included)."""
    from horovod_torus.mpi import RING_MIN_BYTES

    size, rank = COMM.Get_size(), COMM.Get_rank()
    send = ((np.arange(count) % 5) * (rank + 1) + rank).astype(dtype)
    out = torus_allreduce(COMM, send)
    exp = np.sum([((np.arange(count) % 5) * (r + 1) + r) for r in range(size)], axis=0).astype(np.float64)
    np.testing.assert_array_equal(out.astype(np.float64), exp)  # small integers: exact in every dtype
    if send.nbytes >= RING_MIN_BYTES and dtype != "float16":
        ref = np.empty_like(send)
        COMM.Allreduce(send, ref)
        np.testing.assert_array_equal(out, ref)
    inplace = send.copy()
    torus_allreduce(COMM, inplace, recvbuf=inplace)  # aliasing buffers fall back to the library path
    np.testing.assert_array_equal(inplace, out)


def _allocated_per_call(tc, nbytes):
    """Bytes one torus call of ``nbytes`` per rank allocates when the result goes into a recvbuf: none on the
    flat path; on the torus path the shard of a library reduce-scatter (below RING_MIN_BYTES) and the new
    shard of a point-to-point column algorithm (on a grid of one column, that is the whole buffer)."""
    from horovod_torus.mpi import RING_MIN_BYTES

    if tc.algorithm(nbytes) == "flat":
        return 0
    shard = -(-nbytes // tc.grid.x)
    library_shard = shard if tc.grid.x > 1 and nbytes < RING_MIN_BYTES else 0
    return library_shard + (shard if tc.algorithm_for(nbytes) not in ("", "mpi") else 0)


@pytest.mark.parametrize("path", ["flat", "torus"])
@pytest.mark.parametrize("count", [1 << 14, 1 << 18])  # float32: 64 KiB (library phases), 1 MiB (rings)
def test_result_goes_straight_into_recvbuf(path, count):
    """A recvbuf receives the result with no array of the buffer's size allocated per call (tracemalloc counts
    numpy's allocations: the old path made a new output and copied it); recvbuf=sendbuf reduces in place;
    without a recvbuf the result is a new array, never the input."""
    import tracemalloc

    size, rank = COMM.Get_size(), COMM.Get_rank()
    with TorusComm.create(COMM, TorusTopology.from_world(size), min_torus_bytes=1 << 40 if path == "flat" else 0,
                          cache_dir="off") as tc:
        send = np.arange(count, dtype=np.float32) + rank
        exp = np.arange(count, dtype=np.float32) * size + size * (size - 1) // 2  # exact in float32
        recv = np.full_like(send, -1)
        torus_allreduce(tc, send, recv)  # the first call makes the transport's reusable scratch arrays
        recv[...] = -1
        tracemalloc.start()
        try:
            out = torus_allreduce(tc, send, recv)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert out is recv
        np.testing.assert_array_equal(recv, exp)
        np.testing.assert_array_equal(send, np.arange(count, dtype=np.float32) + rank)  # input untouched
        allowed = _allocated_per_call(tc, send.nbytes) + 16384  # + Python's own small objects
        assert peak <= allowed < _allocated_per_call(tc, send.nbytes) + send.nbytes, (path, peak, allowed)
        fresh = torus_allreduce(tc, send)
        assert not np.shares_memory(fresh, send) and not np.shares_memory(fresh, recv)
        np.testing.assert_array_equal(fresh, exp)
        inplace = send.copy()
        assert torus_allreduce(tc, inplace, inplace) is inplace
        np.testing.assert_array_equal(inplace, exp)
        locked = np.empty_like(send)
        locked.flags.writeable = False
        with pytest.raises(ValueError, match="recvbuf is read-only"):  # on every rank, before communicating
            torus_allreduce(tc, send, locked)
        assert torus_allreduce(tc, send, recv) is recv  # the next call on every rank: nobody communicated
        np.testing.assert_array_equal(recv, exp)


def test_float16_small_and_max_op():
    size, rank = COMM.Get_size(), COMM.Get_rank()
    out = torus_allreduce(COMM, np.full(5, rank + 1, np.float16))
    np.testing.assert_array_equal(out, np.full(5, size * (size + 1) / 2, np.float16))
    with pytest.raises(TypeError, match="float16 supports op=MPI.SUM only"):
        torus_allreduce(COMM, np.ones(3, np.float16), op=MPI.MAX)
    COMM.Barrier()


@pytest.mark.parametrize("op", [MPI.SUM, MPI.MAX, MPI.MIN])
def test_large_buffers_every_op_match_mpi_allreduce(op):
    """Rings in phases 1 and 3, and in phase 2 the column algorithm of the launch (HOROVOD_TORUS_COLUMN_RING=1,
    HOROVOD_TORUS_COLUMN_ALGORITHM=... launches), for every op, against MPI_Allreduce bit for bit (small
    integers: exact)."""
    rank = COMM.Get_rank()
    send = ((np.arange(300_001) % 7) * (rank + 1) - rank).astype(np.float64)
    out = torus_allreduce(COMM, send, op=op)
    ref = np.empty_like(send)
    COMM.Allreduce(send, ref, op=op)
    np.testing.assert_array_equal(out, ref)


def test_column_algorithm_follows_the_setting():
    """HOROVOD_TORUS_COLUMN_ALGORITHM (or the deprecated HOROVOD_TORUS_COLUMN_RING: 1 -> ring, 0 -> mpi) sets
    the column algorithm; auto asks the on-node model on this one-host launch."""
    import os

    from horovod_torus.columns import ON_NODE

    setting = os.environ.get("HOROVOD_TORUS_COLUMN_ALGORITHM") or {"1": "ring", "0": "mpi"}.get(
        os.environ.get("HOROVOD_TORUS_COLUMN_RING", "auto"), "auto")
    with TorusComm.create(COMM) as tc:
        assert tc.column_algorithm == setting and tc.column_model == ON_NODE
        chosen = tc.algorithm_for(1 << 20)
        if tc.grid.y == 1:
            assert chosen == ""
        else:
            assert chosen == (setting if setting != "auto" else ON_NODE.choose(tc.grid.y, -(-(1 << 20) // tc.grid.x)))


def test_column_algorithm_setting_must_agree_and_be_valid(monkeypatch):
    rank = COMM.Get_rank()
    monkeypatch.delenv("HOROVOD_TORUS_COLUMN_RING", raising=False)
    monkeypatch.setenv("HOROVOD_TORUS_COLUMN_ALGORITHM", "ring" if rank == 0 else "tree")
    with pytest.raises(ValueError, match=r"column_algorithm: rank 0 'ring', rank 1 'tree'"):
        TorusComm.create(COMM)
    monkeypatch.setenv("HOROVOD_TORUS_COLUMN_ALGORITHM", "sometimes")
    with pytest.raises(ValueError, match=r"HOROVOD_TORUS_COLUMN_ALGORITHM='sometimes' is not a column algorithm"):
        TorusComm.create(COMM)
    monkeypatch.delenv("HOROVOD_TORUS_COLUMN_ALGORITHM")
    if rank == 1:  # a bad value of the deprecated variable on one rank only: every rank raises, none waits
        monkeypatch.setenv("HOROVOD_TORUS_COLUMN_RING", "maybe")
    else:
        monkeypatch.setenv("HOROVOD_TORUS_COLUMN_RING", "auto")
    with pytest.raises(ValueError, match=r"(?s)TorusComm.create: .*rank\(s\) \[1\] rejected theirs.*"
                                         r"  rank 1: ValueError: HOROVOD_TORUS_COLUMN_RING='maybe'"):
        TorusComm.create(COMM)
    COMM.Barrier()  # every rank raised before any torus communicator was made


@pytest.mark.parametrize("comm", [None, 3, "COMM_WORLD"])
def test_a_comm_that_is_not_a_communicator_is_a_type_error_naming_it(comm):
    with pytest.raises(TypeError, match=r"comm=.*pass a TorusComm"):
        torus_allreduce(comm, np.ones(3))
    with pytest.raises(TypeError, match=r"comm=.*pass a TorusComm"):
        TorusComm.create(comm)


def test_an_unsupported_mpi_op_is_named():
    with pytest.raises(ValueError, match=r"op=MPI\.LAND is not supported.*MPI\.SUM"):
        torus_allreduce(COMM, np.ones(3), op=MPI.LAND)


def test_a_freed_torus_comm_says_so_and_free_is_idempotent():
    size = COMM.Get_size()
    with TorusComm.create(COMM, cache_dir="off", min_torus_bytes=0) as tc:
        got = torus_allreduce(tc, np.arange(4.0) + COMM.Get_rank())
        np.testing.assert_array_equal(got, size * np.arange(4.0) + sum(range(size)))
    assert tc.freed
    tc.free()  # a second free does nothing
    with pytest.raises(ValueError, match=r"this TorusComm was freed .*TorusComm\.create"):
        torus_allreduce(tc, np.ones(3))
    COMM.Barrier()


def test_a_shape_mismatch_names_each_ranks_shapes_and_the_op_mismatch_its_names():
    rank = COMM.Get_rank()
    with TorusComm.create(COMM, cache_dir="off", min_torus_bytes=0) as tc:
        with pytest.raises(ValueError, match=r"shapes: rank 0 \[\(float32, \(3, 2\)\)\], rank 1 \[\(float32, \(2, 3\)\)\]"):
            torus_allreduce(tc, np.ones((3, 2) if rank == 0 else (2, 3), np.float32))
        with pytest.raises(ValueError, match=r"op: rank 0 Max, rank 1 Sum"):
            torus_allreduce(tc, np.ones(4, np.float32), op=MPI.MAX if rank == 0 else MPI.SUM)
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(2, np.float32)), np.full(2, COMM.Get_size()))


def _misaligned(n, dtype, fill):
    """A C-contiguous but unaligned array (numpy's buffer then has no native alignment: mpi4py cannot map it)."""
    raw = np.zeros(n * np.dtype(dtype).itemsize + 1, np.uint8)[1:]
    a = raw.view(dtype)
    a[...] = fill
    assert a.flags.c_contiguous and not a.flags.aligned
    return a


@pytest.mark.parametrize("path", ["flat", "torus"])
@pytest.mark.parametrize("count", [5, 1 << 16])
def test_unaligned_buffers_and_a_recvbuf_that_is_not_an_array(path, count):
    """An unaligned send buffer (on every rank, or on one rank only) and an unaligned recvbuf give the result
    of MPI_Allreduce, on both algorithms, the remembered flat call included; a recvbuf that is not a numpy
    array is a TypeError on every rank before any communication (the next call meets on every rank)."""
    size, rank = COMM.Get_size(), COMM.Get_rank()
    with TorusComm.create(COMM, TorusTopology.from_world(size), min_torus_bytes=1 << 40 if path == "flat" else 0,
                          cache_dir="off") as tc:
        exp = np.full(count, size * (size + 1) // 2, np.float32)
        for odd_ranks in ([rank], [0]):   # every rank unaligned; rank 0 only
            send = _misaligned(count, np.float32, rank + 1) if rank in odd_ranks else np.full(count, rank + 1, np.float32)
            for _ in range(2):   # the second flat call is the remembered one
                np.testing.assert_array_equal(torus_allreduce(tc, send), exp)
                recv = _misaligned(count, np.float32, -1)
                assert torus_allreduce(tc, send, recv) is recv
                np.testing.assert_array_equal(recv, exp)
                inplace = _misaligned(count, np.float32, rank + 1)
                assert torus_allreduce(tc, inplace, inplace) is inplace
                np.testing.assert_array_equal(inplace, exp)
        with pytest.raises(TypeError, match="recvbuf must be a numpy array like sendbuf, or None .* got a list"):
            torus_allreduce(tc, np.ones(count, np.float32), [0.0] * count)
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(count, np.float32)), np.full(count, size, np.float32))
