"""The all-reduce benchmark loop: for every (strategy, size), warm up, time, check, gather over ranks.

Timing protocol, identical for every strategy so that ratios are fair:

1. build the input (rank-dependent small integers, exact in every dtype, see :func:`rank_input`) and,
   for TensorFlow strategies, trace the ``tf.function`` (tracing is never timed);
2. ``warmup`` untimed iterations;
3. a barrier, then ``iters`` timed iterations; this rank's time = elapsed / iters
   (:func:`horovod_torus.timing.time_loop`). With ``min_seconds`` > 0, when those ``iters`` calls took
   less than ``min_seconds`` on the slowest rank, they count as warm-up and the row times
   :func:`row_iters` iterations instead: enough for ``min_seconds`` at that pace, the same count on every
   rank (as OSU's micro-benchmarks run more iterations for small messages);
4. check the last output against the exact expected sum (``check``): #wrong = differing elements;
5. gather (time, #wrong) from every rank: the row has time min/avg/max over ranks, and #wrong summed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from horovod_torus.bench.report import DTYPES, Row
from horovod_torus.bench.reducers import check_names, is_mpi, mpi_reduce_fn, mpi_supports, tf_reduce_fn
from horovod_torus.timing import time_loop

__all__ = ["BenchConfig", "MAX_ITERS", "row_iters", "rank_input", "expected_sum", "count_wrong", "run_strategy", "algorithm_of", "column_of"]

# Largest integer every value up to which the dtype represents exactly (sums stay integers).
_EXACT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53,
          "int32": 2 ** 31 - 1, "int64": 2 ** 63 - 1}


#: The most timed iterations :func:`row_iters` gives a row.
MAX_ITERS = 10000


def row_iters(iters: int, min_seconds: float, seconds_per_call: float) -> int:
    """Timed iterations of a row: ``iters``, or more where ``iters`` calls of ``seconds_per_call`` (the
    slowest rank's pace over a first loop of ``iters`` calls) take less than ``min_seconds``; at most :data:`MAX_ITERS` (never fewer
    than ``iters``)."""
    if min_seconds <= 0:
        return iters
    wanted = int(np.ceil(min_seconds / max(seconds_per_call, 1e-9)))
    return max(iters, min(wanted, MAX_ITERS))


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Resolved benchmark settings (the CLI flags, validated).

    Attributes:
        sizes: message sizes in bytes per rank, ascending.
        iters: timed iterations per row (-n), >= 1.
        warmup: untimed iterations before the timed loop (-w), >= 0.
        check: compare every row's result with the exact sum (-c).
        dtype: element type (-d), a key of report.DTYPES.
        strategies: names from reducers.STRATEGIES, in the order to run.
        grid: ``"XxY"`` or None (the default grid of horovod_torus).
        min_seconds: seconds a row's timed loop should at least last (``--min-seconds``): rows whose ``iters``
            calls are shorter time more iterations (:func:`row_iters`); 0: always ``iters``.
    """

    sizes: tuple
    iters: int = 20
    warmup: int = 5
    check: bool = True
    dtype: str = "float32"
    strategies: tuple = ("torus", "horovod", "mpi-torus", "mpi")
    grid: str | None = None
    min_seconds: float = 0.0

    def __post_init__(self):
        if self.iters < 1:
            raise ValueError(f"iterations -n {self.iters} must be >= 1")
        if not self.min_seconds >= 0:
            raise ValueError(f"--min-seconds {self.min_seconds} must be >= 0 (0: always -n iterations)")
        if self.warmup < 0:
            raise ValueError(f"warm-up iterations -w {self.warmup} must be >= 0")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if not any(s >= DTYPES[self.dtype] for s in self.sizes):
            raise ValueError(f"message sizes {list(self.sizes)} bytes are all below one {self.dtype} element "
                             f"({DTYPES[self.dtype]} bytes): raise -e/--maxbytes to at least "
                             f"{DTYPES[self.dtype]}")
        check_names(self.strategies)

    def counts(self) -> list[int]:
        """Element count per size (size // itemsize); sizes below one element are dropped."""
        item = DTYPES[self.dtype]
        return [s // item for s in self.sizes if s // item > 0]


def _modulus(dtype: str, nranks: int) -> int:
    """Inputs take values 0..m-1; m = 3 when 2N is exact in the dtype, else 2 (sum <= N)."""
    if 2 * nranks <= _EXACT[dtype]:
        return 3
    if nranks <= _EXACT[dtype]:
        return 2
    raise ValueError(f"{nranks} ranks overflow the exact integer range of {dtype} "
                     f"({_EXACT[dtype]}): the sum could not be checked exactly; use -d float32")


def rank_input(count: int, rank: int, nranks: int, dtype: str) -> np.ndarray:
    """Rank ``rank``'s input: element i = (i + rank) % m (m = 3, or 2 for huge N in half precision).

    Every partial sum is a small integer, exact in every supported dtype whatever the summation order,
    so the result can be compared with the expected sum exactly. Returned as float64 or int64 (the
    caller casts to the benchmark dtype).
    """
    m = _modulus(dtype, nranks)
    kind = np.int64 if dtype.startswith("int") else np.float64
    return ((np.arange(count, dtype=np.int64) + rank) % m).astype(kind)


def expected_sum(count: int, nranks: int, dtype: str) -> np.ndarray:
    """The exact all-reduce sum of :func:`rank_input` over ``nranks`` ranks (float64 or int64)."""
    m = _modulus(dtype, nranks)
    per_phase = np.array([sum((j + r) % m for r in range(nranks)) for j in range(m)], np.int64)
    kind = np.int64 if dtype.startswith("int") else np.float64
    return per_phase[np.arange(count) % m].astype(kind)


def count_wrong(result, expected) -> int:
    """Elements of ``result`` (any dtype, compared as float64/int64) that differ from ``expected``."""
    res = np.asarray(result).reshape(-1)
    res = res.astype(expected.dtype)
    if res.shape != expected.shape:
        return int(expected.size)
    return int(np.count_nonzero(res != expected))


def _tf_runner(reduce, strategy, count, dtype, rank, nranks):
    """(step, wait, result) for a TF strategy: one tf.function call per iteration
    (see :mod:`horovod_torus.timing`)."""
    import tensorflow as tf
    from horovod.tensorflow import Compression, Sum

    x = tf.constant(rank_input(count, rank, nranks, dtype), dtype=getattr(tf, dtype))
    out = []

    @tf.function
    def step_fn():
        return reduce([x], Sum, f"bench_{strategy}", Compression.none, 1.0, 1.0)[0]  # the six strategy args

    step_fn.get_concrete_function()  # trace now: tracing is never part of a timed iteration

    def step():
        out[:] = [step_fn()]
        return out[0]

    return step, lambda t: t.numpy(), lambda: out[0].numpy()


def _mpi_runner(reduce, count, dtype, rank, nranks):
    """(step, wait, result) for an MPI strategy on preallocated numpy buffers (blocking calls: no wait)."""
    send = rank_input(count, rank, nranks, dtype).astype(dtype)
    recv = np.empty_like(send)

    def step():
        reduce(send, recv)

    return step, None, lambda: recv


def algorithm_of(strategy: str, nbytes: int, reduce=None) -> str:
    """What a strategy ran for a buffer of ``nbytes``: ``"flat"`` (one all-reduce: Horovod's, a bare
    ``MPI_Allreduce``, or the torus' flat call below its crossover), ``"torus"`` (the three phases), or
    ``""`` (a user strategy: unknown). ``reduce``: the ``mpi-torus`` function of :func:`mpi_reduce_fn`."""
    if strategy in ("horovod", "ring", "mpi"):
        return "flat"
    if strategy == "mpi-torus":
        return reduce.comm.algorithm(nbytes) if reduce is not None else "torus"
    if strategy == "torus" or strategy.startswith("torus:"):
        from horovod_torus.tensorflow.runtime import torus

        return torus().algorithm(nbytes, _transport_of(strategy))
    return ""


def column_of(strategy: str, nbytes: int, reduce=None) -> str:
    """The column algorithm of a torus row (the MPI transport's :meth:`horovod_torus.mpi.TorusComm.algorithm_for`:
    ``"mpi"``, ``"ring"``, ``"halving-doubling"``, ``"tree"``; ``"hvd.allreduce"`` on the Horovod transport;
    ``"none"`` for one row), ``""`` for a flat or a user strategy's row."""
    if algorithm_of(strategy, nbytes, reduce) != "torus":
        return ""
    if strategy == "mpi-torus":
        return (reduce.comm.algorithm_for(nbytes) or "none") if reduce is not None else ""
    from horovod_torus.tensorflow.runtime import torus

    return torus().column_algorithm(nbytes, _transport_of(strategy))


def _transport_of(strategy: str):
    return strategy.split(":", 1)[1] if ":" in strategy else None


def run_strategy(strategy: str, config: BenchConfig, control, *, comm=None, on_row=None) -> list[Row]:
    """Every size of ``config`` for one strategy. Collective: every rank calls it with the same args.

    Args:
        strategy: a TF strategy (Horovod must be initialised through horovod_torus) or an MPI one
            (``comm``: the mpi4py world communicator).
        control: HorovodControl/MpiControl used for the barrier and to gather the per-rank results.
        on_row: called with each Row as soon as it is measured (rank 0 prints it).

    Returns:
        The rows (identical on every rank).
    """
    nranks, rank = control.size, control.rank
    is_tf = not is_mpi(strategy)
    if not is_tf and not mpi_supports(strategy, config.dtype):
        raise ValueError(f"strategy {strategy} has no MPI datatype for {config.dtype}")
    reduce = tf_reduce_fn(strategy) if is_tf else mpi_reduce_fn(strategy, comm, config.grid)
    barrier = control.barrier if is_tf else comm.Barrier
    rows = []
    for count in config.counts():
        if is_tf:
            step, wait, result = _tf_runner(reduce, strategy, count, config.dtype, rank, nranks)
        else:
            step, wait, result = _mpi_runner(reduce, count, config.dtype, rank, nranks)
        iters = config.iters
        seconds = time_loop(step, iters, warmup=config.warmup, wait=wait, barrier=barrier)
        if config.min_seconds > 0:  # too short a loop: it was one more warm-up, time enough calls now
            more = row_iters(iters, config.min_seconds, float(control.gather([seconds])[:, 0].max()))
            if more > iters:
                iters, seconds = more, time_loop(step, more, wait=wait, barrier=barrier)
        wrong = count_wrong(result(), expected_sum(count, nranks, config.dtype)) if config.check else -1
        gathered = control.gather([seconds, wrong])
        total_wrong = None if not config.check else int(gathered[:, 1].sum())
        nbytes = count * DTYPES[config.dtype]
        row = Row.from_times(strategy, count, config.dtype, gathered[:, 0], total_wrong,
                             algorithm=algorithm_of(strategy, nbytes, reduce),
                             column=column_of(strategy, nbytes, reduce), iters=iters)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
