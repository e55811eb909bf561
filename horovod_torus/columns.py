"""The column phase's algorithm on the MPI transport: which one runs, per call, and why.

Phase 2 of the torus (the all-reduce of a 1/X shard along a column of Y ranks) runs one of
:data:`horovod_torus.settings.COLUMN_ALGORITHMS`:

- ``"mpi"``: one ``MPI_Iallreduce`` on the column communicator (the MPI library picks its own algorithm);
- ``"ring"``: reduce-scatter + all-gather rings, 2(Y-1) steps (:func:`horovod_torus.p2p.ring_allreduce`);
- ``"halving-doubling"``: Rabenseifner's recursive halving + doubling, 2 lg Y steps, + 3 when Y is not a
  power of two (:func:`horovod_torus.p2p.halving_doubling_allreduce`);
- ``"tree"``: binomial-tree reduce + broadcast, 2 ceil(lg Y) steps, pipelined in pieces of
  :data:`TREE_CHUNK_BYTES` (:func:`horovod_torus.p2p.tree_allreduce`).

The last three are non-blocking point-to-point (``MPI_Isend``/``MPI_Irecv``), waited for under the call's
deadline like every step of the transport. The ``column_algorithm`` setting forces one; ``"auto"`` (the
default) asks :meth:`ColumnModel.choose` on every call, with the shard's bytes and Y: the least time of
:meth:`ColumnModel.time`, whose formulas are the cost model's (:mod:`horovod_torus.costmodel`:
``ring_time``, ``halving_doubling_time``, ``binomial_tree_time``). The choice depends only on the buffer's
element count, its item size, the grid and the model: every rank computes it from the same numbers, and
the call's signature carries it (:data:`horovod_torus.signature.COLUMN_CODES`), so ranks that chose
differently (another ``column_model`` on one rank) raise
:class:`horovod_torus.signature.TorusMismatchError` together before any data moves.

The model's parameters: :data:`ON_NODE` when two ranks of the column share a node (``MPI_COMM_TYPE_SHARED``,
agreed with one all-reduce at :meth:`horovod_torus.mpi.TorusComm.from_settings`), :data:`ACROSS_NODES`
when they are all on different nodes; pass a measured :class:`ColumnModel` to ``TorusComm(...,
column_model=...)`` for another machine (``tools/probes/column_algorithms.py`` fits one).
"""
from __future__ import annotations

import dataclasses
import functools

from horovod_torus.costmodel import Link, binomial_tree_time, halving_doubling_time, ring_time
from horovod_torus.settings import COLUMN_ALGORITHMS

__all__ = ["ColumnModel", "ON_NODE", "ACROSS_NODES", "column_bytes", "tree_chunks", "TREE_CHUNK_BYTES"]

TREE_CHUNK_BYTES = 1 << 20
"""Bytes per piece of the ``tree`` column's pipeline (:func:`horovod_torus.p2p.tree_allreduce`): shards
above it move in pieces of this size, so the scratch memory stays at ceil(lg p) pieces and the fold of one
piece overlaps the transfer of the next (:attr:`ColumnModel.chunk_bytes`' default)."""


