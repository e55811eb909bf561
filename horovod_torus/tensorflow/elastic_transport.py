"""The torus phases on Horovod's global process set only: the transport of an elastic job.

Horovod 0.28.1's elastic mode cannot carry process sets (docs/guide/elastic.md, "What we found"): when a
rank dies, every surviving rank's background thread runs ``ProcessSetTable::Finalize``
(horovod/common/process_set.cc), which negotiates the removal of each non-global set with an
``Allgather2Ints`` on the broken global Gloo context; the ``gloo::IoException`` it throws is uncaught there
and ``std::terminate`` aborts the survivor (exit 134). With no process set registered besides the global
one that loop is empty and the survivors get ``HorovodInternalError``, as Horovod's elastic engine needs.

So each phase is one ``hvd.alltoall`` on the global set whose ``splits`` are zero for every rank outside
this rank's row (phases 1 and 3) or column (phase 2): data moves only between the same pairs of ranks as
on the row and column process sets, and Horovod never sees a set it would have to finalise.

* phase 1 (reduce-scatter along the row): send the ``j``-th of Horovod's uneven shards
  (:func:`horovod_torus.fusion.shard_counts`) to the row's rank in column ``j``, sum the X pieces received;
* phase 2 (all-reduce along the column): send the shard to every rank of the column, sum the Y copies
  received, in rank order (so every rank of a column holds the same bits);
* phase 3 (all-gather along the row): send the reduced shard to every rank of the row; the pieces arrive
  in rank order, which is column order: the whole buffer.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.fusion import shard_counts
from horovod_torus.tensorflow.transports import HorovodTransport, _sum_only
from horovod_torus.topology import TorusTopology

__all__ = ["GlobalSetTransport", "peer_splits"]


def peer_splits(grid: TorusTopology, peers, counts) -> list[int]:
    """The ``splits`` of one global ``hvd.alltoall``: ``counts[j]`` elements to ``peers[j]``, 0 to every
    other rank.

    Args:
        grid: the torus grid (its size is the length of the result).
        peers: the receiving ranks, ascending (a row or a column of ``grid``).
        counts: elements for each peer (ints, ``len(counts) == len(peers)``).

    Returns:
        A list of ``grid.size`` ints. The send buffer is read in rank order, so ascending peers take
        consecutive pieces of it.

    Raises:
        ValueError: the peers are not ascending ranks of the grid, or the lengths differ.
    """
    peers, counts = [int(p) for p in peers], [int(c) for c in counts]
    if len(peers) != len(counts):
        raise ValueError(f"peer_splits: {len(peers)} peers but {len(counts)} counts")
    if peers != sorted(set(peers)) or not all(0 <= p < grid.size for p in peers):
        raise ValueError(f"peer_splits: peers {peers} must be distinct ascending ranks in [0, {grid.size})")
    splits = [0] * grid.size
    for p, c in zip(peers, counts):
        splits[p] = c
    return splits


class GlobalSetTransport(HorovodTransport):
    """:class:`horovod_torus.phases.Transport` of the elastic torus: every phase an ``hvd.alltoall`` on the
    global process set with zero splits outside the row or column (module docstring).

    Args:
        sets: the :class:`horovod_torus.process_sets.TorusProcessSets` of the grid (never registered with
            Horovod: only their ranks are used).
        name: prefix of the Horovod op names (None: Horovod's automatic names).

    The signature check and the flat all-reduce are :class:`HorovodTransport`'s (global set already).
    """

    def __init__(self, sets, name: str | None = None):
        super().__init__(sets, name)
        self.reduce_scatter_via = "alltoall"
        row, col = self.grid.coords(self.rank)
        self._row = self.grid.rows()[row]
        self._column = self.grid.columns()[col]

    def _alltoall(self, buf, splits, suffix):
        out, _ = _hvd.alltoall(buf, splits=tf.constant(splits, tf.int32), name=self._op_name(suffix))
        return out

    def reduce_scatter(self, buf, op, out=None):
        _sum_only(op)
        counts = shard_counts(buf.shape[0], self.grid.x)  # fused buffers have a static length
        pieces = self._alltoall(buf, peer_splits(self.grid, self._row, counts), "rs")
        mine = counts[self.grid.coords(self.rank)[1]]
        return tf.reduce_sum(tf.reshape(pieces, [self.grid.x, mine]), axis=0)

    def allreduce(self, shard, op, out=None):
        _sum_only(op)
        n = int(shard.shape[0])
        copies = tf.tile(shard, [self.grid.y])
        pieces = self._alltoall(copies, peer_splits(self.grid, self._column, [n] * self.grid.y), "ar")
        return tf.reduce_sum(tf.reshape(pieces, [self.grid.y, n]), axis=0)

    def allgather(self, shard, out=None):
        n = int(shard.shape[0])
        copies = tf.tile(shard, [self.grid.x])
        return self._alltoall(copies, peer_splits(self.grid, self._row, [n] * self.grid.x), "ag")
