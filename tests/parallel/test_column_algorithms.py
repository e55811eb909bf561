"""The MPI transport's column algorithms (mpi, ring, halving-doubling, tree, auto) against numpy, on 8 ranks.

Launched by tests/parallel/run_all.sh (row ``mpirun 8 ...`` of launches.tsv). Every test builds its own
communicators from MPI_COMM_WORLD's first k ranks, so one 8-rank launch covers column lengths 1..8 (grid
1 x Y: the whole buffer is the column's) and the grids 2x1, 2x2, 1x4, 2x3, 4x2, 2x4. Expected values come
from numpy over every rank's input (each rank regenerates all inputs from their seeds): integers exactly,
floats to a tolerance; every rank's result must also be bit for bit the same. Every collective runs
before any assertion, so a failure on one rank never leaves the others waiting.
"""
import dataclasses
import zlib

import numpy as np
import pytest
from mpi4py import MPI

from horovod_torus.columns import ACROSS_NODES, ON_NODE
from horovod_torus.mpi import TorusComm, torus_allreduce
from horovod_torus.phases import allreduce_buffer
from horovod_torus.settings import COLUMN_ALGORITHMS, COLUMN_CHOICES
from horovod_torus.signature import CallSignature, TorusMismatchError

WORLD = MPI.COMM_WORLD
OPS = {"sum": (MPI.SUM, np.add), "min": (MPI.MIN, np.minimum), "max": (MPI.MAX, np.maximum),
       "prod": (MPI.PROD, np.multiply)}
#: (dtype, ops): every op on float32 and int32, the others on a few; float16 sums only (the transport's rule)
CASES = (("float32", tuple(OPS)), ("int32", tuple(OPS)), ("float64", ("sum", "prod")), ("int64", ("sum", "max")),
         ("uint8", ("max", "min")), ("float16", ("sum",)))
COUNTS = (0, 1, 7, 203)  # 203 over a row of 2 or 4, a column of 3, 5, 6, 7: uneven blocks; 0: nothing moves
SMALL_PIECES = 40  # bytes per tree piece in these tests, so that 203 elements move in several pieces


def rank_input(rank, count, dtype, op, seed):
    rng = np.random.default_rng([seed, rank])
    if op == "prod":  # no overflow, no underflow: exact for integers, well-conditioned for floats
        values = rng.choice([1, 1, 2, -1], size=count) if np.dtype(dtype).kind != "f" else rng.uniform(0.8, 1.25, count)
    elif np.dtype(dtype).kind == "u":
        values = rng.integers(0, 250, size=count)
    else:
        values = rng.integers(-50, 50, size=count) + (rng.random(count) if np.dtype(dtype).kind == "f" else 0)
    return np.asarray(values).astype(dtype)


def expected(ranks, count, dtype, op, seed):
    inputs = [rank_input(r, count, dtype, op, seed).astype(np.float64 if np.dtype(dtype).kind == "f" else dtype)
              for r in range(ranks)]
    return OPS[op][1].reduce(np.stack(inputs), axis=0) if count else np.zeros(0, dtype)


def check(out, ranks, count, dtype, op, seed):
    """'' when ``out`` is the reduction of the ranks' inputs, else what differs."""
    want = expected(ranks, count, dtype, op, seed)
    if out.dtype != np.dtype(dtype) or out.shape != (count,):
        return f"dtype/shape {out.dtype}/{out.shape}"
    if np.dtype(dtype).kind == "f":
        eps = float(np.finfo(dtype).eps)
        tol = eps * ranks * 4 * max(1.0, float(np.abs(want).max(initial=0)))
        ok = np.allclose(out.astype(np.float64), want, rtol=eps * ranks * 4, atol=tol)
    else:
        ok = np.array_equal(out, want)
    return "" if ok else f"max error {np.abs(out.astype(np.float64) - want.astype(np.float64)).max()}"


def same_everywhere(comm, arrays):
    """True on every rank when every rank holds the same bytes in ``arrays`` (one all-gather of CRCs)."""
    crc = zlib.crc32(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays))
    return len(set(comm.allgather(crc))) == 1


def first(k):
    """The communicator of MPI_COMM_WORLD's ranks 0..k-1 (COMM_NULL on the others)."""
    return WORLD.Split(0 if WORLD.rank < k else MPI.UNDEFINED, WORLD.rank)


@pytest.fixture(scope="module", autouse=True)
def eight_ranks():
    assert WORLD.Get_size() == 8, "run on 8 ranks (launches.tsv: mpirun 8)"


def run_cases(tc, ranks, seed):
    """Every CASES x COUNTS call through ``tc``; (failures, results)."""
    failures, results = [], []
    for d, (dtype, ops) in enumerate(CASES):
        for op in ops:
            for count in COUNTS:
                s = seed * 1000 + d * 100 + list(OPS).index(op) * 10 + COUNTS.index(count)
                out = torus_allreduce(tc, rank_input(tc.comm.rank, count, dtype, op, s), op=OPS[op][0])
                results.append(out)
                why = check(out, ranks, count, dtype, op, s)
                if why:
                    failures.append(f"{dtype} {op} count {count}: {why}")
    return failures, results


