"""``init``: Horovod initialisation with the torus process sets, returning the process's TorusAllreduce.

Horovod itself is process-global (one background thread, one set of process sets), so the one
:class:`horovod_torus.tensorflow.torus.TorusAllreduce` made here is kept beside it: :func:`torus`
returns it. The data path does not look it up per call: strategies bind it once.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import warnings

import horovod.tensorflow as _hvd

from horovod_torus import ompi_rules, tf_defaults
from horovod_torus.agreement import agree_on
from horovod_torus.launch import LaunchContext
from horovod_torus.process_sets import TorusProcessSets
from horovod_torus.rollcall import channel_for
from horovod_torus.settings import TorusSettings
from horovod_torus.stall import end_on_uncaught, exit_check_mpi, job_ending, uncaught_error
from horovod_torus.tensorflow.guard import ExchangeGuard, exit_check, leave
from horovod_torus.tensorflow.torus import TorusAllreduce
from horovod_torus.topology import TorusTopology

__all__ = ["init", "shutdown", "shutdown_without_wait", "reinit", "current_torus", "generation", "torus",
           "torus_process_sets", "grid", "transport", "backend", "torus_comm", "settings", "ompi_rules_file"]

_current: dict = {"torus": None, "settings": None, "generation": 0}

#: init's argument names that differ from the setting's (TorusSettings.resolve's messages name the argument).
_ARGUMENT_NAMES = {"stall_seconds": "stall_shutdown_seconds"}


def init(comm=None, process_sets=None, *, grid=None, transport=None, min_torus_bytes=None, column_algorithm=None,
         stall_shutdown_seconds=None, backend=None, column_ring=None, cache_dir=None, **kwargs) -> TorusAllreduce:
    """Initialise Horovod with every row and column process set of the torus grid.

    ``horovod.tensorflow.init(comm=None, process_sets=None)``'s parameters, in Horovod's order, then the
    torus settings, keyword-only. Each setting is the argument, else its environment variable, else its
    default (:class:`horovod_torus.settings.TorusSettings`; the configuration reference lists them all).
    They are resolved once here, compared across ranks, and passed to everything that needs them.

    Args:
        comm: as in Horovod: None (the launcher's world), an mpi4py communicator, or a list of ranks of
            ``MPI_COMM_WORLD``. The torus spans exactly these ranks: its MPI row/column communicators are
            split from (a duplicate of) this communicator.
        process_sets: the caller's own Horovod process sets, registered first (the torus sets after
            them, all rows then all columns). Checked before Horovod starts: no duplicate rank, ranks in
            [0, size), the same list on every rank.
        grid: a TorusTopology, ``"XxY"`` (X ranks per row, Y rows), or None: ``HOROVOD_TORUS_GRID``, else
            a node's ranks form one row (X = local size when it divides the size), else the most square.
            Under an elastic ``horovodrun`` also a rule: a function ``(size, local_size) -> grid`` called
            for every world (:mod:`horovod_torus.tensorflow.elastic`).
        transport: the data path of the ``"torus"`` strategy: ``"horovod"`` (Horovod ops on the
            row/column process sets: MPI, Gloo or NCCL), ``"mpi"`` (mpi4py row/column communicators, CPU
            tensors, MPI controller only) or ``"auto"`` (None: ``HOROVOD_TORUS_TRANSPORT``, else auto):
            "mpi" when Horovod runs the MPI controller and no GPU is visible, else "horovod".
        min_torus_bytes: fused buffers below this many bytes take one flat all-reduce on the same
            transport instead of the three phases; 0: always the torus; ``"auto"`` (None:
            ``HOROVOD_TORUS_MIN_BYTES``, else auto) reads the crossover of this job's key from the cache
            (``HOROVOD_TORUS_CACHE_DIR``), else measures both algorithms of every transport (a few
            seconds, :meth:`TorusAllreduce.resolve_crossover`; rank 0 writes the cache); with a GPU
            visible at the first torus call instead of here (measuring starts TensorFlow's runtime).
        column_algorithm: the MPI transport's column all-reduce (phase 2): ``"mpi"`` (MPI_Allreduce),
            ``"ring"``, ``"halving-doubling"``, ``"tree"`` (point-to-point, :mod:`horovod_torus.columns`)
            or None/``"auto"`` (``HOROVOD_TORUS_COLUMN_ALGORITHM``, else auto: per call from the cost
            model by the shard's bytes and the column length). No effect on the ``horovod`` transport.
        stall_shutdown_seconds: seconds a collective may wait for the other ranks before Horovod shuts
            down (raising on every rank) and the MPI transport aborts the job; None:
            ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``, else 300; 0 or inf: never (Horovod's own default);
            NaN or negative: ValueError. Exported to Horovod as ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``
            (0 for never), the only way Horovod reads it.
        backend: deprecated alias of ``transport`` (DeprecationWarning).
        column_ring: deprecated alias of ``column_algorithm`` (DeprecationWarning): True ``"ring"``,
            False ``"mpi"``.
        cache_dir: the directory of the crossover cache files, or ``"off"`` (None:
            ``HOROVOD_TORUS_CACHE_DIR``, else ``~/.cache/horovod_torus``); only rank 0's is used.
        **kwargs: forwarded to ``horovod.tensorflow.init``.

    Returns:
        The process's :class:`TorusAllreduce` (the same object for a repeated call with equal settings).

    Raises:
        ValueError: a malformed setting, X*Y != world size, an unknown transport, bad process sets (raised
            on every rank before Horovod starts), or a second init given another grid, transport,
            min_torus_bytes, column algorithm or stall deadline than the running ones (naming both; on the
            calling rank; the other arguments are not compared).
        horovod_torus.agreement.SettingsMismatchError (a ValueError): the ranks differ in a setting, the
            world size or the process sets (e.g. an environment variable exported to some ranks only);
            raised on every rank, naming each rank's value.
        RuntimeError: Horovod was already initialised without the torus sets.
    """
    transport = _transport_argument(transport, backend)
    if _hvd.is_initialized():
        return _same_as_running(grid=grid, transport=transport, min_torus_bytes=min_torus_bytes,
                                column_algorithm=column_algorithm, column_ring=column_ring,
                                stall_seconds=stall_shutdown_seconds)
    tf_defaults.warn_if_onednn_off()
    context = LaunchContext.from_environ()
    if context.elastic:
        return _init_elastic(comm, process_sets, kwargs, grid=grid, transport=transport,
                             min_torus_bytes=min_torus_bytes, column_algorithm=column_algorithm,
                             column_ring=column_ring, stall_seconds=stall_shutdown_seconds, cache_dir=cache_dir)
    if comm is None:  # before MPI starts: Open MPI's all-reduce rule for the columns (or why not)
        ompi_rules.prepare_for_job(context)
    mpi_comm = _mpi_comm(comm, context)
    if mpi_comm is None:
        size, local_size, rank = context.size, context.local_size, context.rank
    else:
        from horovod_torus.mpi import comm_world

        size, local_size, rank = comm_world(mpi_comm)

    def build():  # every local check, so that a rank with bad input tells the others instead of leaving them
        settings = TorusSettings.resolve(size=size, local_size=local_size, grid=grid, transport=transport,
                                         min_torus_bytes=min_torus_bytes, column_algorithm=column_algorithm,
                                         stall_seconds=stall_shutdown_seconds, column_ring=column_ring,
                                         cache_dir=cache_dir, names=_ARGUMENT_NAMES)
        user_sets = _check_process_sets(process_sets, size)
        return (settings, user_sets), {**settings.agreement(), "size": size,
                                       "process_sets": [list(s.ranks) for s in user_sets],
                                       **({"open_mpi_coll_tuned": ompi_rules.describe()}
                                          if context.launcher == "mpirun" else {})}

    settings, user_sets = agree_on(build, rank=rank, size=size, comm=mpi_comm)
    _check_no_duplicate_sets(user_sets, settings.grid)  # agreed inputs: the same outcome on every rank
    _export_stall_to_horovod(settings.stall_seconds)
    sets = TorusProcessSets.build(settings.grid, rank, _hvd.ProcessSet, _hvd.global_process_set)
    _hvd.init(comm=comm, process_sets=list(user_sets) + list(sets.registered), **kwargs)
    if _hvd.size() != size or _hvd.rank() != rank:
        raise RuntimeError(f"Horovod started rank {_hvd.rank()} of {_hvd.size()} but the launcher announced "
                           f"rank {rank} of {size}")
    chosen = _resolve_transport(settings.transport)
    torus_comm = None
    if _hvd.mpi_enabled() and mpi_comm is not None:
        from horovod_torus.mpi import TorusComm

        torus_comm = TorusComm.from_settings(mpi_comm, settings)
    auto = settings.min_torus_bytes == "auto"
    _current["settings"] = settings
    channel = channel_for(torus_comm, os.environ, rank, size, f"horovod_torus_stall_{_init_count()}")
    guard = ExchangeGuard(settings.stall_seconds, settings.grid, rank, channel) if size > 1 else None
    _current["torus"] = TorusAllreduce(sets, chosen, torus_comm, 0 if auto else settings.min_torus_bytes, guard)
    if guard is not None:
        _register_exit_check()
    if auto:
        if _gpu_visible():  # measuring starts TensorFlow's runtime: not before the user pinned a GPU
            _current["torus"].defer_crossover(settings.cache_dir, context.launcher)
        else:
            _current["torus"].resolve_crossover(settings.cache_dir, context.launcher)
    _current["generation"] += 1
    return _current["torus"]


def _init_elastic(comm, process_sets, kwargs, *, grid, transport, min_torus_bytes, column_algorithm, column_ring,
                  stall_seconds, cache_dir=None):
    """``init`` under an elastic ``horovodrun --gloo``: Horovod first (with no process set: its elastic
    reset cannot finalise one, see :mod:`horovod_torus.tensorflow.elastic_transport`), then the settings for
    the world Horovod reports, agreed on the rendezvous store, then the torus on the global set."""
    from horovod_torus.tensorflow.elastic_transport import GlobalSetTransport

    if comm is not None or process_sets:
        raise ValueError("init(comm=..., process_sets=...): an elastic job (horovodrun --min-np/--max-np/"
                         "--host-discovery-script) runs on Horovod's global set only (Horovod 0.28.1 aborts a "
                         "surviving rank that has process sets when another rank dies): leave both unset")
    # Horovod reads its stall deadline at init, from the environment: resolve that setting alone first
    _export_stall_to_horovod(TorusSettings.resolve(size=1, stall_seconds=stall_seconds, fields=("stall_seconds",),
                                                   names=_ARGUMENT_NAMES).stall_seconds)
    _current["elastic_arguments"] = dict(grid=grid, transport=transport, min_torus_bytes=min_torus_bytes,
                                         column_algorithm=column_algorithm, column_ring=column_ring,
                                         stall_shutdown_seconds=stall_seconds, cache_dir=cache_dir, **kwargs)
    _hvd.init(**kwargs)  # the new world's rank and size come from the elastic driver here
    size, rank, local_size = _hvd.size(), _hvd.rank(), _hvd.local_size()

    def build():
        the_grid = grid(size, local_size) if callable(grid) else grid
        try:
            settings = TorusSettings.resolve(size=size, local_size=local_size, grid=the_grid,
                                             transport=transport, min_torus_bytes=min_torus_bytes,
                                             column_algorithm=column_algorithm, column_ring=column_ring,
                                             stall_seconds=stall_seconds, cache_dir=cache_dir, names=_ARGUMENT_NAMES)
        except ValueError as exc:
            raise ValueError(f"{exc} (an elastic job's world is now {size} ranks: give a grid rule, "
                             f"grid=lambda size, local_size: ..., or leave the grid unset for the default)") from None
        if settings.transport == "mpi":
            raise ValueError("transport='mpi' (or HOROVOD_TORUS_TRANSPORT=mpi): an elastic job runs on "
                             "Horovod's Gloo controller; use transport='horovod' or 'auto'")
        return settings, {**settings.agreement(), "size": size}

    # The driver clears the rendezvous store at every new world (horovod/runner/http/http_server.py,
    # RendezvousServer.init), and processes added later count their calls from 1: one scope per world size.
    settings = agree_on(build, rank=rank, size=size, scope=f"horovod_torus_elastic_{size}")
    sets = TorusProcessSets.build(settings.grid, rank, _hvd.ProcessSet, _hvd.global_process_set)
    auto = settings.min_torus_bytes == "auto"
    _current["settings"] = settings
    _current["torus"] = TorusAllreduce(sets, "horovod", None, 0 if auto else settings.min_torus_bytes,
                                       horovod_transport=GlobalSetTransport(sets))
    if auto:  # the cache makes a reset to a world of the same key cost no calibration
        launcher = LaunchContext.from_environ().launcher
        if _gpu_visible():
            _current["torus"].defer_crossover(settings.cache_dir, launcher)
        else:
            _current["torus"].resolve_crossover(settings.cache_dir, launcher)
    _current["generation"] += 1
    return _current["torus"]


def ompi_rules_file() -> str | None:
    """The Open MPI rules file this process's MPI read when it started (:mod:`horovod_torus.ompi_rules`:
    the columns' all-reduce; given by the first ``init``, or by
    :func:`horovod_torus.ompi_rules.prepare_for_job` called before MPI started), or None: none (Horovod
    not started on its MPI controller, fewer than 3 ranks, MPI started before either, the user's own
    coll/tuned variables: :func:`horovod_torus.ompi_rules.prepare` says which)."""
    if not (_hvd.is_initialized() and _hvd.mpi_enabled()):
        return None
    return ompi_rules.active_file()


def _gpu_visible() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _init_count() -> int:
    _current["inits"] = _current.get("inits", 0) + 1
    return _current["inits"]


def _register_exit_check() -> None:
    """Once per process: at exit, the exit check of the running torus' transport (the exit signature, so
    that a rank leaving while others still make torus calls ends the run on every rank at once, and
    exits with status 1 saying why): :func:`horovod_torus.stall.exit_check_mpi` under Horovod's MPI
    controller (where every call is checked on the mpi4py communicator, TF1 Session graphs' excepted),
    :func:`horovod_torus.tensorflow.guard.exit_check` on the Horovod transport otherwise. A process that an
    uncaught error (not a torus one) ends skips it and ends the job at once
    (:func:`horovod_torus.stall.end_on_uncaught`). Registered after ``hvd.init``, so it runs before Horovod's
    own atexit shutdown."""
    if not _current.get("exit_check"):
        _current["exit_check"] = True

        def check():
            current = _current["torus"]
            if current is None or current._horovod.guard is None:
                return
            error = uncaught_error()
            if error is not None and not (current._horovod.guard.stall or job_ending()):
                end_on_uncaught(current.rank, error, mpi=current.torus_comm is not None)
                return
            if current.torus_comm is not None:  # every call outside a TF1 Session graph is checked there
                exit_check_mpi(current.torus_comm)
            else:
                exit_check(current._horovod)

        atexit.register(check)


def _transport_argument(transport, backend):
    if backend is None:
        return transport
    warnings.warn("init(backend=...) is deprecated: use init(transport=...)", DeprecationWarning, stacklevel=3)
    if transport is not None and transport != backend:
        raise ValueError(f"init(transport={transport!r}, backend={backend!r}): pass transport= only (backend= "
                         f"is its deprecated alias)")
    return backend


def _export_stall_to_horovod(seconds: float | None) -> None:
    """Horovod reads its stall settings only from the environment: give it the resolved deadline (None:
    never, ``0``; TorusSettings turns 0 and inf into None, and rejects NaN)."""
    os.environ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(int(max(1, seconds))) if seconds else "0"
    if seconds:
        os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(1, min(60.0, seconds)))))


def _same_as_running(**arguments):
    """The running torus when every given argument matches its settings; else ValueError naming both."""
    current = _current["torus"]
    if current is None:
        raise RuntimeError("Horovod is already initialised without the torus process sets: call "
                           "horovod_torus.tensorflow.init() instead of horovod.tensorflow.init()")
    given = {k: v for k, v in arguments.items() if v is not None}
    if not given:
        return current
    wanted = TorusSettings.resolve(size=current.grid.size, environ={}, names=_ARGUMENT_NAMES, **given)
    running = dataclasses.replace(_current["settings"], transport=current.transport)
    names = _ARGUMENT_NAMES
    for field in dict.fromkeys("column_algorithm" if f == "column_ring" else f for f in given):
        mine, theirs = getattr(wanted, field), getattr(running, field)
        if mine != theirs and not (field == "transport" and mine == "auto"):
            arg = names.get(field, field)
            running_with = "" if field == "grid" else f" with {arg}={theirs!r}"
            shown = mine if field == "grid" else repr(given.get(field, mine))  # as given: inf, not None
            raise ValueError(f"init({arg}={shown}): horovod_torus already runs on grid {current.grid}{running_with}; "
                             f"call shutdown() first to change it")
    return current


def _mpi_comm(comm, context: LaunchContext):
    """The mpi4py communicator the torus spans, or None under horovodrun --gloo (no MPI world)."""
    if comm is None:
        if context.gloo:
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


def _check_no_duplicate_sets(user_sets, grid) -> None:
    """Raise ValueError for a user set that Horovod would see as a duplicate (it sorts a set's ranks): of
    another user set, of the global set, or of a row or column set the torus registers. Run on the agreed
    sets and grid, so every rank raises the same error (Horovod would fail inside hvd.init, where ranks
    can disagree and hang)."""
    taken = {tuple(range(grid.size)): "the global process set (Horovod always registers it; use "
                                      "hvd.global_process_set)"}
    for s in TorusProcessSets.build(grid, 0, _hvd.ProcessSet, _hvd.global_process_set).registered:
        members = tuple(sorted(s.ranks))
        kind, index = ("row", grid.rows().index(members)) if members in grid.rows() else (
            "column", grid.columns().index(members))
        taken[members] = (f"torus {kind} {index}, which init registers (use "
                          f"hvd.torus_process_sets().{kind}_sets[{index}])")
    for i, s in enumerate(user_sets):
        key = tuple(sorted(int(r) for r in s.ranks))
        if key in taken:
            raise ValueError(f"process_sets[{i}] = ProcessSet({list(s.ranks)}) is the same set as {taken[key]} "
                             f"(Horovod sorts a set's ranks): leave it out of process_sets")
        taken[key] = f"process_sets[{i}] = ProcessSet({list(s.ranks)})"


def _check_process_sets(process_sets, size):
    """The user's process sets, checked locally: ProcessSet objects, each rank once, ranks in [0, size)."""
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


def _resolve_transport(value):
    """'auto' -> 'mpi' on CPU with Horovod's MPI controller, else 'horovod'. Same answer on every rank."""
    import tensorflow as tf

    mpi_ok = _hvd.mpi_enabled()
    if value == "mpi" and not mpi_ok:
        raise ValueError("transport='mpi' needs Horovod's MPI controller (launch with mpirun or "
                         "horovodrun --mpi); use transport='horovod' under horovodrun --gloo")
    if value == "auto":
        value = "mpi" if mpi_ok and not tf.config.list_physical_devices("GPU") else "horovod"
    return value


def shutdown() -> None:
    """Wait for every rank, then shut Horovod down and free the torus (``init`` may then be called again).

    The wait (:func:`horovod_torus.tensorflow.guard.leave`: the exit signature exchanged on the global
    set; a rank still making torus calls then raises TorusStallError, naming this one) matters on the
    Horovod transport: a torus call ends
    with an all-gather on each row's process set, so one row may still be in it when another returns, and
    Horovod's shutdown on any rank (rank 0 coordinates every process set) would fail the other row's op."""
    if _current["torus"] is not None:
        if _hvd.is_initialized() and _hvd.size() > 1:
            if _current["torus"].torus_comm is not None:
                _current["torus"].torus_comm.leave()  # a rank still in a call checked on MPI: raise, naming it
            leave(_current["torus"]._horovod)
        if _current["torus"]._horovod.guard is not None:
            _current["torus"]._horovod.guard.close()
        _current["torus"].free()
    _current["torus"] = _current["settings"] = None
    _hvd.shutdown()


def shutdown_without_wait() -> None:
    """Free the torus and shut Horovod down without :func:`shutdown`'s closing all-reduce: the elastic
    reset, where a rank may be gone (that wait would fail) and every torus call is on the global set."""
    if _current["torus"] is not None:
        _current["torus"].free()
    _current["torus"] = _current["settings"] = None
    _hvd.shutdown()


def reinit() -> TorusAllreduce:
    """:func:`init` again with the arguments of the elastic job's first ``init`` (the elastic reset).

    Raises:
        RuntimeError: ``init`` was not called under an elastic launch first."""
    arguments = _current.get("elastic_arguments")
    if arguments is None:
        raise RuntimeError("reinit(): call horovod_torus.tensorflow.init() under an elastic horovodrun first")
    return init(**arguments)


def generation() -> int:
    """How many tori this process has made (each successful :func:`init`): a strategy bound to an older
    one is stale (after an elastic reset, :mod:`horovod_torus.tensorflow.gradients` binds again)."""
    return _current["generation"]


def current_torus() -> TorusAllreduce | None:
    """The TorusAllreduce made by :func:`init`, or None (no error) before init or after a shutdown."""
    return _current["torus"]


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


def transport() -> str:
    """The transport chosen at init(): ``"horovod"`` or ``"mpi"``."""
    return torus().transport


def backend() -> str:
    """Deprecated alias of :func:`transport`."""
    warnings.warn("horovod_torus.tensorflow.backend() is deprecated: use transport()", DeprecationWarning,
                  stacklevel=2)
    return transport()


def settings() -> TorusSettings:
    """The :class:`horovod_torus.settings.TorusSettings` resolved and agreed at init()."""
    torus()
    return _current["settings"]


def torus_comm():
    """The mpi4py TorusComm (None without Horovod's MPI controller)."""
    return torus().torus_comm