def column_bytes(nbytes: int, x: int) -> int:
    """Bytes of the largest column shard of a ``nbytes`` buffer on a row of ``x`` ranks: ceil(nbytes / x).
    The same number on every rank (the ranks' own shards differ by up to one element)."""
    return -(-int(nbytes) // int(x))


def tree_chunks(nbytes: float, chunk_bytes: int) -> int:
    """Pieces of a ``tree`` column of ``nbytes``: ceil(nbytes / chunk_bytes), at least 1."""
    return max(1, -(-int(nbytes) // int(chunk_bytes)))


@dataclasses.dataclass(frozen=True)
class ColumnModel:
    """Alpha-beta parameters of the column phase on one machine (a frozen value: equal on every rank).

    Attributes:
        step: one point-to-point step of :mod:`horovod_torus.p2p` (alpha: seconds per message, mpi4py's
            and the Python loop's cost included; bandwidth: bytes per second).
        library: ``MPI_Allreduce`` on the column, charged as a ring with the library's own per-step
            latency and bandwidth (what the library runs inside is its business; this is its measured
            speed).
        gamma: seconds per byte folded by numpy in the point-to-point algorithms.
        exchange_efficiency: in (0, 1]: the bandwidth fraction of a pairwise exchange (both ranks sending
            to each other at once: every halving-doubling step), 1.0 on a full-duplex link
            (:attr:`horovod_torus.costmodel.Cluster.exchange_efficiency`).
        chunk_bytes: the ``tree`` column's piece (:data:`TREE_CHUNK_BYTES`).
        source: where the numbers come from (shown in docs and probes).
    """

    step: Link
    library: Link
    gamma: float = 0.0
    exchange_efficiency: float = 1.0
    chunk_bytes: int = TREE_CHUNK_BYTES
    source: str = ""

    def __post_init__(self):
        if not self.gamma >= 0:
            raise ValueError(f"gamma={self.gamma} s/B must be >= 0")
        if not 0 < self.exchange_efficiency <= 1:
            raise ValueError(f"exchange_efficiency={self.exchange_efficiency} must be in (0, 1] (1: full duplex)")
        if isinstance(self.chunk_bytes, bool) or not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 1:
            raise ValueError(f"chunk_bytes={self.chunk_bytes!r} must be a positive integer")

    def time(self, algorithm: str, ranks: int, nbytes: float) -> float:
        """Predicted seconds of one column all-reduce of ``nbytes`` per rank over ``ranks`` ranks.

        Raises:
            ValueError: an algorithm outside :data:`horovod_torus.settings.COLUMN_ALGORITHMS`, or a bad
                rank count or size (:mod:`horovod_torus.costmodel`'s checks).
        """
        a, b = self.step.alpha, self.step.beta
        if algorithm == "mpi":
            return ring_time(ranks, nbytes, self.library.alpha, self.library.beta)
        if algorithm == "ring":
            return ring_time(ranks, nbytes, a, b, self.gamma)
        if algorithm == "halving-doubling":
            return halving_doubling_time(ranks, nbytes, a, b / self.exchange_efficiency, self.gamma)
        if algorithm == "tree":
            return binomial_tree_time(ranks, nbytes, a, b, self.gamma, tree_chunks(nbytes, self.chunk_bytes))
        raise ValueError(f"column algorithm {algorithm!r}: choose one of {', '.join(COLUMN_ALGORITHMS)}")

    def choose(self, ranks: int, nbytes: float) -> str:
        """The algorithm of least :meth:`time` (ties: the first of COLUMN_ALGORITHMS, ``"mpi"`` first).
        Deterministic: the same arguments give the same answer on every rank. Cached (a training loop asks
        for the same few sizes every step)."""
        return _choose(self, ranks, nbytes)

    def times(self, ranks: int, nbytes: float) -> dict:
        """Every algorithm's :meth:`time`, by name (seconds)."""
        return {name: self.time(name, ranks, nbytes) for name in COLUMN_ALGORITHMS}


@functools.lru_cache(maxsize=1024)
def _choose(model: ColumnModel, ranks: int, nbytes: float) -> str:
    return min(COLUMN_ALGORITHMS, key=lambda name: (model.time(name, ranks, nbytes), COLUMN_ALGORITHMS.index(name)))


#: Ranks of the column on one node (shared memory): the medians over column lengths 2-8 of the fits of
#: ``tools/probes/column_algorithms.py`` (``docs/column_algorithms.json``) on the 2-core development host
#: under heavy load (4-8 ranks on 2 cores): a point-to-point step 579 us and 133 MB/s, ``MPI_Allreduce``
#: 66 us per step and 178 MB/s; numpy's fold 0.07 ns per byte. With these numbers the library wins at
#: every size and column length (as with the least disturbed rows' ~5 us per Python step, ~2 us per
#: library step).
ON_NODE = ColumnModel(step=Link(alpha=579e-6, bandwidth=133e6), library=Link(alpha=66e-6, bandwidth=178e6),
                      gamma=0.07e-9, source="2-core host under load, docs/column_algorithms.json")

#: Ranks of the column on different nodes. The emulated cluster's calibration (``docs/cluster_bench.json``:
#: 3.93 ms per inter-node message, 21.6 MB/s per NIC, pairwise exchanges at 0.61 of that) and its probe
#: (``docs/cluster_probes.md``: Open MPI 4.1's default ``MPI_Allreduce`` on the column ran at about half a
#: ring's speed). On a full-duplex fabric pass a ColumnModel with your measurements.
ACROSS_NODES = ColumnModel(step=Link(alpha=3.93e-3, bandwidth=21.6e6), library=Link(alpha=3.93e-3, bandwidth=10.8e6),
                           gamma=0.07e-9, exchange_efficiency=0.61,
                           source="emulated cluster, docs/cluster_bench.json and docs/cluster_probes.md")
