"""The numpy API's flat call in C (horovod_torus._native) against MPI_Allreduce, numpy and the same call made from
Python (``tc.native = None``): every dtype and op, shapes, in place, recvbuf, a check still open after its tests
(a late rank), a mismatch, ranks that mix both paths, with and without a deadline."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from horovod_torus import mpi as torus_mpi
from horovod_torus.mpi import FLAT_NONBLOCKING_MIN_BYTES, TorusComm, TorusMismatchError, torus_allreduce

COMM = MPI.COMM_WORLD
DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
OPS = {"sum": (MPI.SUM, np.add), "max": (MPI.MAX, np.maximum), "min": (MPI.MIN, np.minimum),
       "prod": (MPI.PROD, np.multiply)}


class Counting:
    """horovod_torus._native with each call's status counted."""

    def __init__(self, native):
        self.native, self.statuses = native, []

    def check(self, *args):
        status = self.native.check(*args)
        self.statuses.append(("check", status[0]))
        return status

    def check_flat(self, *args):
        status = self.native.check_flat(*args)
        self.statuses.append(("check_flat", status[0]))
        return status


@pytest.fixture(scope="module")
def native():
    if torus_mpi._native is None:  # setup.py builds it with mpicc; make setup always does
        pytest.fail("horovod_torus._native is not built: run make setup (pip install -e . with mpicc on PATH)")
    return torus_mpi._native


def completed(counting, kind):
    """Every call counted was ``kind`` and agreed (status 0), or its check was still open after its tests (1:
    another rank was late, on an oversubscribed host often) and completed from Python."""
    return all(k == kind and status in (0, 1) for k, status in counting.statuses)


def flat_comm(**kw):
    return TorusComm.create(COMM, min_torus_bytes=1 << 40, cache_dir="off", **kw)