@pytest.mark.parametrize("algorithm", COLUMN_CHOICES + ("auto-across-nodes",))
def test_every_column_length_one_to_eight(algorithm):
    """Grid 1 x Y for Y = 1..8: phase 2 is the whole all-reduce, by ``algorithm``, every dtype and op
    (``auto-across-nodes``: ``auto`` asking the across-nodes model, which mixes the algorithms by size)."""
    failures = []
    for y in range(1, 9):
        sub = first(y)
        if sub != MPI.COMM_NULL:
            tc = TorusComm.create(sub, f"1x{y}", column_algorithm=algorithm.replace("-across-nodes", ""))
            model = ACROSS_NODES if algorithm == "auto-across-nodes" else tc.column_model
            tc.column_model = dataclasses.replace(model, chunk_bytes=SMALL_PIECES)
            bad, results = run_cases(tc, y, seed=y)
            failures += [f"Y={y}: {b}" for b in bad]
            if not same_everywhere(sub, results):
                failures.append(f"Y={y}: the ranks' results differ in some bits")
            tc.free()
            sub.Free()
        WORLD.Barrier()
    assert not failures, failures[:10]


@pytest.mark.parametrize("grid", ["2x1", "2x2", "1x4", "2x3", "4x2", "2x4"])
def test_grids_every_algorithm(grid):
    """The three phases on each grid with each column algorithm, plus an average (postscale 1/N)."""
    x, y = (int(v) for v in grid.split("x"))
    failures = []
    sub = first(x * y)
    if sub != MPI.COMM_NULL:
        for algorithm in COLUMN_CHOICES:
            tc = TorusComm.create(sub, grid, column_algorithm=algorithm)
            tc.column_model = dataclasses.replace(tc.column_model, chunk_bytes=SMALL_PIECES)
            bad, results = run_cases(tc, x * y, seed=x * 10 + y)
            failures += [f"{algorithm}: {b}" for b in bad]
            buf = rank_input(sub.rank, 1001, "float64", "sum", 7)
            mean = allreduce_buffer(tc, buf, CallSignature(1001, "float64", op="Average"), postscale=1 / (x * y))
            if not np.allclose(mean, expected(x * y, 1001, "float64", "sum", 7) / (x * y), rtol=1e-12, atol=1e-12):
                failures.append(f"{algorithm}: average differs")
            if not same_everywhere(sub, results + [mean]):
                failures.append(f"{algorithm}: the ranks' results differ in some bits")
            tc.free()
        sub.Free()
    WORLD.Barrier()
    assert not failures, failures[:10]


def test_large_shards_every_algorithm_match_mpi_allreduce():
    """A 2x4 grid, 300,001 float64 per rank (rings in the rows, 1.2 MB column shards: the tree in two
    pieces of its default 1 MiB): every algorithm equals MPI_Allreduce bit for bit (small integers)."""
    send = ((np.arange(300_001) % 7) * (WORLD.rank + 1) - WORLD.rank).astype(np.float64)
    ref = np.empty_like(send)
    WORLD.Allreduce(send, ref, op=MPI.SUM)
    wrong = {}
    for algorithm in COLUMN_ALGORITHMS:
        with TorusComm.create(WORLD, "2x4", column_algorithm=algorithm) as tc:
            wrong[algorithm] = int(np.count_nonzero(torus_allreduce(tc, send) != ref))
    assert wrong == {a: 0 for a in COLUMN_ALGORITHMS}


@pytest.mark.parametrize("grid", ["2x4", "1x8", "4x2"])
def test_auto_choice_is_identical_on_every_rank(grid):
    """``auto``'s choice for sizes 0 B .. 64 MiB, with either model, is the same on every rank, and it
    is what the call's signature carries (a call checks it and runs it)."""
    sizes = [0] + [1 << k for k in range(0, 27, 2)] + [3 * 10 ** k for k in range(1, 8)]
    with TorusComm.create(WORLD, grid, column_algorithm="auto") as tc:
        choices = [[tc.algorithm_for(n) for n in sizes]]
        tc.column_model = ACROSS_NODES
        choices.append([tc.algorithm_for(n) for n in sizes])
        everyone = WORLD.allgather(choices)
        out = torus_allreduce(tc, np.arange(5000, dtype=np.float32))  # runs the across-nodes choice
    assert all(c == everyone[0] for c in everyone)
    assert set(choices[0] + choices[1]) <= set(COLUMN_ALGORITHMS) | {""}
    np.testing.assert_array_equal(out, np.arange(5000, dtype=np.float32) * 8)
    if tc.grid.y > 2:  # the across-nodes model changes its mind with size (halving-doubling, then the ring)
        assert len(set(choices[1][1:])) > 1, choices[1]
    assert ON_NODE != ACROSS_NODES


def test_ranks_that_chose_different_column_algorithms_raise_together():
    """One rank forced to another column algorithm: the signature check raises on every rank, naming
    each rank's column, before any data moves."""
    with TorusComm.create(WORLD, "2x4") as tc:
        tc.column_algorithm = "ring" if WORLD.rank == 0 else "tree"
        with pytest.raises(TorusMismatchError, match=r"algorithm: rank 0 torus \(column ring\), rank 1 torus "
                                                     r"\(column tree\)") as info:
            torus_allreduce(tc, np.ones(64, np.float32))
        assert "different column algorithms" in str(info.value)
        tc.column_algorithm = "halving-doubling"  # agreed again: the communicators still work
        np.testing.assert_array_equal(torus_allreduce(tc, np.ones(64, np.float32)), np.full(64, 8, np.float32))
