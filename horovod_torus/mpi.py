"""2D-Torus all-reduce of numpy arrays with mpi4py, for users without TensorFlow and for the benchmarks.

Source: Mikami et al., arXiv 1811.05233, section 3.2. The world communicator is split into row and
column sub-communicators once per (communicator, grid) and the three phases are MPI collectives:

1. ``MPI_Reduce_scatter(_block)`` on the row communicator (X ranks): each rank keeps the row reduction
   of about n/X elements (split as Horovod's reducescatter: the first n % X ranks get one extra);
2. ``MPI_Allreduce`` in place on the column communicator (Y ranks) over that shard;
3. ``MPI_Allgather(v)`` on the row communicator, straight into the output: every rank holds all n.

Example (``mpirun -np 4 python -c ...``)::

    import numpy as np
    from mpi4py import MPI
    from horovod_torus.mpi import torus_allreduce
    out = torus_allreduce(MPI.COMM_WORLD, np.full(5, MPI.COMM_WORLD.rank, np.float32), grid="2x2")
    # out == [6, 6, 6, 6, 6] on every rank
"""
from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from horovod_torus.fusion import shard_counts
from horovod_torus.process_sets import grid_from_env
from horovod_torus.topology import TorusTopology

__all__ = ["TorusComm", "torus_allreduce", "three_phases"]


@dataclasses.dataclass(frozen=True)
class TorusComm:
    """Row and column sub-communicators of ``comm`` for ``grid`` (created collectively, once).

    Attributes:
        comm: the parent communicator (N = X*Y ranks).
        grid: the TorusTopology.
        row: communicator of this rank's row (X ranks, ordered by column).
        column: communicator of this rank's column (Y ranks, ordered by row).
    """

    comm: MPI.Comm
    grid: TorusTopology
    row: MPI.Comm
    column: MPI.Comm

    @classmethod
    def create(cls, comm: MPI.Comm, grid: TorusTopology | str | None = None) -> "TorusComm":
        """Split ``comm`` by the grid. Collective over ``comm``.

        Args:
            comm: an intra-communicator.
            grid: TorusTopology, ``"XxY"`` string, or None (``HOROVOD_TORUS_GRID``, else the default
                factorisation with a node's ranks in one row).

        Raises:
            ValueError: a malformed grid or X*Y != comm size; raised on every rank before any
                communication (the check is local), so nobody hangs.
        """
        if isinstance(grid, str):
            grid = TorusTopology.parse(grid)
        elif grid is None:
            grid = grid_from_env()
            if grid is None:
                local = comm.Split_type(MPI.COMM_TYPE_SHARED)
                grid = TorusTopology.from_world(comm.Get_size(), local.Get_size())
                local.Free()
        grid.check_size(comm.Get_size())
        r, c = grid.coords(comm.Get_rank())
        return cls(comm=comm, grid=grid, row=comm.Split(color=r, key=c), column=comm.Split(color=c, key=r))

    def free(self) -> None:
        """Free the two sub-communicators."""
        self.row.Free()
        self.column.Free()


_cache: dict = {}


def _torus_comm(comm, grid) -> TorusComm:
    if isinstance(comm, TorusComm):
        if grid is not None and str(grid) != str(comm.grid):
            raise ValueError(f"grid={grid} differs from the TorusComm's grid {comm.grid}")
        return comm
    key = (comm.py2f(), str(grid))
    if key not in _cache:
        _cache[key] = TorusComm.create(comm, grid)
    return _cache[key]


def torus_allreduce(comm, sendbuf, recvbuf=None, op=MPI.SUM, grid=None):
    """All-reduce a numpy array over ``comm`` through the 2D torus.

    Args:
        comm: ``MPI.Comm`` (sub-communicators are created on first use and cached per comm and grid)
            or a :class:`TorusComm`.
        sendbuf: numpy array, any shape (0-d and empty included), any dtype mpi4py maps to an MPI type
            (float32, float64, int32, int64, ...); same shape and dtype on every rank.
        recvbuf: optional output array of the same shape and dtype (may be ``sendbuf`` itself).
        op: a predefined MPI reduction (``MPI.SUM`` default, ``MPI.MAX``, ``MPI.MIN``, ``MPI.PROD``).
        grid: TorusTopology, ``"XxY"``, or None (see :meth:`TorusComm.create`).

    Returns:
        ``recvbuf`` (allocated when None): the element-wise reduction over all ranks.

    Raises:
        ValueError: bad grid (see TorusComm.create) or recvbuf of another shape/dtype.
        TypeError: a dtype without an MPI datatype (the message names it).
    """
    tc = _torus_comm(comm, grid)
    send = np.asarray(sendbuf, order="C")
    if recvbuf is None:
        recvbuf = np.empty_like(send)
    elif recvbuf.shape != send.shape or recvbuf.dtype != send.dtype:
        raise ValueError(f"recvbuf has shape {recvbuf.shape} and dtype {recvbuf.dtype}; expected "
                         f"{send.shape} and {send.dtype} like sendbuf")
    try:
        from_numpy_dtype(send.dtype)
    except (KeyError, ValueError, TypeError, MPI.Exception):
        raise TypeError(f"dtype {send.dtype} has no MPI datatype in mpi4py: cast to float32/float64/"
                        f"int32/int64 first") from None
    if send.size == 0:
        return recvbuf
    out = recvbuf if recvbuf.flags.c_contiguous else np.empty_like(send)
    three_phases(tc, send.reshape(-1), out.reshape(-1), op)
    if out is not recvbuf:
        recvbuf[...] = out
    return recvbuf


def three_phases(tc: TorusComm, send: np.ndarray, recv: np.ndarray, op, datatype=None) -> None:
    """The three torus phases from flat ``send`` into flat ``recv`` (same length, may be the same array).

    ``datatype`` overrides the MPI datatype inferred from the numpy dtype (e.g. 2-byte words with a
    user-defined op for float16). Even splits use the *_block/Allgather forms, uneven ones the v-forms.
    """
    n, x = send.size, tc.grid.x
    counts = shard_counts(n, x)
    even = counts[0] == counts[-1]

    def spec(a, vcounts=None):
        if vcounts is not None:
            return [a, (vcounts, None), datatype] if datatype is not None else [a, (vcounts, None)]
        return [a, datatype] if datatype is not None else a

    if x == 1:
        shard = recv
        if shard is not send:
            shard[...] = send
    else:
        shard = np.empty(counts[tc.grid.coords(tc.comm.Get_rank())[1]], dtype=send.dtype)
        if even:
            tc.row.Reduce_scatter_block(spec(send), spec(shard), op=op)
        else:
            tc.row.Reduce_scatter(spec(send), spec(shard), recvcounts=counts, op=op)
    if tc.grid.y > 1:
        tc.column.Allreduce(MPI.IN_PLACE, spec(shard), op=op)
    if x > 1:
        if even:
            tc.row.Allgather(spec(shard), spec(recv))
        else:
            tc.row.Allgatherv(spec(shard), spec(recv, counts))