def rank_input(rank, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u" or dtype in ("int8", "uint8"):
        return rng.integers(0, 3, size=shape).astype(dtype) + np.asarray(rank % 2, dtype)
    return (rng.integers(-3, 4, size=shape) * (rank + 1) + rank).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opname", list(OPS))
def test_every_dtype_and_op_matches_mpi_numpy_and_the_python_path(native, dtype, opname):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    op, ufunc = OPS[opname]
    with flat_comm() as tc:
        counting = tc.native = Counting(native)
        for i, shape in enumerate([(), (1,), (3,), (4, 5), (1001,)]):
            send = rank_input(rank, shape, dtype, i)
            got = torus_allreduce(tc, send, op=op)
            again = torus_allreduce(tc, send, op=op)  # the remembered call site
            tc.native = None
            python = torus_allreduce(tc, send, op=op)
            tc.native = counting
            ref = np.empty_like(send)
            COMM.Allreduce(send, ref, op=op)
            exp = ufunc.reduce([rank_input(r, shape, dtype, i) for r in range(size)], axis=0).astype(dtype)
            for out in (got, again, python):
                assert out.shape == send.shape and out.dtype == send.dtype
                np.testing.assert_array_equal(out, ref)
                np.testing.assert_array_equal(out, exp)
        assert len(counting.statuses) == 10 and completed(counting, "check_flat")  # 2 per shape, none from Python


def test_in_place_recvbuf_and_views_through_the_c_call(native):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    with flat_comm() as tc:
        tc.native = counting = Counting(native)
        for _ in range(2):  # the second time through the remembered call site
            buf = np.full((2, 3), rank + 1, np.float64)
            assert torus_allreduce(tc, buf, recvbuf=buf) is buf
            np.testing.assert_array_equal(buf, np.full((2, 3), size * (size + 1) / 2))
            out = np.empty(7, np.int32)
            assert torus_allreduce(tc, np.arange(7, dtype=np.int32) + rank, recvbuf=out) is out
            np.testing.assert_array_equal(out, np.arange(7) * size + size * (size - 1) // 2)
        send = np.arange(6, dtype=np.int32) + rank
        np.testing.assert_array_equal(torus_allreduce(tc, send[:3], recvbuf=send[3:]) , send[3:])  # apart: direct
        np.testing.assert_array_equal(send[3:], np.arange(3) * size + size * (size - 1) // 2)
        read_only = np.empty(3, np.int32)
        read_only.flags.writeable = False
        with pytest.raises(ValueError, match="recvbuf is read-only"):  # validated again, not the remembered call
            torus_allreduce(tc, send[:3], recvbuf=read_only)
        calls = tc.calls
        locked = np.ones(3, np.int32)
        np.testing.assert_array_equal(torus_allreduce(tc, locked), np.full(3, size))  # remembered now
        locked.flags.writeable = False
        with pytest.raises(ValueError, match="recvbuf is read-only"):  # in place, read-only: nothing counted
            torus_allreduce(tc, locked, recvbuf=locked)
        assert tc.calls == calls + 1
        both, reduced = np.zeros(2, np.int64), np.zeros(2, np.int64)
        x = np.arange(5, dtype=np.int32)
        with pytest.raises(ValueError, match="overlap without being the same buffer"):  # before any MPI call
            native.check_flat(tc.comm.py2f(), both, reduced, 16, x[0:4], x[1:5], MPI.INT.py2f(), MPI.SUM.py2f())
        strided = np.zeros((4, 6), np.float32)[:, ::2]  # MPI cannot write there: copied in
        torus_allreduce(tc, np.ones((4, 3), np.float32), recvbuf=strided)
        np.testing.assert_array_equal(strided, np.full((4, 3), size))
        view = np.arange(10, dtype=np.float32)[::2]  # a non-contiguous send buffer is copied first
        np.testing.assert_array_equal(torus_allreduce(tc, view), np.arange(0, 10, 2) * size)
        assert len(counting.statuses) == 8 and completed(counting, "check_flat")


def test_what_the_c_call_does_not_take_runs_from_python(native):
    size = COMM.Get_size()
    with flat_comm() as tc:
        tc.native = counting = Counting(native)
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(3, np.float16)), np.full(3, size, np.float16))
        big = np.ones(FLAT_NONBLOCKING_MIN_BYTES // 4, np.float32)  # from 1 MiB: non-blocking, from Python
        np.testing.assert_array_equal(torus_allreduce(tc, big), np.full(big.size, size, np.float32))
        with pytest.raises(TypeError, match="dtype >f4 has no MPI datatype"):  # on every rank, before any check
            torus_allreduce(tc, np.ones(3, ">f4"))
        assert torus_allreduce(tc, np.ones(0, np.float32)).shape == (0,)
        # only the checks went through C, each agreed (or was still open after its tests)
        assert len(counting.statuses) == 3 and completed(counting, "check")


def test_the_remembered_call_follows_op_and_crossover_changes(native):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    with flat_comm() as tc:
        x = np.array([rank, -rank], np.float64)
        np.testing.assert_array_equal(torus_allreduce(tc, x), [size * (size - 1) / 2, -size * (size - 1) / 2])
        np.testing.assert_array_equal(torus_allreduce(tc, x, op=MPI.MAX), [size - 1, 0])
        np.testing.assert_array_equal(torus_allreduce(tc, x, op=MPI.Op.f2py(MPI.MIN.py2f())), [0, -(size - 1)])
        tc.min_torus_bytes = 0  # now the torus
        calls = tc.calls
        tc.native = counting = Counting(native)
        np.testing.assert_array_equal(torus_allreduce(tc, x), [size * (size - 1) / 2, -size * (size - 1) / 2])
        assert tc.calls == calls + 1 and len(counting.statuses) == 1 and completed(counting, "check")


def test_a_late_rank_leaves_the_check_open_and_the_call_completes_from_python(native):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    with flat_comm() as tc:
        tc.native = counting = Counting(native)
        expected = np.full(5, size * (size - 1) // 2)
        for where in ("new", "new", "in place", "in place", "recvbuf", "recvbuf"):  # twice: the remembered call
            send = np.full(5, rank, np.int64)
            recv = send if where == "in place" else np.empty_like(send) if where == "recvbuf" else None
            if rank == 0:
                time.sleep(0.2)
            out = torus_allreduce(tc, send, recv)
            assert recv is None or out is recv
            np.testing.assert_array_equal(out, expected)
            opened = COMM.allgather(counting.statuses[-1][1])
            assert opened[1:] == [1] * (size - 1), opened  # the others' checks were open after their tests


@pytest.mark.parametrize("stall_seconds", [300, 0])
def test_ranks_mixing_the_c_call_and_python_agree_and_raise_together(native, stall_seconds):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    with flat_comm(stall_seconds=stall_seconds) as tc:
        tc.native = native if rank % 2 == 0 else None
        for dtype in ("float32", "int64"):
            np.testing.assert_array_equal(torus_allreduce(tc, np.full(6, rank + 1, dtype)),
                                          np.full(6, size * (size + 1) // 2))
        with pytest.raises(TorusMismatchError, match=r"shapes: rank 0 \[\(float32, \(3, 2\)\)\], rank 1 "
                                                     r"\[\(float32, \(2, 3\)\)\]"):
            torus_allreduce(tc, np.ones((3, 2) if rank == 0 else (2, 3), np.float32))
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(2, np.float32)), np.full(2, size))


def test_a_mismatch_in_the_c_call_names_each_ranks_value(native):
    rank = COMM.Get_rank()
    with flat_comm() as tc:
        tc.native = counting = Counting(native)
        with pytest.raises(TorusMismatchError, match=r"op: rank 0 Max, rank 1 Sum"):
            torus_allreduce(tc, np.ones(4, np.float32), op=MPI.MAX if rank == 0 else MPI.SUM)
        with pytest.raises(TorusMismatchError, match=r"dtype: rank 0 float64, rank 1 float32"):
            torus_allreduce(tc, np.ones(4, np.float64 if rank == 0 else np.float32))
        # the check disagreed (2), or was still open after its tests (1) and then compared in Python
        assert [kind for kind, _ in counting.statuses] == ["check_flat"] * 2
        assert {status for _, status in counting.statuses} <= {1, 2}
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(2, np.float32)), np.full(2, COMM.Get_size()))
