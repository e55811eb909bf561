"""Row and column Horovod process sets of the torus grid, and Horovod initialisation with them.

Horovod 0.28.1 facts this module is built around (horovod/common/process_sets.py):

* every rank must register every process set, in the same order, at ``hvd.init(process_sets=[...])``;
* a set equal to the global set (the row when Y == 1, the column when X == 1) is rejected as a duplicate,
  so such a phase uses ``hvd.global_process_set`` instead;
* a phase over a single rank (the column when Y == 1, the row when X == 1) is skipped altogether.

The world size must be known *before* ``hvd.init`` to build the sets: ``init`` takes it from the MPI
communicator, or under ``horovodrun --gloo`` from :class:`horovod_torus.launch.LaunchContext`.
"""
from __future__ import annotations

import dataclasses

from horovod_torus.topology import TorusTopology

__all__ = ["TorusProcessSets"]


@dataclasses.dataclass(frozen=True)
class TorusProcessSets:
    """The Horovod process sets of the torus grid, seen from one rank.

    Attributes:
        grid: the TorusTopology.
        rank: this process's global rank.
        row_sets: one process set per row (row order); ``hvd.global_process_set`` when Y == 1; None
            entries when X == 1 (phases 1 and 3 are skipped).
        column_sets: one process set per column (column order); the global set when X == 1; None
            entries when Y == 1 (phase 2 is skipped).
        registered: every set to pass to ``hvd.init(process_sets=...)``, in registration order: all rows,
            then all columns, identical on every rank; sets equal to the global set are left out.
    """

    grid: TorusTopology
    rank: int
    row_sets: tuple
    column_sets: tuple
    registered: tuple

    @classmethod
    def build(cls, grid: TorusTopology, rank: int, process_set_cls, global_set) -> "TorusProcessSets":
        """Create the sets for ``grid``.

        ``process_set_cls`` is ``horovod.tensorflow.ProcessSet`` and ``global_set`` is
        ``horovod.tensorflow.global_process_set`` (passed in so this stays testable without Horovod).
        """
        def make(groups, is_global):
            if len(groups[0]) == 1:
                return (None,) * len(groups)
            if is_global:
                return (global_set,) * len(groups)
            return tuple(process_set_cls(list(members)) for members in groups)

        row_sets = make(grid.rows(), grid.y == 1)
        column_sets = make(grid.columns(), grid.x == 1)
        registered = tuple(s for s in row_sets + column_sets if s is not None and s is not global_set)
        grid.coords(rank)  # validates the rank
        return cls(grid=grid, rank=rank, row_sets=row_sets, column_sets=column_sets, registered=registered)

    def with_rank(self, rank: int) -> "TorusProcessSets":
        """The same sets seen from ``rank``."""
        self.grid.coords(rank)
        return dataclasses.replace(self, rank=rank)

    @property
    def row(self):
        """Process set of this rank's row (phases 1 and 3), or None when X == 1."""
        return self.row_sets[self.grid.coords(self.rank)[0]]

    @property
    def column(self):
        """Process set of this rank's column (phase 2), or None when Y == 1."""
        return self.column_sets[self.grid.coords(self.rank)[1]]
