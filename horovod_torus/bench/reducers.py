"""The reductions the benchmarks compare, behind one name each.

TensorFlow strategies (tensors in, tensors out, timed inside ``tf.function`` as training does): any name
of the strategy registry (:func:`horovod_torus.strategies.available_strategies`): ``torus`` (on the
transport chosen at init), ``torus:horovod``, ``torus:mpi``, ``horovod`` (Horovod's flat all-reduce, the
reference; ``ring``, its old name, is accepted as an alias), and every strategy a user registered
(``--strategy-module``). The benchmark measures exactly
what ``DistributedOptimizer(strategy=...)`` runs.

MPI strategies (numpy buffers, mpi4py on ``MPI.COMM_WORLD``, measured before Horovod starts):

* ``mpi-torus``: :func:`horovod_torus.mpi.torus_allreduce` on a TorusComm made once (with the default
  settings: its calibrated crossover, so small buffers take one ``MPI_Allreduce``);
* ``mpi``: ``MPI_Allreduce`` on the world communicator.
"""
from __future__ import annotations

from horovod_torus.strategies.registry import available_strategies, check_strategy, get_strategy

__all__ = ["DEFAULT_STRATEGIES", "MPI_STRATEGIES", "is_mpi", "mpi_supports", "known_strategies", "check_names", "tf_reduce_fn",
           "mpi_reduce_fn"]

MPI_STRATEGIES = ("mpi-torus", "mpi")
DEFAULT_STRATEGIES = ("torus", "horovod", "mpi-torus", "mpi")


def is_mpi(name: str) -> bool:
    """True for the numpy/mpi4py strategies (run before Horovod starts)."""
    return name in MPI_STRATEGIES


def mpi_supports(name: str, dtype: str) -> bool:
    """Whether MPI strategy ``name`` reduces ``dtype`` (a numpy dtype name): MPI has no float16 or bfloat16
    datatype, but ``mpi-torus`` sums float16 (numpy arithmetic, :func:`horovod_torus.mpi.torus_allreduce`)."""
    return dtype not in ("float16", "bfloat16") or (name == "mpi-torus" and dtype == "float16")


def known_strategies() -> tuple:
    """Every name the benchmarks accept: the registry's and the MPI ones."""
    return available_strategies() + MPI_STRATEGIES


def check_names(names) -> None:
    """ValueError naming the unknown strategies and the known ones."""
    bad = []
    for n in names:
        if is_mpi(n):
            continue
        try:
            check_strategy(n)
        except (ValueError, TypeError):
            bad.append(n)
    if bad or not names:
        raise ValueError(f"--strategies {' '.join(bad) or '(none)'} unknown: choose among "
                         f"{' '.join(known_strategies())} (register yours with --strategy-module MODULE)")


def tf_reduce_fn(name: str):
    """fn(tensors, op, name=None, compression, prescale_factor, postscale_factor) -> list of tensors: the
    registry's strategy ``name`` (after ``horovod_torus.tensorflow.init``).

    Raises:
        ValueError: an unknown name.
    """
    return get_strategy(name)


def mpi_reduce_fn(name: str, comm, grid=None):
    """fn(sendbuf, recvbuf) -> None: the sum over ``comm`` of numpy ``sendbuf`` written into ``recvbuf``.

    ``mpi-torus`` splits ``comm`` into row and column communicators now (collective over ``comm``).

    Raises:
        ValueError: a name outside MPI_STRATEGIES, or a grid that does not fit ``comm`` (every rank).
    """
    from mpi4py import MPI

    if name == "mpi":
        def flat(send, recv):
            comm.Allreduce(send, recv, op=MPI.SUM)
        return flat
    if name == "mpi-torus":
        from horovod_torus.mpi import TorusComm, torus_allreduce

        tc = TorusComm.create(comm, grid)

        def torus(send, recv):
            torus_allreduce(tc, send, recv, op=MPI.SUM)
        torus.grid, torus.comm = tc.grid, tc
        return torus
    raise ValueError(f"MPI strategy {name!r} is unknown: choose one of {', '.join(MPI_STRATEGIES)}")
