"""An in-process transport: N simulated ranks, one thread each, exchanging numpy arrays.

The unit tests run the shipped algorithm (:func:`horovod_torus.phases.allreduce_buffer`) on it, not a copy
of it. Every collective is an exchange through a shared board guarded by a barrier with a timeout, so a
rank that skips a call breaks the barrier (``threading.BrokenBarrierError``) instead of hanging the test.

Example::

    from horovod_torus.inprocess import run_ranks
    from horovod_torus.signature import CallSignature
    out = run_ranks("2x2", lambda t: allreduce_buffer(t, np.full(5, float(t.rank)), CallSignature(5, "float64")))
    # out[r] == [6, 6, 6, 6, 6] for every rank r
"""
from __future__ import annotations

import threading

import numpy as np

from horovod_torus.fusion import shard_counts
from horovod_torus.ops import UFUNCS
from horovod_torus.signature import CallSignature, TorusMismatchError, compare, disagreeing, extremes
from horovod_torus.topology import TorusTopology

__all__ = ["InProcessWorld", "InProcessTransport", "run_ranks"]


class InProcessWorld:
    """The shared board of N simulated ranks (one per thread)."""

    def __init__(self, grid: TorusTopology | str, timeout: float = 10.0):
        self.grid = TorusTopology.parse(grid) if isinstance(grid, str) else grid
        self._slots: list = [None] * self.grid.size
        self._barrier = threading.Barrier(self.grid.size, timeout=timeout)

    def exchange(self, rank: int, value) -> list:
        """Every rank's ``value`` (any object), in rank order (collective over all N ranks). An array is
        copied: a rank that finished may write its result into its buffer (in place) while the others still
        read it."""
        self._slots[rank] = value.copy() if isinstance(value, np.ndarray) else value
        self._barrier.wait()
        values = list(self._slots)
        self._barrier.wait()
        return values

    def abort(self) -> None:
        """Break the barrier so that every waiting rank raises BrokenBarrierError."""
        self._barrier.abort()


class InProcessTransport:
    """:class:`horovod_torus.phases.Transport` of simulated rank ``rank`` of ``world``. The phases' ``out``
    arguments are ignored (every phase returns a new array; :func:`horovod_torus.phases.allreduce_buffer`
    copies the result into the caller's ``out``)."""

    def __init__(self, world: InProcessWorld, rank: int):
        self.world, self.grid, self.rank = world, world.grid, rank
        self.calls = 0

    def _reduce(self, values, members, op):
        acc = np.array(values[members[0]], copy=True)
        for m in members[1:]:
            UFUNCS[op](acc, values[m], out=acc)
        return acc

    def verify(self, signature: CallSignature):
        self.calls += 1
        mine = signature.words(self.calls)
        reduced = np.max(np.stack(self.world.exchange(self.rank, extremes(mine))), axis=0)
        if disagreeing(reduced):  # the same two steps as the MPI and Horovod transports
            compare(np.stack(self.world.exchange(self.rank, mine)), signature)
        return None

    def reduce_scatter(self, buf, op, out=None):
        values = self.world.exchange(self.rank, buf)
        row = self.grid.row_members(self.rank)
        total = self._reduce(values, row, op)
        counts = shard_counts(total.size, self.grid.x)
        c = self.grid.coords(self.rank)[1]
        start = sum(counts[:c])
        return total[start:start + counts[c]]

    def allreduce(self, shard, op, out=None):
        values = self.world.exchange(self.rank, shard)
        return self._reduce(values, self.grid.column_members(self.rank), op)

    def allgather(self, shard, out=None):
        values = self.world.exchange(self.rank, shard)
        return np.concatenate([values[m] for m in self.grid.row_members(self.rank)])

    def allreduce_flat(self, buf, op, out=None):
        values = self.world.exchange(self.rank, buf)
        return self._reduce(values, list(range(self.grid.size)), op)

    def gate(self, buf, token):
        return buf


def run_ranks(grid: TorusTopology | str, fn, timeout: float = 10.0) -> list:
    """Run ``fn(transport)`` on every simulated rank of ``grid`` in its own thread.

    Returns:
        The ``fn`` results in rank order; an entry is the exception instance when that rank raised
        (for any exception but a TorusMismatchError, which every rank raises together, the barrier is
        then broken so that no other rank waits for it).
    """
    world = InProcessWorld(grid, timeout)
    results: list = [None] * world.grid.size

    def body(rank):
        try:
            results[rank] = fn(InProcessTransport(world, rank))
        except TorusMismatchError as exc:  # every rank raises it together: nobody is left waiting
            results[rank] = exc
        except BaseException as exc:  # noqa: BLE001 - reported to the caller per rank
            results[rank] = exc
            world.abort()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world.grid.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 4)
    return results
