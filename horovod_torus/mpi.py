"""The torus all-reduce over mpi4py: the MPI transport, and the numpy API for users without TensorFlow.

Source: Mikami et al., arXiv 1811.05233, section 3.2. :class:`TorusComm` duplicates the caller's
communicator (``MPI_Comm_dup``: the torus never matches messages with the caller's own traffic, even from
another thread) and splits the duplicate into a row and a column communicator. It is the
:class:`horovod_torus.phases.Transport` that :func:`horovod_torus.phases.allreduce_buffer` (the one
implementation of the three phases) runs on:

1. reduce-scatter on the row communicator (X ranks): explicit Sendrecv rings from
   :data:`RING_MIN_BYTES`, ``MPI_Reduce_scatter(_block)`` below; the first ``n % X`` ranks get one extra
   element (Horovod's split);
2. all-reduce of that shard on the column communicator (Y ranks): a Sendrecv ring (reduce-scatter then
   all-gather) from :data:`RING_MIN_BYTES` when the column's ranks are all on different nodes (the torus'
   layout on a cluster: the column crosses the slow links), else ``MPI_Allreduce`` in place. The
   ``column_ring`` setting (:class:`horovod_torus.settings.TorusSettings`) forces either;
3. all-gather on the row communicator straight into the output (rings from RING_MIN_BYTES, else
   ``MPI_Allgather(v)``).

Every step is a non-blocking MPI request (the rings as ``MPI_Isend``/``MPI_Irecv`` pairs), waited for under
the call's deadline (:mod:`horovod_torus.stall`): a rank that skipped the call, stopped early or died makes
the others raise :class:`horovod_torus.stall.TorusStallError` instead of blocking forever.

Every call first checks its :class:`horovod_torus.signature.CallSignature` across ranks with one
``MPI_Allreduce`` (MAX) of 20 int64 words (an ``MPI_Allgather`` of the words follows only when they differ,
to name each rank's value), so a rank passing another length, dtype, shape or op raises
:class:`horovod_torus.signature.TorusMismatchError` on every rank instead of hanging or summing garbage.
A call of the ``"flat"`` algorithm is one ``MPI_Allreduce`` on the whole duplicate communicator.

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

import contextlib

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from horovod_torus.agreement import agree_on
from horovod_torus.fusion import shard_counts
from horovod_torus.ops import LABELS, REDUCE_OPS, UFUNCS
from horovod_torus.phases import allreduce_buffer
from horovod_torus.settings import TorusSettings
from horovod_torus.signature import (EXIT_SIGNATURE, CallSignature, TorusMismatchError, compare, disagreeing,
                                     extremes, leaving)
from horovod_torus.stall import CallClock, TorusStallError, left_stall
from horovod_torus.topology import TorusTopology

__all__ = ["TorusComm", "torus_allreduce", "ring_reduce_scatter", "ring_allgather", "comm_world",
           "RING_MIN_BYTES", "TorusMismatchError", "TorusStallError"]


def comm_world(comm: MPI.Comm) -> tuple[int, int, int]:
    """(size, local size, rank) of ``comm``: the local size is that of this rank's shared-memory
    sub-communicator (``MPI_COMM_TYPE_SHARED``: the ranks of ``comm`` on this node). Collective."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return comm.Get_size(), local.Get_size(), comm.Get_rank()
    finally:
        local.Free()


