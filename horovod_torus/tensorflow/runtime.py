"""``init``: Horovod initialisation with the torus process sets, returning the process's TorusAllreduce.

Horovod itself is process-global (one background thread, one set of process sets), so the one
:class:`horovod_torus.tensorflow.torus.TorusAllreduce` made here is kept beside it: :func:`torus`
returns it. The data path does not look it up per call: strategies bind it once.
"""
from __future__ import annotations

import os

import horovod.tensorflow as _hvd

from horovod_torus.agreement import agree
from horovod_torus.process_sets import GRID_ENV, TorusProcessSets, grid_from_env
from horovod_torus.tensorflow.torus import TRANSPORTS, TorusAllreduce
from horovod_torus.topology import TorusTopology

__all__ = ["init", "shutdown", "torus", "torus_process_sets", "grid", "backend", "torus_comm", "BACKEND_ENV",
           "MIN_BYTES_ENV"]

BACKEND_ENV = "HOROVOD_TORUS_BACKEND"
MIN_BYTES_ENV = "HOROVOD_TORUS_MIN_BYTES"
BACKENDS = ("auto",) + TRANSPORTS

_current: dict = {"torus": None}


def init(comm=None, process_sets=None, *, grid=None, backend=None, min_torus_bytes=None,
         stall_shutdown_seconds: float | None = 300.0, **kwargs) -> TorusAllreduce:
    """Initialise Horovod with every row and column process set of the torus grid.

    ``horovod.tensorflow.init(comm=None, process_sets=None)``'s parameters, in Horovod's order, then the
    torus options, keyword-only.

    Args:
        comm: as in Horovod: None (the launcher's world), an mpi4py communicator, or a list of ranks of
            ``MPI_COMM_WORLD``. The torus spans exactly these ranks: its MPI row/column communicators are
            split from (a duplicate of) this communicator.
        process_sets: the caller's own Horovod process sets, registered first (the torus sets after
            them, all rows then all columns). Checked before Horovod starts: no duplicate rank, ranks in
            [0, size), the same list on every rank.
        grid: a TorusTopology, ``"XxY"`` (X ranks per row, Y rows), or None: ``HOROVOD_TORUS_GRID``, else
            a node's ranks form one row (X = local size when it divides the size), else the most square.
        backend: the default transport of the ``"torus"`` strategy: ``"horovod"`` (Horovod ops on the
            row/column process sets: MPI, Gloo or NCCL), ``"mpi"`` (mpi4py row/column communicators, CPU
            tensors, MPI controller only) or ``"auto"`` (None: ``HOROVOD_TORUS_BACKEND``, else auto):
            "mpi" when Horovod runs the MPI controller and no GPU is visible, else "horovod".
        min_torus_bytes: fused buffers below this many bytes take Horovod's own all-reduce (the
            ``ring`` strategy's call) instead of the three phases; ``"auto"`` measures both at init (a few seconds,
            :meth:`TorusAllreduce.calibrate`); None: ``HOROVOD_TORUS_MIN_BYTES``, else 0 (always the torus).
        stall_shutdown_seconds: when HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is unset, Horovod shuts down
            (raising on every rank) after a collective waited this long; None keeps Horovod's default
            (warn every 60 s, never shut down).
        **kwargs: forwarded to ``horovod.tensorflow.init``.

    Returns:
        The process's :class:`TorusAllreduce` (the same object for a repeated call with equal settings).

    Raises:
        ValueError: a malformed grid, X*Y != world size, an unknown backend, bad process sets, or a
            second init with another grid or backend (naming both). Raised on every rank before Horovod
            starts.
        horovod_torus.agreement.SettingsMismatchError (a ValueError): the ranks differ in grid, backend,
            world size, min_torus_bytes or process sets (e.g. an environment variable exported to some
            ranks only); raised on every rank, naming each rank's value.
        RuntimeError: Horovod was already initialised without the torus sets.
    """
    if _hvd.is_initialized():
        return _same_as_running(_parse_grid(grid), _check_backend(backend), backend)
    mpi_comm = _mpi_comm(comm)
    size, local_size, rank = _world(mpi_comm)
    local_error = None
    try:  # every local check first, so that a rank with bad input tells the others instead of leaving them
        requested_grid = _parse_grid(grid)
        requested_backend = _check_backend(backend)
        min_bytes = _check_min_bytes(min_torus_bytes)
        the_grid = requested_grid or grid_from_env() or TorusTopology.from_world(size, local_size)
        the_grid.check_size(size)
        user_sets = _check_process_sets(process_sets, size)
        settings = {"grid": str(the_grid), "backend": requested_backend, "size": size,
                    "min_torus_bytes": min_bytes, "process_sets": [list(s.ranks) for s in user_sets]}
    except (ValueError, TypeError) as exc:
        local_error, settings = exc, {"error": f"{type(exc).__name__}: {exc}"}
    agree(settings, rank=rank, size=size, comm=mpi_comm)
    if local_error is not None:
        raise local_error
    if stall_shutdown_seconds is not None and "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in os.environ:
        os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(1, min(60.0, stall_shutdown_seconds)))))
        os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(int(max(1, stall_shutdown_seconds)))
    sets = TorusProcessSets.build(the_grid, rank, _hvd.ProcessSet, _hvd.global_process_set)
    _hvd.init(comm=comm, process_sets=list(user_sets) + list(sets.registered), **kwargs)
    if _hvd.size() != size or _hvd.rank() != rank:
        raise RuntimeError(f"Horovod started rank {_hvd.rank()} of {_hvd.size()} but the launcher announced "
                           f"rank {rank} of {size}")
    transport = _resolve_backend(requested_backend)
    torus_comm = None
    if _hvd.mpi_enabled() and mpi_comm is not None:
        from horovod_torus.mpi import TorusComm

        torus_comm = TorusComm.create(mpi_comm, the_grid)
    _current["torus"] = TorusAllreduce(sets, transport, torus_comm, 0 if min_bytes == "auto" else min_bytes)
    if min_bytes == "auto":
        _current["torus"].calibrate()
    return _current["torus"]


