"""The numpy torus on 16 ranks of one host (4 x 4 grid): every op, uneven sizes, three dtypes, against
MPI_Allreduce and numpy; and what TorusComm.create costs there (its time, the communicators it makes).

Launched by tests/parallel/run_all.sh (row ``mpirun 16 4x4`` of launches.tsv); 16 ranks oversubscribe the
machine, so the cases are few and small: one TorusComm for all of them.
"""
import time
import types

import numpy as np
import pytest
from mpi4py import MPI

from horovod_torus.mpi import RING_MIN_BYTES, TorusComm, torus_allreduce
from horovod_torus.topology import TorusTopology

COMM = MPI.COMM_WORLD
COUNTS = (0, 1, 7, 1001)  # uneven over the 4 ranks of a row: 0 | 1,0,0,0 | 2,2,2,1 | 251,250,250,250
DTYPES = ("float32", "float64", "int32")
OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}
UFUNC = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}


class CountingComm(MPI.Intracomm):
    """COMM_WORLD's handle; every communicator made from it (or from one it made) is counted, by call."""

    made: list = []

    def _made(self, how, comm):
        CountingComm.made.append(how)
        return CountingComm(comm)

    def Dup(self, info=None):  # noqa: N802 (mpi4py's names)
        return self._made("Dup", super().Dup() if info is None else super().Dup(info))

    def Split(self, color=0, key=0):  # noqa: N802
        return self._made("Split", super().Split(color, key))

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):  # noqa: N802
        return self._made("Split_type", super().Split_type(split_type, key, info))


@pytest.fixture(scope="module")
def created():
    """One TorusComm for the module, made from a :class:`CountingComm`; with its creation time and counts."""
    assert COMM.Get_size() == 16, "run on 16 ranks (launches.tsv: mpirun 16 4x4)"
    counted = CountingComm(COMM)
    COMM.Barrier()
    start = time.perf_counter()
    torus = TorusComm.create(counted)
    mine = time.perf_counter() - start
    slowest = COMM.allreduce(mine, op=MPI.MAX)
    made = list(CountingComm.made)
    kept = [c for c in (torus.comm, torus.row, torus.column, torus.alarm) if c != MPI.COMM_NULL]
    yield types.SimpleNamespace(tc=torus, create_ms=slowest * 1e3, made=made, kept=len(kept))
    torus.free()


@pytest.fixture()
def tc(created):
    return created.tc


def rank_values(rank, count, dtype, op, seed):
    """Every rank can compute every other rank's input. Products stay exact: factors of 1 and 2 (at most
    2^16 over 16 ranks), signs from the rank."""
    rng = np.random.default_rng(seed * 97 + rank)
    if op == "prod":
        values = rng.integers(1, 3, size=count) * np.where((np.arange(count) + rank) % 7 == 0, -1, 1)
    else:
        values = rng.integers(-50, 51, size=count) * (rank + 1) - rank
    return values.astype(dtype)


def test_grid_and_what_create_made(created, capsys):
    tc = created.tc
    if COMM.Get_rank() == 0:  # printed past pytest's capture: the launch's rank-0 log keeps the figures
        with capsys.disabled():
            print(f"\nTorusComm.create on 16 ranks, grid {tc.grid}: {created.create_ms:.1f} ms (slowest rank); "
                  f"{len(created.made)} communicators made ({', '.join(created.made)}), {created.kept} kept, "
                  f"the others freed")
    assert tc.grid == TorusTopology(4, 4)
    assert (tc.row.Get_size(), tc.column.Get_size()) == (4, 4)
    # kept: the duplicate, its row and column splits, and the duplicate's duplicate for the stall roll call;
    # made and freed: the shared-memory splits that tell the local size (comm_world) and whether a column
    # shares a node (the column ring's auto rule)
    made = created.made
    assert created.kept == 4 and made.count("Dup") == 2 and made.count("Split") == 2
    assert made.count("Split_type") == 2 and len(made) == 6
    assert created.create_ms > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opname", sorted(OPS))
def test_every_op_uneven_sizes_match_mpi_and_numpy(tc, dtype, opname):
    size, rank = COMM.Get_size(), COMM.Get_rank()
    outs, refs = [], []
    for seed, count in enumerate(COUNTS):
        send = rank_values(rank, count, dtype, opname, seed)
        outs.append(torus_allreduce(tc, send, op=OPS[opname]))
        ref = np.empty_like(send)
        COMM.Allreduce(send, ref, op=OPS[opname])
        refs.append(ref)
    for seed, (count, out, ref) in enumerate(zip(COUNTS, outs, refs)):
        exp = rank_values(0, count, dtype, opname, seed)
        for r in range(1, size):
            exp = UFUNC[opname](exp, rank_values(r, count, dtype, opname, seed))
        assert out.shape == (count,) and out.dtype == np.dtype(dtype)
        # small integers in every dtype: the order of the reduction cannot change the result
        np.testing.assert_array_equal(out, ref, err_msg=f"{opname} {dtype} count {count} vs MPI_Allreduce")
        np.testing.assert_array_equal(out, exp, err_msg=f"{opname} {dtype} count {count} vs numpy")


@pytest.mark.parametrize("opname", ["sum", "max"])
def test_ring_path_on_16_ranks(tc, opname):
    """An uneven buffer above RING_MIN_BYTES: phases 1 and 3 as Sendrecv rings on the rows of 4."""
    count = RING_MIN_BYTES // 4 + 3
    rank = COMM.Get_rank()
    send = rank_values(rank, count, "float32", opname, 5)
    out = torus_allreduce(tc, send, op=OPS[opname])
    ref = np.empty_like(send)
    COMM.Allreduce(send, ref, op=OPS[opname])
    np.testing.assert_array_equal(out, ref)
