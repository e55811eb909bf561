"""Horovod initialisation with the torus process sets, and the process-wide torus state.

Horovod itself is process-global (one background thread, one set of process sets); the torus sets that
belong to it live here, next to it, and are reachable only through :func:`torus_process_sets`.
"""
from __future__ import annotations

import os

import horovod.tensorflow as _hvd

from horovod_torus.process_sets import TorusProcessSets, grid_from_env, world_from_launcher
from horovod_torus.topology import TorusTopology

__all__ = ["init", "shutdown", "torus_process_sets", "grid", "backend", "torus_comm", "BACKEND_ENV"]

BACKEND_ENV = "HOROVOD_TORUS_BACKEND"
BACKENDS = ("auto", "horovod", "mpi")

_state: dict = {"sets": None, "backend": None, "torus_comm": None}


def init(grid: TorusTopology | str | None = None, comm=None, process_sets=None, *,
         backend: str | None = None, stall_shutdown_seconds: float | None = 300.0,
         **kwargs) -> TorusProcessSets:
    """Initialise Horovod with every row and column process set of the torus grid.

    Args:
        grid: a TorusTopology, a string ``"XxY"``, or None for ``HOROVOD_TORUS_GRID`` (read once here)
            and else the default :meth:`TorusTopology.from_world` (a node's ranks form one row).
        comm: forwarded to ``horovod.tensorflow.init`` (an mpi4py communicator or list of ranks).
        process_sets: the caller's own Horovod process sets; they are registered first, the torus sets
            after them (all rows, then all columns), in the same order on every rank.
        backend: how the three phases move data: ``"horovod"`` (Horovod ops on the row/column process
            sets: MPI, Gloo or NCCL), ``"mpi"`` (mpi4py collectives on row/column communicators, CPU
            tensors, MPI controller only), or ``"auto"`` (default; ``HOROVOD_TORUS_BACKEND`` when None):
            "mpi" when Horovod runs the MPI controller and no GPU is visible, else "horovod".
        stall_shutdown_seconds: when HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is unset, Horovod is told to
            shut down (raising on every rank) after a collective has waited this long for some rank,
            instead of hanging forever: a rank that failed in phase 1 of the torus (e.g. a shape that
            differs across ranks) leaves the ranks of other rows waiting in phase 2. None keeps
            Horovod's default (warn every 60 s, never shut down).
        **kwargs: forwarded to ``horovod.tensorflow.init``.

    Returns:
        This rank's TorusProcessSets.

    Raises:
        ValueError: a malformed grid or one whose X*Y differs from the world size, or an unknown backend.
            It is raised on every rank before Horovod starts, so no rank waits in a collective.
        RuntimeError: Horovod was already initialised without the torus sets (call this init instead of
            ``horovod.tensorflow.init``).
    """
    if _hvd.is_initialized():
        if _state["sets"] is not None:
            return _state["sets"]
        raise RuntimeError(
            "Horovod is already initialised without the torus process sets: call "
            "horovod_torus.tensorflow.init() instead of horovod.tensorflow.init()")
    if isinstance(comm, list):
        size, local_size, rank = len(comm), len(comm), None
    else:
        size, local_size, rank = world_from_launcher(comm)
    if isinstance(grid, str):
        grid = TorusTopology.parse(grid)
    elif grid is None:
        grid = grid_from_env() or TorusTopology.from_world(size, local_size)
    elif not isinstance(grid, TorusTopology):
        raise TypeError(f"grid={grid!r} must be a TorusTopology, an 'XxY' string or None")
    grid.check_size(size)
    backend = _check_backend(backend)
    if stall_shutdown_seconds is not None and "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in os.environ:
        check = min(60.0, stall_shutdown_seconds)
        os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(1, check))))
        os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(int(max(1, stall_shutdown_seconds)))
    # The sets are built with placeholder rank 0 first (rank is known only after hvd.init for list comms).
    sets = TorusProcessSets.build(grid, rank or 0, _hvd.ProcessSet, _hvd.global_process_set)
    _hvd.init(comm=comm, process_sets=list(process_sets or []) + list(sets.registered), **kwargs)
    if _hvd.size() != size:
        raise RuntimeError(f"Horovod started {_hvd.size()} ranks but the launcher announced {size}")
    if _hvd.rank() != sets.rank:
        sets = sets.with_rank(_hvd.rank())
    backend = _resolve_backend(backend)
    if backend == "mpi":
        from horovod_torus.tensorflow.mpi_backend import create_torus_comm

        _state["torus_comm"] = create_torus_comm(grid)
    _state["sets"], _state["backend"] = sets, backend
    return sets


def _check_backend(value):
    source = "backend"
    if value is None:
        source, value = BACKEND_ENV, os.environ.get(BACKEND_ENV, "").strip() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"{source}={value!r} is not a torus backend: choose one of {', '.join(BACKENDS)}")
    return value


def _resolve_backend(value):
    """'auto' -> 'mpi' on CPU with Horovod's MPI controller, else 'horovod'. Same answer on every rank."""
    import tensorflow as tf

    mpi_ok = _hvd.mpi_enabled()
    if value == "mpi" and not mpi_ok:
        raise ValueError("backend='mpi' needs Horovod's MPI controller (launch with mpirun or "
                         "horovodrun --mpi); use backend='horovod' under horovodrun --gloo")
    if value == "auto":
        value = "mpi" if mpi_ok and not tf.config.list_physical_devices("GPU") else "horovod"
    return value


def shutdown() -> None:
    """Shut Horovod down and forget the torus sets (``init`` may then be called again)."""
    if _state["torus_comm"] is not None:
        _state["torus_comm"].free()
    _state.update(sets=None, backend=None, torus_comm=None)
    _hvd.shutdown()


def torus_process_sets() -> TorusProcessSets:
    """This rank's TorusProcessSets. Raises RuntimeError naming the fix when init() was not called."""
    sets = _state["sets"]
    if sets is None or not _hvd.is_initialized():
        raise RuntimeError(
            "horovod_torus is not initialised: call horovod_torus.tensorflow.init() (not "
            "horovod.tensorflow.init()) before any torus collective")
    return sets


def grid() -> TorusTopology:
    """The grid chosen at init()."""
    return torus_process_sets().grid


def backend() -> str:
    """The data path chosen at init(): ``"horovod"`` or ``"mpi"``."""
    torus_process_sets()
    return _state["backend"]


def torus_comm():
    """The mpi4py TorusComm of the "mpi" backend (None for the "horovod" backend)."""
    torus_process_sets()
    return _state["torus_comm"]