def _parse_grid(grid):
    if grid is None or isinstance(grid, TorusTopology):
        return grid
    if isinstance(grid, str):
        return TorusTopology.parse(grid)
    raise TypeError(f"grid={grid!r} must be a TorusTopology, an 'XxY' string or None (pass the communicator "
                    f"as comm=, the first positional parameter, as in horovod.tensorflow.init)")


def _check_backend(value):
    source = "backend"
    if value is None:
        source, value = BACKEND_ENV, os.environ.get(BACKEND_ENV, "").strip() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"{source}={value!r} is not a torus backend: choose one of {', '.join(BACKENDS)}")
    return value


def _check_min_bytes(value):
    source = "min_torus_bytes"
    if value is None:
        source, value = MIN_BYTES_ENV, os.environ.get(MIN_BYTES_ENV, "").strip() or "0"
    if value == "auto":
        return value
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, bool):
        raise ValueError(f"{source}={value!r} must be 'auto' or an integer number of bytes >= 0 (0: always "
                         f"the torus)")
    return number


def _same_as_running(requested_grid, requested_backend, backend_arg):
    current = _current["torus"]
    if current is None:
        raise RuntimeError("Horovod is already initialised without the torus process sets: call "
                           "horovod_torus.tensorflow.init() instead of horovod.tensorflow.init()")
    if requested_grid is not None and requested_grid != current.grid:
        raise ValueError(f"init(grid={requested_grid}): horovod_torus already runs on grid {current.grid}; "
                         f"call shutdown() first to change it")
    if backend_arg is not None and requested_backend not in ("auto", current.transport):
        raise ValueError(f"init(backend={requested_backend!r}): horovod_torus already runs with backend "
                         f"{current.transport!r}; call shutdown() first to change it")
    return current


def _mpi_comm(comm):
    """The mpi4py communicator the torus spans, or None under horovodrun --gloo (no MPI world)."""
    if comm is None:
        if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in os.environ or (
                "HOROVOD_SIZE" in os.environ and "OMPI_COMM_WORLD_SIZE" not in os.environ
                and "PMI_SIZE" not in os.environ):
            return None
        from mpi4py import MPI

        return MPI.COMM_WORLD
    if isinstance(comm, (list, tuple)):
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        ranks = [int(r) for r in comm]
        if world.Get_rank() not in ranks:
            raise ValueError(f"comm={ranks}: this process (MPI_COMM_WORLD rank {world.Get_rank()}) is not in "
                             f"the list; only the listed ranks may call init with it")
        group = world.Get_group().Incl(ranks)
        sub = world.Create_group(group)
        group.Free()
        return sub
    if hasattr(comm, "Get_size") and hasattr(comm, "Split_type"):  # an mpi4py intra-communicator
        return comm
    raise TypeError(f"comm={comm!r} must be None, an mpi4py communicator or a list of ranks (Horovod's "
                    f"init(comm=None, process_sets=None)); the grid is keyword-only: init(grid='2x2')")


def _world(mpi_comm):
    """(size, local_size, rank) before Horovod starts."""
    if mpi_comm is None:
        size = int(os.environ.get("HOROVOD_SIZE", "1"))
        return size, int(os.environ.get("HOROVOD_LOCAL_SIZE", size)), int(os.environ.get("HOROVOD_RANK", "0"))
    from mpi4py import MPI

    local = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return mpi_comm.Get_size(), local.Get_size(), mpi_comm.Get_rank()
    finally:
        local.Free()


def _check_process_sets(process_sets, size):
    sets = list(process_sets or [])
    for i, s in enumerate(sets):
        ranks = getattr(s, "ranks", None)
        if ranks is None:
            raise TypeError(f"process_sets[{i}]={s!r} is not a horovod ProcessSet: build it with "
                            f"hvd.ProcessSet([ranks])")
        ranks = list(ranks)
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        if dup:
            raise ValueError(f"process_sets[{i}] = ProcessSet({ranks}) lists rank(s) {dup} twice: list each "
                             f"rank once")
        bad = [r for r in ranks if not 0 <= int(r) < size]
        if bad:
            raise ValueError(f"process_sets[{i}] = ProcessSet({ranks}) has rank(s) {bad} outside [0, {size}) "
                             f"for a world of {size} ranks")
    return sets


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
    """Shut Horovod down and free the torus (``init`` may then be called again)."""
    if _current["torus"] is not None:
        _current["torus"].free()
    _current["torus"] = None
    _hvd.shutdown()


def torus() -> TorusAllreduce:
    """The TorusAllreduce made by :func:`init`. Raises RuntimeError naming the fix before init."""
    current = _current["torus"]
    if current is None or not _hvd.is_initialized():
        raise RuntimeError(
            "horovod_torus is not initialised: call horovod_torus.tensorflow.init() (not "
            "horovod.tensorflow.init()) before any torus collective")
    return current


def torus_process_sets() -> TorusProcessSets:
    """This rank's TorusProcessSets."""
    return torus().process_sets


def grid() -> TorusTopology:
    """The grid chosen at init()."""
    return torus().grid


def backend() -> str:
    """The default transport chosen at init(): ``"horovod"`` or ``"mpi"``."""
    return torus().transport


def torus_comm():
    """The mpi4py TorusComm (None without Horovod's MPI controller)."""
    return torus().torus_comm


__all__ += ["GRID_ENV"]
