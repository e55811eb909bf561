"""Row and column Horovod process sets of the torus grid, and Horovod initialisation with them.

Horovod 0.28.1 facts this module is built around (horovod/common/process_sets.py):

* every rank must register every process set, in the same order, at ``hvd.init(process_sets=[...])``;
* a set equal to the global set (the row when Y == 1, the column when X == 1) is rejected as a duplicate,
  so such a phase uses ``hvd.global_process_set`` instead;
* a phase over a single rank (the column when Y == 1, the row when X == 1) is skipped altogether.

The world size must be known *before* ``hvd.init`` to build the sets. It is read from the launcher:
``HOROVOD_SIZE`` / ``HOROVOD_LOCAL_SIZE`` under ``horovodrun`` (Gloo), otherwise from MPI through
mpi4py (``mpirun``, ``horovodrun --mpi``, or a single process), which Horovod then reuses.
"""
from __future__ import annotations

import dataclasses
import os

from horovod_torus.topology import TorusTopology

__all__ = ["TorusProcessSets", "world_from_launcher", "grid_from_env", "GRID_ENV"]

GRID_ENV = "HOROVOD_TORUS_GRID"


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


def grid_from_env(environ=None) -> TorusTopology | None:
    """The grid named by ``HOROVOD_TORUS_GRID=XxY``, or None when unset/empty.

    Raises:
        ValueError: a malformed value (the message names it and the expected form).
    """
    environ = os.environ if environ is None else environ
    text = environ.get(GRID_ENV, "").strip()
    if not text:
        return None
    try:
        return TorusTopology.parse(text)
    except ValueError as e:
        raise ValueError(f"{GRID_ENV}={text!r}: {e}") from None


def world_from_launcher(comm=None, environ=None) -> tuple[int, int, int]:
    """(size, local_size, rank) of this job before Horovod starts.

    Under ``horovodrun`` with Gloo the runner exports ``HOROVOD_SIZE``, ``HOROVOD_LOCAL_SIZE`` and
    ``HOROVOD_RANK``; otherwise MPI is asked through mpi4py (``comm`` or ``MPI.COMM_WORLD``; the local
    size is the size of the shared-memory sub-communicator).
    """
    environ = os.environ if environ is None else environ
    if comm is None and "HOROVOD_SIZE" in environ:
        size = int(environ["HOROVOD_SIZE"])
        return size, int(environ.get("HOROVOD_LOCAL_SIZE", size)), int(environ.get("HOROVOD_RANK", 0))
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return comm.Get_size(), local.Get_size(), comm.Get_rank()
    finally:
        local.Free()