def _column_ring(column: MPI.Comm, forced: bool | None) -> bool:
    """Whether phase 2 runs as a Sendrecv ring on ``column`` (collective over it): the forced value, or
    with None (``auto``) True when no two of its ranks share a node (``MPI_COMM_TYPE_SHARED``)."""
    if forced is not None or column.Get_size() == 1:
        return bool(forced)
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
        calls: torus calls made so far (the ``call`` word of every signature).
        column_ring: phase 2 runs as a Sendrecv ring from RING_MIN_BYTES (else MPI_Allreduce); see
            :meth:`create`.
        deadline: seconds a call may wait for the other ranks before it raises
            :class:`horovod_torus.stall.TorusStallError` (None: forever); see :meth:`watch`.
        alarm: a private duplicate of ``comm`` for the stall roll call only.
    """

    def __init__(self, comm: MPI.Comm, grid: TorusTopology, row: MPI.Comm, column: MPI.Comm,
                 column_ring: bool = False, deadline: float | None = None, alarm: MPI.Comm | None = None):
        self.comm, self.grid, self.row, self.column = comm, grid, row, column
        self.alarm = comm.Dup() if alarm is None else alarm
        self.column_ring = column_ring
        self.rank = comm.Get_rank()
        self.calls = 0
        self.deadline = deadline
        self._clock: CallClock | None = None  # the deadline of the call in progress
        self._workspace: dict = {}
        self._pending = None  # (length, out, block view) of the last reduce-scatter, for allgather

    @classmethod
    def create(cls, comm: MPI.Comm, grid: TorusTopology | str | None = None, *, column_ring=None,
               stall_seconds=None) -> "TorusComm":
        """Resolve the settings, agree on them across ``comm``, then :meth:`from_settings`. Collective.

        Args:
            comm: an intra-communicator (its ranks are the torus ranks).
            grid: TorusTopology, ``"XxY"`` string, or None (``HOROVOD_TORUS_GRID``, else the default
                factorisation with a node's ranks in one row).
            column_ring: the column all-reduce's algorithm (:attr:`column_ring`): None/``"auto"``
                (``HOROVOD_TORUS_COLUMN_RING``, default auto: a Sendrecv ring for shards from
                :data:`RING_MIN_BYTES` when the column's ranks are all on different nodes), True (a ring
                from RING_MIN_BYTES on any layout), False (always ``MPI_Allreduce``).
            stall_seconds: :attr:`deadline` (None: ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``, else 300 s;
                0: none).

        The rules are :meth:`horovod_torus.settings.TorusSettings.resolve`'s (argument, else variable,
        else default).

        Raises:
            ValueError: a malformed setting or X*Y != comm size (every rank raises, before any torus
                communicator exists); :class:`horovod_torus.agreement.SettingsMismatchError` (a
                ValueError) when the ranks resolved different settings, naming each rank's value.
        """
        size, local_size, rank = comm_world(comm)

        def build():
            fields = ("grid", "column_ring", "stall_seconds")
            settings = TorusSettings.resolve(size=size, local_size=local_size, grid=grid,
                                             column_ring=column_ring, stall_seconds=stall_seconds, fields=fields)
            shown = settings.agreement()
            return settings, {k: shown[k] for k in fields}

        return cls.from_settings(comm, agree_on(build, rank=rank, size=size, comm=comm))

    @classmethod
    def from_settings(cls, comm: MPI.Comm, settings: TorusSettings) -> "TorusComm":
        """Duplicate ``comm`` and split the duplicate by ``settings.grid`` (collective over ``comm``).

        ``settings`` must already be equal on every rank (``init`` agrees on them first; :meth:`create`
        does for the numpy API)."""
        grid = settings.grid.check_size(comm.Get_size())
        dup = comm.Dup()
        r, c = grid.coords(dup.Get_rank())
        column = dup.Split(color=c, key=r)
        return cls(dup, grid, dup.Split(color=r, key=c), column,
                   column_ring=_column_ring(column, settings.column_ring), deadline=settings.stall_seconds,
                   alarm=dup.Dup())

    def free(self) -> None:
        """Free the three communicators (collective only in MPI's sense: call it on every rank)."""
        for c in (self.row, self.column, self.alarm, self.comm):
            if c != MPI.COMM_NULL:
                c.Free()

    def __enter__(self) -> "TorusComm":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    @contextlib.contextmanager
    def watch(self, name: str = ""):
        """Run one call under the deadline (:attr:`deadline`, the ``stall_seconds`` setting, the time
        ``init`` also gives Horovod): every MPI step of the call is non-blocking and waited for through a
        :class:`horovod_torus.stall.CallClock`, so a rank that skipped the call, stopped early or died makes
        the waiting ranks raise :class:`horovod_torus.stall.TorusStallError` (naming the call, ``name`` and
        the ranks that did not arrive) instead of blocking forever."""
        self._clock = CallClock(self.comm, self.alarm, self.calls + 1, name, self.grid, self.deadline)
        try:
            yield
        finally:
            self._clock = None

    def _wait(self, requests) -> None:
        """Complete ``requests`` under the call's deadline (none outside :meth:`watch`)."""
        if self._clock is None:
            MPI.Request.Waitall(requests)
        else:
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
    def verify(self, signature: CallSignature):
        self.calls += 1
        mine = signature.words(self.calls)
        if self.grid.size > 1:
            both = extremes(mine)
            reduced = np.empty_like(both)
            self._wait([self.comm.Iallreduce(both, reduced, op=MPI.MAX)])
            if disagreeing(reduced):  # rare: gather the words to name each rank's value
                gathered = np.empty((self.grid.size, mine.size), np.int64)
                self._wait([self.comm.Iallgather(mine, gathered)])
                left = leaving(gathered)
                if left and len(left) < self.grid.size:  # some ranks reached their exit: name them at once
                    raise left_stall(self.alarm, gathered, left, self.grid)
                compare(gathered, signature)
        return None

    def leave(self) -> None:
        """Exchange :data:`horovod_torus.signature.EXIT_SIGNATURE` (at the process's exit, registered by
        ``init``): returns when every rank leaves; raises :class:`horovod_torus.stall.TorusStallError` on
        every rank at once when some still make torus calls (naming the ranks that left)."""
        with self.watch("<exit>"):
            self.verify(EXIT_SIGNATURE)

    def reduce_scatter(self, buf: np.ndarray, op: str) -> np.ndarray:
        counts = shard_counts(buf.size, self.grid.x)
        me = self.grid.coords(self.rank)[1]
        ufunc = UFUNCS[op]
        if buf.nbytes >= RING_MIN_BYTES:
            out = np.empty_like(buf)
            shard = out[_blocks(counts)[me]]
            work = [self.shard_buffer(max(counts), buf.dtype, slot) for slot in (0, 1)]
            ring_reduce_scatter(self.row, buf, shard, counts, ufunc, work, self._wait)
            self._pending = (buf.size, out, shard)
            return shard
        self._pending = (buf.size, None, None)
        shard = np.empty(counts[me], buf.dtype)
        wire_op = _wire_op(_MPI_OPS[op], buf.dtype)
        if counts[0] == counts[-1]:
            self._wait([self.row.Ireduce_scatter_block(_wire(buf), _wire(shard), op=wire_op)])
        else:
            self._wait([self.row.Ireduce_scatter(_wire(buf), _wire(shard), recvcounts=counts, op=wire_op)])
        return shard

    def allreduce(self, shard: np.ndarray, op: str) -> np.ndarray:
        if self.column_ring and shard.nbytes >= RING_MIN_BYTES:
            counts = shard_counts(shard.size, self.grid.y)
            out = np.empty_like(shard)  # a new array: with X == 1 the shard is the caller's buffer
            block = _blocks(counts)[self.grid.coords(self.rank)[0]]  # position in the column = row index
            work = [self.shard_buffer(max(counts), shard.dtype, slot) for slot in (3, 4)]
            ring_reduce_scatter(self.column, shard, out[block], counts, UFUNCS[op], work, self._wait)
            ring_allgather(self.column, out, counts, self._wait)
            return out
        wire_op = _wire_op(_MPI_OPS[op], shard.dtype)
        if self.grid.x == 1:  # the shard is the caller's buffer: never reduce into it
            out = np.empty_like(shard)
            self._wait([self.column.Iallreduce(_wire(shard), _wire(out), op=wire_op)])
            return out
        self._wait([self.column.Iallreduce(MPI.IN_PLACE, _wire(shard), op=wire_op)])
        return shard

    def allgather(self, shard: np.ndarray) -> np.ndarray:
        n, out, view = self._pending
        self._pending = None
        counts = shard_counts(n, self.grid.x)
        if out is not None:
            if shard is not view:
                view[...] = shard
            ring_allgather(self.row, out, counts, self._wait)
            return out
        out = np.empty(n, shard.dtype)
        if counts[0] == counts[-1]:
            self._wait([self.row.Iallgather(_wire(shard), _wire(out))])
        else:
            self._wait([self.row.Iallgatherv(_wire(shard), _vspec(out, counts))])
        return out

    def allreduce_flat(self, buf: np.ndarray, op: str) -> np.ndarray:
        out = np.empty_like(buf)
        self._wait([self.comm.Iallreduce(_wire(buf), _wire(out), op=_wire_op(_MPI_OPS[op], buf.dtype))])
        return out

    def gate(self, buf, token):
        return buf


_MPI_OPS = {name: getattr(MPI, name.upper()) for name in REDUCE_OPS}


def _op_name(op) -> str:
    for name, mpi_op in _MPI_OPS.items():
        if op == mpi_op:
            return name
    raise ValueError(f"op={op!r} is not supported by the torus all-reduce: use MPI.SUM, MPI.MIN, MPI.MAX "
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
        ``recvbuf`` (allocated when None): the element-wise reduction over all ranks.

    Raises:
        ValueError: bad grid (see TorusComm.create), recvbuf of another shape/dtype, an unsupported op.
        TorusMismatchError (a ValueError): on every rank, when the ranks pass different shapes, dtypes or
            ops (one MPI_Allgather of the call signatures compares them first).
        TypeError: a dtype without an MPI datatype (the message names it).
    """
    send = np.asarray(sendbuf, order="C")
    if recvbuf is not None and (recvbuf.shape != send.shape or recvbuf.dtype != send.dtype):
        raise ValueError(f"recvbuf has shape {recvbuf.shape} and dtype {recvbuf.dtype}; expected "
                         f"{send.shape} and {send.dtype} like sendbuf")
    _check_dtype(send.dtype)
    opname = _op_name(op)
    if send.dtype == np.float16 and opname != "sum":
        raise TypeError(f"float16 supports op=MPI.SUM only, got MPI.{opname.upper()}")
    if isinstance(comm, TorusComm):
        if grid is not None and str(grid) != str(comm.grid):
            raise ValueError(f"grid={grid} differs from the TorusComm's grid {comm.grid}")
        return _run(comm, send, recvbuf, opname)
    tc = TorusComm.create(comm, grid)
    try:
        return _run(tc, send, recvbuf, opname)
    finally:
        tc.free()


def _run(tc: TorusComm, send: np.ndarray, recvbuf, opname: str):
    signature = CallSignature(elements=send.size, dtype=send.dtype.name,
                              layout=((send.dtype.name, send.shape),), op=LABELS[opname])
    with tc.watch(signature.name):
        out = allreduce_buffer(tc, send.reshape(-1), signature, op=opname)
    if np.shares_memory(out, send):  # one rank: nothing moved, the result must not alias the input
        out = out.copy()
    if recvbuf is None:
        return np.asarray(out).reshape(send.shape)
    recvbuf[...] = np.asarray(out).reshape(send.shape)
    return recvbuf


def _check_dtype(dtype) -> None:
    if dtype.kind not in "iuf":
        raise TypeError(f"dtype {dtype} is not supported by the torus all-reduce: use an integer "
                        f"or floating dtype (float16/32/64, int8..int64, uint8..uint64)")
    if dtype != np.float16:
        try:
            from_numpy_dtype(dtype)
        except (KeyError, ValueError, TypeError, MPI.Exception):
            raise TypeError(f"dtype {dtype} has no MPI datatype in mpi4py: cast to float16/float32/"
                            f"float64/int32/int64 first") from None


RING_MIN_BYTES = 256 * 1024
"""Per-rank buffer size (bytes) from which phases 1 and 3 run as explicit Sendrecv rings (and phase 2, on
the shard, when :attr:`TorusComm.column_ring` is on); below it the library collectives
(``MPI_Reduce_scatter(_block)``, ``MPI_Allgather(v)``) run. The measurements behind the value are in
``docs/notes/mpi_transport.md``."""

_float16: dict = {}


def _sum_float16(inbuf, inoutbuf, datatype):
    b = np.frombuffer(inoutbuf, dtype=np.float16)
    np.add(np.frombuffer(inbuf, dtype=np.float16), b, out=b)


def _wire(a: np.ndarray):
    """MPI buffer spec of ``a``; float16 (no MPI datatype) travels as 2-byte words."""
    if a.dtype != np.float16:
        return a
    if "type" not in _float16:
        _float16["type"] = MPI.UINT16_T.Dup().Commit()
    return [a.view(np.uint16), _float16["type"]]


def _wire_op(op, dtype):
    """The MPI op for ``dtype``: float16 sums go through a user-defined op (numpy arithmetic)."""
    if dtype != np.float16:
        return op
    if op != MPI.SUM:
        name = next((f"MPI.{n}" for n in ("MAX", "MIN", "PROD") if getattr(MPI, n) == op), "a user-defined op")
        raise TypeError(f"float16 supports op=MPI.SUM only, got {name}")
    if "op" not in _float16:
        _float16["op"] = MPI.Op.Create(_sum_float16, commute=True)
    return _float16["op"]


def _vspec(a, counts):
    spec = _wire(a)
    return [spec[0], (counts, None), spec[1]] if isinstance(spec, list) else [spec, (counts, None)]


def _blocks(counts):
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    return [slice(starts[k], starts[k + 1]) for k in range(len(counts))]


def _exchange(comm, outgoing, dest, incoming, source, tag, wait) -> None:
    """One ring step: send ``outgoing`` to ``dest`` while receiving ``incoming`` from ``source``."""
    wait([comm.Irecv(_wire(incoming), source=source, tag=tag), comm.Isend(_wire(outgoing), dest=dest, tag=tag)])


def ring_reduce_scatter(comm: MPI.Comm, send: np.ndarray, shard: np.ndarray, counts, ufunc, work,
                        wait=MPI.Request.Waitall) -> None:
    """Ring reduce-scatter: rank i ends with block i of the reduction of every rank's ``send``.

    p-1 steps; at step s rank i sends its partial block (i-s-1) mod p to rank i+1 and folds the partial
    block (i-s-2) mod p received from rank i-1 into its own contribution (Patarasuk & Yuan 2009). ``work``
    holds two scratch arrays of max(counts) elements; ``shard`` (counts[i] elements) must not overlap
    ``send``. ``wait`` completes each step's two requests (``TorusComm._wait``: under the call's deadline).
    """
    p, i = comm.Get_size(), comm.Get_rank()
    b = _blocks(counts)
    right, left = (i + 1) % p, (i - 1) % p
    partial = None
    for step in range(p - 1):
        sb, rb = (i - step - 1) % p, (i - step - 2) % p
        outgoing = send[b[sb]] if step == 0 else partial
        incoming = shard if step == p - 2 else work[step % 2][:counts[rb]]
        _exchange(comm, outgoing, right, incoming, left, 71, wait)
        ufunc(incoming, send[b[rb]], out=incoming)
        partial = incoming


def ring_allgather(comm: MPI.Comm, out: np.ndarray, counts, wait=MPI.Request.Waitall) -> None:
    """Ring all-gather in place: rank i's block i of ``out`` is filled in; afterwards every block is."""
    p, i = comm.Get_size(), comm.Get_rank()
    b = _blocks(counts)
    right, left = (i + 1) % p, (i - 1) % p
    for step in range(p - 1):
        sb, rb = (i - step) % p, (i - step - 1) % p
        _exchange(comm, out[b[sb]], right, out[b[rb]], left, 72, wait)


