"""The torus all-reduce over mpi4py: the MPI transport, and the numpy API for users without TensorFlow.

Source: Mikami et al., arXiv 1811.05233, section 3.2. :class:`TorusComm` duplicates the caller's
communicator (``MPI_Comm_dup``: the torus never matches messages with the caller's own traffic, even from
another thread) and splits the duplicate into a row and a column communicator. It is the
:class:`horovod_torus.phases.Transport` that :func:`horovod_torus.phases.allreduce_buffer` (the one
implementation of the three phases) runs on:

1. reduce-scatter on the row communicator (X ranks): explicit Sendrecv rings from
   :data:`RING_MIN_BYTES`, ``MPI_Reduce_scatter(_block)`` below; the first ``n % X`` ranks get one extra
   element (Horovod's split);
2. all-reduce of that shard on the column communicator (Y ranks) by the call's column algorithm
   (:mod:`horovod_torus.columns`): ``MPI_Allreduce``, a ring, recursive halving-doubling or a binomial
   tree (:mod:`horovod_torus.p2p`), forced by the ``column_algorithm`` setting
   (:class:`horovod_torus.settings.TorusSettings`) or, with ``auto``, chosen per call from the cost model
   by the shard's bytes and Y (:meth:`TorusComm.algorithm_for`); the choice travels in the signature;
3. all-gather on the row communicator straight into the output (rings from RING_MIN_BYTES, else
   ``MPI_Allgather(v)``).

Every step is a non-blocking MPI request (the rings as ``MPI_Isend``/``MPI_Irecv`` pairs), waited for under
the call's deadline (:mod:`horovod_torus.stall`): a rank that skipped the call, stopped early or died makes
the others raise :class:`horovod_torus.stall.TorusStallError` instead of blocking forever. Two exceptions,
where no live rank can be missing: the data of a flat call, after its check (:meth:`TorusComm.allreduce_flat`),
and with no deadline the check itself run as blocking ``MPI_Allreduce`` calls.

Every call first checks its :class:`horovod_torus.signature.CallSignature` across ranks with one
``MPI_Allreduce`` (MAX) of 20 int64 words (an ``MPI_Allgather`` of the words follows only when they differ,
to name each rank's value), so a rank passing another length, dtype, shape or op raises
:class:`horovod_torus.signature.TorusMismatchError` on every rank instead of hanging or summing garbage.
A call of the ``"flat"`` algorithm is one ``MPI_Allreduce`` on the whole duplicate communicator. The numpy
API takes it for buffers below :attr:`TorusComm.min_torus_bytes`: the ``min_torus_bytes`` setting, by
default ``"auto"``, which :meth:`TorusComm.create` resolves through :mod:`horovod_torus.crossover` (the cache
file, else a calibration of a few seconds), so a small all-reduce costs the one signature check and one
``MPI_Allreduce``. Below :data:`FLAT_NONBLOCKING_MIN_BYTES` both are made from one call of the C extension
``horovod_torus._native`` (``horovod_torus/_native.c``, built by ``setup.py`` with ``mpicc``; the same MPI calls,
no Python between them; :attr:`TorusComm.native` None: from Python, as when the extension is not built).

Example (``mpirun -np 4 python -c ...``)::

    import numpy as np
    from mpi4py import MPI
    from horovod_torus.mpi import TorusComm, torus_allreduce
    out = torus_allreduce(MPI.COMM_WORLD, np.full(5, MPI.COMM_WORLD.rank, np.float32), grid="2x2")
    # out == [6, 6, 6, 6, 6] on every rank; sub-communicators made and freed in the call
    with TorusComm.create(MPI.COMM_WORLD, "2x2") as tc:      # made once, reused: the fast way
        for _ in range(10):
            torus_allreduce(tc, np.ones(1 << 20, np.float32))
"""
from __future__ import annotations

import time
import warnings

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from horovod_torus import crossover
from horovod_torus.agreement import agree_on
from horovod_torus.columns import ACROSS_NODES, ON_NODE, ColumnModel, column_bytes
from horovod_torus.fusion import shard_counts
from horovod_torus.ops import LABELS, REDUCE_OPS, UFUNCS
from horovod_torus.p2p import (blocks, halving_doubling_allreduce, ring_allgather, ring_allreduce,
                               ring_reduce_scatter, tree_allreduce, vspec, wire, wire_op)
from horovod_torus.phases import allreduce_buffer
from horovod_torus.settings import TorusSettings
from horovod_torus.signature import EXIT_SIGNATURE, CallSignature, TorusMismatchError, compare, extremes, leaving
from horovod_torus.stall import TESTS_PER_CHECK, CallClock, TorusStallError, job_ending, left_stall
from horovod_torus.topology import TorusTopology

try:  # built by setup.py against the MPI of mpicc (optional: without it the same calls run from Python)
    from horovod_torus import _native
except ImportError:  # pragma: no cover - depends on the build
    _native = None
if _native is not None and _native.library_version() != MPI.Get_library_version():
    # built against another MPI library than the one mpi4py loaded: its handles would mean nothing there
    warnings.warn("horovod_torus._native was built against another MPI library than mpi4py uses "
                  f"({_native.library_version().splitlines()[0]!r} vs "
                  f"{MPI.Get_library_version().splitlines()[0]!r}): the numpy API runs its check from Python; "
                  "rebuild with MPICC pointing at mpi4py's MPI (pip install -e . / make setup)", RuntimeWarning)
    _native = None

__all__ = ["TorusComm", "torus_allreduce", "ring_reduce_scatter", "ring_allgather", "comm_world",
           "RING_MIN_BYTES", "TorusMismatchError", "TorusStallError", "ColumnModel"]


def _check_comm(comm) -> None:
    """Raise TypeError unless ``comm`` is a live mpi4py intracommunicator."""
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm={comm!r}: pass a TorusComm (TorusComm.create(MPI.COMM_WORLD), the fast way) or an "
                        f"mpi4py intracommunicator such as MPI.COMM_WORLD")


def comm_world(comm: MPI.Comm) -> tuple[int, int, int]:
    """(size, local size, rank) of ``comm``: the local size is that of this rank's shared-memory
    sub-communicator (``MPI_COMM_TYPE_SHARED``: the ranks of ``comm`` on this node). Collective."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return comm.Get_size(), local.Get_size(), comm.Get_rank()
    finally:
        local.Free()


def _spans_nodes(column: MPI.Comm) -> bool:
    """Whether no two ranks of ``column`` share a node (``MPI_COMM_TYPE_SHARED``; collective over it, the
    answer the same on every rank: one MAX all-reduce)."""
    if column.Get_size() == 1:
        return False
    local = column.Split_type(MPI.COMM_TYPE_SHARED)
    on_one_node = local.Get_size()
    local.Free()
    return column.allreduce(on_one_node, op=MPI.MAX) == 1


class TorusComm:
    """Row and column communicators of a duplicate of ``comm`` for ``grid``: the MPI transport.

    Make it once with :meth:`create` (collective), use it for many calls, :meth:`free` it (or use it as a
    context manager). Not thread-safe: one thread at a time per TorusComm.

    Attributes:
        comm: the private duplicate of the caller's communicator (N = X*Y ranks).
        grid: the TorusTopology; ``rank``: this rank in ``comm``.
        row: communicator of this rank's row (X ranks, ordered by column).
        column: communicator of this rank's column (Y ranks, ordered by row).
        calls: torus calls made so far (the ``call`` word of every signature; the calibration's calls
            are not counted).
        min_torus_bytes: buffers below this many bytes take one ``MPI_Allreduce`` in the numpy API
            (:meth:`algorithm`); 0: always the torus.
        crossover_source: where :attr:`min_torus_bytes` came from: ``"setting"``, ``"cache"``,
            ``"measured"``.
        column_algorithm: phase 2's algorithm, one of :data:`horovod_torus.settings.COLUMN_CHOICES`
            (``"auto"``: :meth:`algorithm_for` per call); see :meth:`create`.
        column_model: the :class:`horovod_torus.columns.ColumnModel` that ``auto`` asks (ON_NODE, or
            ACROSS_NODES when the column's ranks are all on different nodes); must be equal on every rank.
        deadline: seconds a call may wait for the other ranks before it raises
            :class:`horovod_torus.stall.TorusStallError` (None or 0: forever, and the check is a blocking
            ``MPI_Allreduce``, which MPI does not match with another rank's non-blocking one: equal on every
            rank, as :meth:`create` and ``init`` agree on it); see :meth:`watch`.
        alarm: a private duplicate of ``comm`` for the stall roll call only.
    """

    def __init__(self, comm: MPI.Comm, grid: TorusTopology, row: MPI.Comm, column: MPI.Comm,
                 column_algorithm: str = "auto", deadline: float | None = None, alarm: MPI.Comm | None = None,
                 column_model: ColumnModel = ON_NODE):
        self.comm, self.grid, self.row, self.column = comm, grid, row, column
        self.alarm = comm.Dup() if alarm is None else alarm
        self.column_algorithm, self.column_model = column_algorithm, column_model
        self._column = ""  # the column algorithm of the call in progress (set by verify)
        self.rank = comm.Get_rank()
        self.calls = 0
        self.deadline = deadline
        self._watching: _Watch | None = None  # the call in progress (watch)
        self._clock: CallClock | None = None  # its deadline, made once a wait is still open after TESTS_PER_CHECK tests
        self._heard: dict = {}  # the roll-call messages received so far (CallClock.heard)
        self._workspace: dict = {}
        self._pending = None  # (length, out, block view) of the last reduce-scatter, for allgather
        self.min_torus_bytes = 0
        self.crossover_source = "setting"
        self._signatures: dict = {}  # (shape, dtype, op, algorithm) -> CallSignature of the numpy API
        self._checks: dict = {}  # id(signature) -> (signature, column, check send vector, receive vector)
        self._sites: dict = {}  # (shape, dtype, id(op)) -> _Site of the numpy API's flat calls
        self.freed = False  # free() was called (or the with block ended): no call may use it again
        self.native = _native  # the C check (horovod_torus._native), None: the same MPI calls from Python
        self._fcomm = comm.py2f()

    @classmethod
    def create(cls, comm: MPI.Comm, grid: TorusTopology | str | None = None, *, column_algorithm=None,
               stall_seconds=None, column_ring=None, min_torus_bytes=None, cache_dir=None) -> "TorusComm":
        """Resolve the settings, agree on them across ``comm``, :meth:`from_settings`, then resolve the
        crossover (:meth:`resolve_crossover`). Collective.

        Args:
            comm: an intra-communicator (its ranks are the torus ranks).
            grid: TorusTopology, ``"XxY"`` string, or None (``HOROVOD_TORUS_GRID``, else the default
                factorisation with a node's ranks in one row).
            column_algorithm: the column all-reduce's algorithm (:attr:`column_algorithm`): ``"mpi"``,
                ``"ring"``, ``"halving-doubling"``, ``"tree"`` or None/``"auto"``
                (``HOROVOD_TORUS_COLUMN_ALGORITHM``, default auto: per call from the cost model).
            stall_seconds: :attr:`deadline` (None: ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``, else 300 s;
                0: none).
            column_ring: deprecated alias of ``column_algorithm`` (True: ``"ring"``, False: ``"mpi"``).
            min_torus_bytes: :attr:`min_torus_bytes`: an int >= 0 (bytes; 0: always the torus) or
                ``"auto"`` (None: ``HOROVOD_TORUS_MIN_BYTES``, else auto: the cached crossover of this
                key, else a calibration of a few seconds, see :mod:`horovod_torus.crossover`).
            cache_dir: the crossover cache's directory, ``"off"`` for none (None:
                ``HOROVOD_TORUS_CACHE_DIR``, else ``~/.cache/horovod_torus``); only rank 0's is used.

        The rules are :meth:`horovod_torus.settings.TorusSettings.resolve`'s (argument, else variable,
        else default).

        Raises:
            ValueError: a malformed setting or X*Y != comm size (every rank raises, before any torus
                communicator exists); :class:`horovod_torus.agreement.SettingsMismatchError` (a
                ValueError) when the ranks resolved different settings, naming each rank's value.
            TypeError: ``comm`` is not an mpi4py intracommunicator.
        """
        _check_comm(comm)
        size, local_size, rank = comm_world(comm)

        def build():
            fields = ("grid", "column_algorithm", "stall_seconds", "min_torus_bytes", "cache_dir")
            settings = TorusSettings.resolve(size=size, local_size=local_size, grid=grid,
                                             column_algorithm=column_algorithm, stall_seconds=stall_seconds,
                                             min_torus_bytes=min_torus_bytes, cache_dir=cache_dir,
                                             column_ring=column_ring)  # every setting: a bad transport raises too
            shown = settings.agreement()
            return settings, {k: shown[k] for k in fields if k in shown}

        settings = agree_on(build, rank=rank, size=size, comm=comm, what="horovod_torus.mpi.TorusComm.create")
        tc = cls.from_settings(comm, settings)
        try:
            tc.resolve_crossover(settings)
        except BaseException:
            tc.free()
            raise
        return tc

    @classmethod
    def from_settings(cls, comm: MPI.Comm, settings: TorusSettings,
                      column_model: ColumnModel | None = None) -> "TorusComm":
        """Duplicate ``comm`` and split the duplicate by ``settings.grid`` (collective over ``comm``).

        ``settings`` must already be equal on every rank (``init`` agrees on them first; :meth:`create`
        does for the numpy API). ``column_model``: None (ON_NODE, or ACROSS_NODES when no two ranks of a
        column share a node: one all-reduce over the column), else the same model on every rank.
        :attr:`min_torus_bytes` is the setting's integer, 0 for ``"auto"`` (:meth:`create` resolves auto;
        ``init``'s TorusComm needs none: the TensorFlow torus chooses the algorithm of each call itself)."""
        grid = settings.grid.check_size(comm.Get_size())
        dup = comm.Dup()
        r, c = grid.coords(dup.Get_rank())
        column = dup.Split(color=c, key=r)
        if column_model is None:  # one model on every rank: ACROSS_NODES only when every column spans nodes
            column_model = ACROSS_NODES if dup.allreduce(int(_spans_nodes(column)), op=MPI.MIN) else ON_NODE
        tc = cls(dup, grid, dup.Split(color=r, key=c), column, column_algorithm=settings.column_algorithm,
                 deadline=settings.stall_seconds, alarm=dup.Dup(), column_model=column_model)
        if settings.min_torus_bytes != "auto":
            tc.min_torus_bytes = int(settings.min_torus_bytes)
        return tc

    def algorithm(self, nbytes: int) -> str:
        """``"flat"`` for a numpy-API buffer of ``nbytes`` bytes below :attr:`min_torus_bytes`, else
        ``"torus"``."""
        return "flat" if nbytes < self.min_torus_bytes else "torus"

    def resolve_crossover(self, settings: TorusSettings) -> int:
        """Set :attr:`min_torus_bytes` from ``settings``: its integer, or for ``"auto"`` the cached
        crossover of this job's :class:`horovod_torus.crossover.CrossoverKey` (rank 0's file, broadcast),
        else a calibration of the numpy API's flat and torus calls (:func:`horovod_torus.crossover.calibrate`:
        a few seconds; rank 0 then writes the cache). One rank: 0, nothing measured. Collective.

        Returns:
            The new :attr:`min_torus_bytes` (equal on every rank)."""
        if settings.min_torus_bytes != "auto":
            self.min_torus_bytes, self.crossover_source = int(settings.min_torus_bytes), "setting"
            return self.min_torus_bytes
        if self.grid.size == 1:
            self.min_torus_bytes, self.crossover_source = 0, "setting"
            return 0
        import socket

        from horovod_torus import __version__
        from horovod_torus.launch import LaunchContext

        key = crossover.CrossoverKey(
            world_size=self.grid.size, grid=str(self.grid), launcher=LaunchContext.from_environ().launcher,
            hosts=crossover.host_runs(self.comm.allgather(socket.gethostname())), transport="numpy",
            variant=f"column={self.column_algorithm};model={self.column_model.source}", version=__version__)
        value, source = crossover.resolve(key, rank=self.rank, cache_dir=settings.cache_dir,
                                          broadcast=lambda obj: self.comm.bcast(obj, root=0),
                                          run_calibration=self._calibrate)
        self.min_torus_bytes, self.crossover_source = value, source
        return value

    def _calibrate(self):
        """:func:`horovod_torus.crossover.calibrate` on this TorusComm (float32 sums); the call counter is
        restored afterwards, so the user's first call is call 1."""
        calls = self.calls

        def measure(nbytes, algorithm, count, warmup):
            from horovod_torus.timing import time_calls

            buf = np.ones(max(1, nbytes // 4), np.float32)
            signature = CallSignature(elements=buf.size, dtype="float32", layout=(("float32", buf.shape),),
                                      op="Sum", algorithm=algorithm, name="horovod_torus.calibrate")

            def call():
                with self.watch(signature.name):
                    self.allreduce_call(buf, signature)
            return time_calls(call, count, warmup=warmup, barrier=self.comm.Barrier)

        def agree_max(values):
            out = np.empty_like(values)
            self.comm.Allreduce(values, out, op=MPI.MAX)
            return out
        try:
            return crossover.calibrate(measure, agree_max)
        finally:
            self.calls = calls


    def free(self) -> None:
        """Free the communicators (collective only in MPI's sense: call it on every rank); a second call
        does nothing. After a stall this process raised (:func:`horovod_torus.stall.job_ending`) nothing is
        freed: the stalled call's requests never complete, and the job ends with MPI_Abort at exit, which
        needs the roll-call communicator. A freed TorusComm raises ValueError when used."""
        if self.freed:
            return
        self.freed = True
        if job_ending():
            return
        for c in (self.row, self.column, self.alarm, self.comm):
            if c != MPI.COMM_NULL:
                c.Free()

    def __enter__(self) -> "TorusComm":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """The end of a ``with TorusComm.create(...)`` block: when the block ended without an exception,
        :meth:`leave` first (so a rank that leaves while others still make torus calls makes them raise at
        once, naming it, and raises itself), then :meth:`free`."""
        try:
            if exc_type is None and not self.freed and not job_ending():
                self.leave()
        finally:
            self.free()

    def _usable(self) -> None:
        """Raise ValueError when this TorusComm was freed."""
        if self.freed:
            raise ValueError("this TorusComm was freed (its `with` block ended, or free() was called): make a new "
                             "one with TorusComm.create(comm) and pass that")

    def watch(self, name: str = "") -> "_Watch":
        """Run one call under the deadline (:attr:`deadline`, the ``stall_seconds`` setting, the time
        ``init`` also gives Horovod): ``with tc.watch(name): ...``. Every MPI step of the call but a flat
        call's data is non-blocking and waited for through a :class:`horovod_torus.stall.CallClock`, so a
        rank that skipped the call, stopped early or died makes the waiting ranks raise
        :class:`horovod_torus.stall.TorusStallError` (naming the call, ``name`` and the ranks that did not
        arrive) instead of blocking forever. The clock, counted from the call's start, is made at the call's
        first wait that does not complete within :data:`horovod_torus.stall.TESTS_PER_CHECK` tests (the
        tests a clock makes between two readings itself), so a short call reads no clock at all."""
        return _Watch(self, name)

    def _wait(self, requests) -> None:
        """Complete ``requests`` under the call's deadline (none outside :meth:`watch`)."""
        watch = self._watching
        if watch is None or not self.deadline:
            MPI.Request.Waitall(requests)
            return
        if self._clock is None:
            for _ in range(TESTS_PER_CHECK):
                if MPI.Request.Testall(requests):
                    return
            self._clock = CallClock(self.comm, self.alarm, watch.call, watch.name, self.grid, self.deadline,
                                    self._heard, start=watch.start)
        self._clock.wait(requests)

    def shard_buffer(self, count: int, dtype, slot: int = 2) -> np.ndarray:
        """A reusable scratch array of ``count`` elements (never returned to callers), so repeated
        all-reduces of one size allocate and page-fault it once. ``slot`` keeps separate arrays apart."""
        key = (np.dtype(dtype), slot)
        buf = self._workspace.get(key)
        if buf is None or buf.size < count:
            buf = self._workspace[key] = np.empty(count, dtype=key[0])
        return buf[:count]

    # -- horovod_torus.phases.Transport ------------------------------------------------------------------
    def algorithm_for(self, nbytes: int) -> str:
        """The column algorithm of a torus call of a ``nbytes`` buffer per rank (phase 2 on a shard of
        :func:`horovod_torus.columns.column_bytes` bytes): the ``column_algorithm`` setting, or with
        ``auto`` :meth:`horovod_torus.columns.ColumnModel.choose` of :attr:`column_model`; ``""`` when the
        grid has one row (no column phase). The same answer on every rank for the same arguments."""
        if self.grid.y == 1:
            return ""
        if self.column_algorithm != "auto":
            return self.column_algorithm
        return self.column_model.choose(self.grid.y, column_bytes(nbytes, self.grid.x))

    def verify(self, signature: CallSignature, column: str | None = None):
        """:meth:`horovod_torus.phases.Transport.verify` on this communicator (the call number is
        :attr:`calls`). ``column``: the column word of the check (a key of
        :data:`horovod_torus.signature.COLUMN_CODES`; None: this communicator's own choice for a torus
        call, :meth:`algorithm_for`, which its phase 2 then runs)."""
        self.calls += 1
        torus = signature.algorithm == "torus" and signature.elements > 0
        if column is None:  # this communicator's phases run the call: phase 2 takes the chosen column
            column = self.algorithm_for(signature.elements * _itemsize(signature.dtype)) if torus else ""
            self._column = column
        else:  # another transport moves the data
            self._column = ""
        self._check(signature, column)
        return None

    def _check(self, signature: CallSignature, column: str, flat=None) -> bool:
        """The check of :meth:`verify` (the call number already counted); with ``flat`` =
        ``(send, recv, datatype handle, op handle)`` and :attr:`native`, the flat call's data too, in the same
        C call once the check agreed. Returns True when the data moved (else the caller moves it)."""
        moved = False
        if self.grid.size > 1:
            both, reduced = self._check_buffers(signature, column)
            both[0], both[both.size // 2] = self.calls, -self.calls  # the call number and its negation
            # a rank may not come: wait under the deadline (no deadline: nothing to watch, the blocking call
            # is the cheaper one)
            native = self.native
            if native is not None:  # the same MPI calls, made from C (horovod_torus/_native.c)
                tests = TESTS_PER_CHECK if self.deadline else -1
                if flat is None:
                    status, handle = native.check(self._fcomm, both, reduced, tests)
                else:
                    status, handle = native.check_flat(self._fcomm, both, reduced, tests, *flat)
                if status == 1:  # still open after TESTS_PER_CHECK tests: wait under the call's clock
                    self._wait([MPI.Request.f2py(handle)])
                moved = status == 0 and flat is not None
            elif self.deadline:
                self._wait([self.comm.Iallreduce([both, MPI.INT64_T], [reduced, MPI.INT64_T], op=MPI.MAX)])
            else:
                self.comm.Allreduce([both, MPI.INT64_T], [reduced, MPI.INT64_T], op=MPI.MAX)
            # every rank's words are equal iff each maximum and minimum is this rank's own word: the same
            # verdict on every rank as disagreeing(reduced), one bytes comparison instead of numpy calls
            if not moved and reduced.tobytes() != both.tobytes():  # rare: gather the words to name each rank's value
                mine = both[:both.size // 2].copy()
                gathered = np.empty((self.grid.size, mine.size), np.int64)
                self._wait([self.comm.Iallgather(mine, gathered)])
                left = leaving(gathered)
                if left and len(left) < self.grid.size:  # some ranks reached their exit: name them at once
                    raise left_stall(self.alarm, gathered, left, self.grid)
                # every rank is here (the same verdict everywhere): each rank's shapes, to name them
                compare(gathered, signature, layouts=self.comm.allgather(tuple(signature.layout)))
        return moved

    def _check_buffers(self, signature: CallSignature, column: str) -> tuple[np.ndarray, np.ndarray]:
        """The check's send vector (:func:`horovod_torus.signature.extremes` of ``signature``'s words with
        column algorithm ``column``; :meth:`verify` writes the call number into it) and its receive vector,
        made once per signature object: a call site repeats its signature, so the hot path builds no array."""
        entry = self._checks.get(id(signature))
        if entry is None or entry[0] is not signature or entry[1] != column:
            if len(self._checks) >= 256:
                self._checks.clear()
            both = extremes(signature.words(0, column))
            entry = self._checks[id(signature)] = (signature, column, both, np.empty_like(both))
        return entry[2], entry[3]

    def leave(self) -> None:
        """Exchange :data:`horovod_torus.signature.EXIT_SIGNATURE` (at the process's exit, registered by
        ``init``; at the end of a ``with TorusComm.create(...)`` block): returns when every rank leaves;
        raises :class:`horovod_torus.stall.TorusStallError` on every rank at once when some still make torus
        calls (naming the ranks that left)."""
        self._usable()
        with self.watch("<exit>"):
            self.verify(EXIT_SIGNATURE)

    def reduce_scatter(self, buf: np.ndarray, op: str, out: np.ndarray | None = None) -> np.ndarray:
        counts = shard_counts(buf.size, self.grid.x)
        me = self.grid.coords(self.rank)[1]
        ufunc = UFUNCS[op]
        if buf.nbytes >= RING_MIN_BYTES:  # the shard is built in the output, which the ring all-gather fills
            if out is None or out is buf:  # the ring reads buf while it writes the shard: never in buf
                out = np.empty_like(buf)
            shard = out[blocks(counts)[me]]
            work = [self.shard_buffer(max(counts), buf.dtype, slot) for slot in (0, 1)]
            ring_reduce_scatter(self.row, buf, shard, counts, ufunc, work, self._wait)
            self._pending = (buf.size, out, shard)
            return shard
        self._pending = (buf.size, out, None)  # allgather writes into out (buf is read by then)
        shard = np.empty(counts[me], buf.dtype)
        mpi_op = wire_op(_MPI_OPS[op], buf.dtype)
        if counts[0] == counts[-1]:
            self._wait([self.row.Ireduce_scatter_block(wire(buf), wire(shard), op=mpi_op)])
        else:
            self._wait([self.row.Ireduce_scatter(wire(buf), wire(shard), recvcounts=counts, op=mpi_op)])
        return shard

    def allreduce(self, shard: np.ndarray, op: str, out: np.ndarray | None = None) -> np.ndarray:
        # the algorithm verify() chose for this call (outside a call: from this shard, equal on every rank
        # only when the shards are)
        algorithm = self._column or self.algorithm_for(shard.nbytes * self.grid.x)
        self._column = ""
        if algorithm == "mpi":
            mpi_op = wire_op(_MPI_OPS[op], shard.dtype)
            if self.grid.x == 1:  # the shard is the caller's buffer: reduce into it only when it is out
                if out is None:
                    out = np.empty_like(shard)
                send = MPI.IN_PLACE if out is shard else wire(shard)
                self._wait([self.column.Iallreduce(send, wire(out), op=mpi_op)])
                return out
            self._wait([self.column.Iallreduce(MPI.IN_PLACE, wire(shard), op=mpi_op)])
            return shard
        if out is None or out is shard:  # the p2p algorithms read the shard while they write out
            out = np.empty_like(shard)  # a new array: with X == 1 the shard is the caller's buffer
        ufunc = UFUNCS[op]
        if algorithm == "ring":
            counts = shard_counts(shard.size, self.grid.y)
            work = [self.shard_buffer(max(counts), shard.dtype, slot) for slot in (3, 4)]
            return ring_allreduce(self.column, shard, out, ufunc, work, counts, self._wait)
        if algorithm == "halving-doubling":
            work = self.shard_buffer(-(-shard.size // 2), shard.dtype, 3)
            return halving_doubling_allreduce(self.column, shard, out, ufunc, work, self._wait)
        return tree_allreduce(self.column, shard, out, ufunc,
                              lambda k, count: self.shard_buffer(count, shard.dtype, 5 + k), self._wait,
                              self.column_model.chunk_bytes)

    def allgather(self, shard: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        # ``out`` is the one reduce_scatter was given: it kept it (or its own output) in _pending
        n, out, view = self._pending
        self._pending = None
        counts = shard_counts(n, self.grid.x)
        if view is not None:
            if shard is not view:
                view[...] = shard
            ring_allgather(self.row, out, counts, self._wait)
            return out
        if out is None:
            out = np.empty(n, shard.dtype)
        if counts[0] == counts[-1]:
            self._wait([self.row.Iallgather(wire(shard), wire(out))])
        else:
            self._wait([self.row.Iallgatherv(wire(shard), vspec(out, counts))])
        return out

    def allreduce_flat(self, buf: np.ndarray, op: str, out: np.ndarray | None = None) -> np.ndarray:
        """The ``"flat"`` call's data: one all-reduce of ``buf`` over :attr:`comm` into ``out`` (None: a new
        array; ``out is buf``: in place): below :data:`FLAT_NONBLOCKING_MIN_BYTES` a blocking
        ``MPI_Allreduce``, not a request waited for under the deadline; from it an ``MPI_Iallreduce``
        waited for under the deadline (faster across nodes, the same on one host).

        The blocking call runs only after the call's check (:meth:`verify`) completed on this rank, and a completed check
        means every rank is in this call with the same buffer and goes straight on to this all-reduce, so no
        live rank can stay away; only a process that dies in between can, and then the launcher ends the job
        (Horovod's rule for a lost rank, docs/guide/faults.md). A skipped call or an early stop is caught by
        the check, under the deadline."""
        if out is None:
            out = np.empty_like(buf)
        send = MPI.IN_PLACE if out is buf else wire(buf)
        if buf.nbytes >= FLAT_NONBLOCKING_MIN_BYTES:
            self._wait([self.comm.Iallreduce(send, wire(out), op=wire_op(_MPI_OPS[op], buf.dtype))])
        else:
            self.comm.Allreduce(send, wire(out), op=wire_op(_MPI_OPS[op], buf.dtype))
        return out

    def gate(self, buf, token):
        return buf

    def allreduce_call(self, buf: np.ndarray, signature: CallSignature, op: str = "sum",
                       out: np.ndarray | None = None) -> np.ndarray:
        """The numpy API's call of one flat buffer (inside :meth:`watch`): a ``"torus"`` signature runs
        :func:`horovod_torus.phases.allreduce_buffer`; a ``"flat"`` one below
        :data:`FLAT_NONBLOCKING_MIN_BYTES` runs its check and its ``MPI_Allreduce`` in one call of
        :attr:`native` when the extension is built (the same MPI calls as :meth:`verify` then
        :meth:`allreduce_flat`, with no Python between them), else through allreduce_buffer too. Returns
        ``out`` (None: a new array) holding the reduction; raises as allreduce_buffer does."""
        if not self._native_flat(buf, signature, op):
            return allreduce_buffer(self, buf, signature, op=op, out=out)
        return self._flat_native(signature, buf, out, op, _HANDLES[(buf.dtype, op)])

    def _native_flat(self, buf: np.ndarray, signature: CallSignature, op: str) -> bool:
        """Whether :meth:`allreduce_call` runs this call's check and data in one call of :attr:`native`: a
        ``"flat"`` signature of a non-empty buffer below :data:`FLAT_NONBLOCKING_MIN_BYTES` whose dtype has a
        predefined MPI datatype (:func:`_native_handles`), on more than one rank, with the extension built."""
        if signature.algorithm != "flat" or self.native is None or self.grid.size == 1 or not buf.size \
                or buf.nbytes >= FLAT_NONBLOCKING_MIN_BYTES:
            return False
        key = (buf.dtype, op)
        handles = _HANDLES.get(key)
        if handles is None:
            handles = _HANDLES[key] = _native_handles(*key)
        return bool(handles)

    def _flat_site(self, site: "_Site", send: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """:func:`torus_allreduce` of a call site seen before (``send`` C-contiguous; ``out``: None or a
        recvbuf MPI writes into, :func:`_direct`): the flat call of :meth:`allreduce_call` with nothing
        validated again. Returns ``out``, or a new array of ``send``'s shape."""
        with self.watch(site.signature.name):
            return self._flat_native(site.signature, send, out, site.opname, site.handles)

    def _flat_native(self, signature: CallSignature, send: np.ndarray, out, opname: str, handles: tuple):
        """The flat call of a validated C-contiguous ``send`` (any shape) into ``out`` (None: a new array;
        ``send`` itself: in place; else a C-contiguous array of its shape apart from it), inside
        :meth:`watch`: the check and the data in one C call of :attr:`native`, or the data from Python
        (:meth:`allreduce_flat`, in place as one buffer) when the check waited under the deadline. The one
        code path of :meth:`allreduce_call` and :meth:`_flat_site`. Returns ``out``."""
        if out is None:
            out = np.empty_like(send)
        self.calls += 1
        self._column = ""
        if not self._check(signature, "", (send, out) + handles):
            flat = send.reshape(-1)
            self.allreduce_flat(flat, opname, flat if out is send else out.reshape(-1))
        return out


class _Site:
    """A flat :func:`torus_allreduce` call remembered by (shape, dtype, op) once validated, so that the
    next one goes straight to the C call (:meth:`TorusComm._flat_site`): measured on 4 ranks on 2 cores,
    each microsecond of Python per call costs several in the call's time."""

    __slots__ = ("op", "opname", "signature", "min_torus_bytes", "handles")

    def __init__(self, op, opname: str, signature: CallSignature, min_torus_bytes: int, handles: tuple):
        self.op, self.opname, self.signature = op, opname, signature
        self.min_torus_bytes, self.handles = min_torus_bytes, handles


def _native_handles(dtype: np.dtype, op: str) -> tuple:
    """Fortran handles of the predefined MPI datatype of ``dtype`` (mpi4py's, as its buffers of that dtype
    use: a duplicate datatype is not valid with the predefined ops) and of the op ``op``; ``()`` for a dtype
    the C call does not take (float16, non-native byte order): the Python path runs those."""
    datatype = MPI._typedict.get(dtype.char) if dtype.isnative and dtype != np.float16 else None
    return () if datatype is None else (datatype.py2f(), _MPI_OPS[op].py2f())


class _Watch:
    """The context of :meth:`TorusComm.watch`: the call's number, name and start time (a plain class, not
    ``contextlib.contextmanager``: it is entered on every call, and measured on 4 ranks on 2 cores each
    microsecond of Python between two collectives cost several)."""

    __slots__ = ("tc", "name", "call", "start")

    def __init__(self, tc: TorusComm, name: str):
        self.tc, self.name = tc, name

    def __enter__(self) -> "_Watch":
        self.call, self.start = self.tc.calls + 1, time.monotonic()
        self.tc._watching = self
        return self

    def __exit__(self, *exc) -> None:
        self.tc._watching = self.tc._clock = None


_MPI_OPS = {name: getattr(MPI, name.upper()) for name in REDUCE_OPS}
_HANDLES: dict = {}  # (numpy dtype, op name) -> Fortran handles of its MPI datatype and op, for _native


def _itemsize(dtype: str) -> int:
    """Bytes per element of a signature's dtype name (numpy's; bfloat16, which numpy lacks, 2)."""
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 2 if dtype == "bfloat16" else 8


def _op_name(op) -> str:
    for name, mpi_op in _MPI_OPS.items():
        if op == mpi_op:
            return name
    known = next((f"MPI.{n}" for n in ("LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR", "MAXLOC", "MINLOC", "REPLACE",
                                       "NO_OP") if isinstance(op, MPI.Op) and op == getattr(MPI, n, None)),
                 "a user-defined MPI.Op" if isinstance(op, MPI.Op) else repr(op))
    raise ValueError(f"op={known} is not supported by the torus all-reduce: use MPI.SUM, MPI.MIN, MPI.MAX "
                     f"or MPI.PROD")


def torus_allreduce(comm, sendbuf, recvbuf=None, op=MPI.SUM, grid=None):
    """All-reduce a numpy array over ``comm`` through the 2D torus.

    Args:
        comm: a :class:`TorusComm` (made once with :meth:`TorusComm.create` and reused: the fast way),
            or an ``MPI.Comm``: then a TorusComm is created for this call and freed before returning
            (a duplicate and two splits: collective, costly; nothing is cached between calls).
        sendbuf: numpy array, any shape (0-d and empty included), a dtype mpi4py maps to an MPI type
            (float32, float64, int8..int64, uint8..uint64) or float16 (summed with numpy arithmetic;
            MPI.SUM only); same shape and dtype on every rank.
        recvbuf: optional output array of the same shape and dtype (may be ``sendbuf`` itself).
        op: ``MPI.SUM`` (default), ``MPI.MAX``, ``MPI.MIN`` or ``MPI.PROD``.
        grid: TorusTopology, ``"XxY"``, or None (see :meth:`TorusComm.create`); with a TorusComm it must
            be None or equal to the TorusComm's grid.

    Returns:
        The element-wise reduction over all ranks: ``recvbuf`` itself when given (MPI writes the result
        straight into it when it is C-contiguous, writable and apart from ``sendbuf`` or ``sendbuf``
        itself, in place; otherwise it is copied in), else a new array (never a view of ``sendbuf``).

    Raises:
        ValueError: bad grid (see TorusComm.create), recvbuf of another shape/dtype or read-only, an
            unsupported op.
        TorusMismatchError (a ValueError): on every rank, when the ranks pass different shapes, dtypes or
            ops (one MPI_Allgather of the call signatures compares them first).
        TypeError: a dtype without an MPI datatype (the message names it); ``comm`` neither a TorusComm nor
            an mpi4py intracommunicator; a ``recvbuf`` that is not a numpy array.
        ValueError: a TorusComm that was freed (its ``with`` block ended).
    """
    if grid is None and type(comm) is TorusComm and type(sendbuf) is np.ndarray:
        site = comm._sites.get((sendbuf.shape, sendbuf.dtype, id(op)))
        if site is not None and site.op is op and site.min_torus_bytes == comm.min_torus_bytes and not comm.freed \
                and sendbuf.flags.c_contiguous and sendbuf.flags.aligned and _direct(recvbuf, sendbuf):
            return comm._flat_site(site, sendbuf, recvbuf)  # a flat call seen before, validated then: to C
    send = np.asarray(sendbuf, order="C")
    if not send.flags.aligned:  # MPI takes aligned buffers only (mpi4py cannot map an unaligned one's type)
        send = send.copy()
    if recvbuf is not None and not isinstance(recvbuf, np.ndarray):
        raise TypeError(f"recvbuf must be a numpy array like sendbuf, or None for a new one; got a "
                        f"{type(recvbuf).__name__}")
    if recvbuf is not None and (recvbuf.shape != send.shape or recvbuf.dtype != send.dtype):
        raise ValueError(f"recvbuf has shape {recvbuf.shape} and dtype {recvbuf.dtype}; expected "
                         f"{send.shape} and {send.dtype} like sendbuf")
    if recvbuf is not None and not recvbuf.flags.writeable:
        raise ValueError("recvbuf is read-only (recvbuf.flags.writeable is False): pass a writable array, "
                         "or recvbuf=None for a new one")
    _check_dtype(send.dtype)
    opname = _op_name(op)
    if send.dtype == np.float16 and opname != "sum":
        raise TypeError(f"float16 supports op=MPI.SUM only, got MPI.{opname.upper()}")
    if isinstance(comm, TorusComm):
        if grid is not None and str(grid) != str(comm.grid):
            raise ValueError(f"grid={grid} differs from the TorusComm's grid {comm.grid}")
        comm._usable()
        return _run(comm, send, recvbuf, opname, op if grid is None else None)
    _check_comm(comm)
    tc = TorusComm.create(comm, grid)
    try:
        return _run(tc, send, recvbuf, opname)
    finally:
        tc.free()


def _run(tc: TorusComm, send: np.ndarray, recvbuf, opname: str, op=None):
    """``op``: the caller's MPI.Op when the call may be remembered as a :class:`_Site` (no grid given),
    else None."""
    algorithm = tc.algorithm(send.nbytes)
    key = (send.shape, send.dtype, opname, algorithm)
    signature = tc._signatures.get(key)
    if signature is None:  # a call site repeats its call: the signature (and its words) are made once
        if len(tc._signatures) >= 256:
            tc._signatures.clear()
        name = send.dtype.name
        signature = tc._signatures[key] = CallSignature(elements=send.size, dtype=name, layout=((name, send.shape),),
                                                        op=LABELS[opname], algorithm=algorithm)
    if op is not None and tc._native_flat(send, signature, opname):
        if len(tc._sites) >= 256:
            tc._sites.clear()
        tc._sites[(send.shape, send.dtype, id(op))] = _Site(op, opname, signature, tc.min_torus_bytes,
                                                            _HANDLES[(send.dtype, opname)])
    flat = send.reshape(-1)
    target = _target(recvbuf, flat)
    with tc.watch(signature.name):
        out = tc.allreduce_call(flat, signature, op=opname, out=target)
    if target is not None:  # the result is in recvbuf already
        return recvbuf
    if recvbuf is None:
        if tc.grid.size == 1 and np.shares_memory(out, send):  # one rank: nothing moved, no alias of the input
            out = out.copy()
        return out.reshape(send.shape)
    recvbuf[...] = out.reshape(send.shape)  # a recvbuf MPI cannot write into (strided, overlapping)
    return recvbuf


def _direct(recvbuf, send: np.ndarray) -> bool:
    """Whether a remembered call (:class:`_Site`) may write straight into ``recvbuf``: None, or ``send``
    itself (in place), or a writable, aligned C-contiguous array of send's shape and dtype apart from it."""
    if recvbuf is None:
        return True
    if recvbuf is send:  # in place: a read-only one takes the validating path (its ValueError)
        return send.flags.writeable
    return (type(recvbuf) is np.ndarray and recvbuf.shape == send.shape and recvbuf.dtype == send.dtype
            and recvbuf.flags.c_contiguous and recvbuf.flags.aligned and recvbuf.flags.writeable
            and not np.may_share_memory(recvbuf, send))


def _target(recvbuf, flat: np.ndarray):
    """The 1-D view of ``recvbuf`` (writable: checked by the caller) the call writes its result into:
    ``flat`` itself when recvbuf is the send buffer (in place), None when there is no recvbuf or MPI cannot
    write into it (not C-contiguous or not aligned, or overlapping the send buffer without being it)."""
    if recvbuf is None or not recvbuf.flags.c_contiguous or not recvbuf.flags.aligned:
        return None
    if not np.may_share_memory(recvbuf, flat):
        return recvbuf.reshape(-1)
    same = (recvbuf.__array_interface__["data"][0] == flat.__array_interface__["data"][0]
            and flat.flags.c_contiguous)  # sizes and dtypes are equal (checked by the caller)
    return flat if same else None


_CHECKED_DTYPES: set = set()


def _check_dtype(dtype) -> None:
    if dtype in _CHECKED_DTYPES:
        return
    if dtype.kind not in "iuf":
        raise TypeError(f"dtype {dtype} is not supported by the torus all-reduce: use an integer "
                        f"or floating dtype (float16/32/64, int8..int64, uint8..uint64)")
    if dtype != np.float16:
        try:
            from_numpy_dtype(dtype)
        except (KeyError, ValueError, TypeError, MPI.Exception):
            raise TypeError(f"dtype {dtype} has no MPI datatype in mpi4py: cast to float16/float32/"
                            f"float64/int32/int64 first") from None
    _CHECKED_DTYPES.add(dtype)


FLAT_NONBLOCKING_MIN_BYTES = 1 << 20
"""Buffer size (bytes) from which the flat call's data is a non-blocking ``MPI_Iallreduce`` waited for under the
call's deadline (Open MPI's libnbc) instead of one blocking ``MPI_Allreduce`` (its tuned component). Measured
(docs/notes/mpi_transport.md): below 1 MiB on one host the blocking call is the fastest (8 B: 7.9 us against
19.7 for the non-blocking one polled from Python); on the emulated rails cluster (4 nodes x 2, 200 Mbit/s)
libnbc's all-reduce took 0.60x the blocking call's time at 8 MiB and 0.65x at 32 MiB."""

RING_MIN_BYTES = 256 * 1024
"""Per-rank buffer size (bytes) from which phases 1 and 3 run as explicit Sendrecv rings; below it the library
collectives (``MPI_Reduce_scatter(_block)``, ``MPI_Allgather(v)``) run. The measurements behind the value are in
``docs/notes/mpi_transport.md``."""

