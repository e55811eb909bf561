"""Who launched this process: world size, rank, local size and local rank before Horovod starts.

A pure module (no MPI, no TensorFlow, no Horovod): it reads only the variables the launchers export, so
every part of the project (``init``, the benchmarks, the app's data staging, the tools) asks this one
place. What each launcher exports (Open MPI 4.1, MPICH/Intel MPI's Hydra, Horovod 0.28.1's runner,
Slurm's ``srun``):

=====================  ===============================================================================
launcher               variables (size, rank, local size, local rank)
=====================  ===============================================================================
``mpirun`` (Open MPI)  ``OMPI_COMM_WORLD_SIZE``, ``_RANK``, ``_LOCAL_SIZE``, ``_LOCAL_RANK``
``mpiexec`` (Hydra)    ``PMI_SIZE``, ``PMI_RANK``, ``MPI_LOCALNRANKS``, ``MPI_LOCALRANKID`` (also under
                       PBS/Torque's ``mpiexec``)
``horovodrun --gloo``  ``HOROVOD_SIZE``, ``HOROVOD_RANK``, ``HOROVOD_LOCAL_SIZE``, ``HOROVOD_LOCAL_RANK``
                       and ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` (``horovodrun --mpi`` runs ``mpirun``)
``srun`` (Slurm)       ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_NTASKS_PER_NODE`` (first count),
                       ``SLURM_LOCALID``
single process         nothing: a world of one rank
=====================  ===============================================================================

The first row that matches wins, in the order of the table (an ``mpirun`` inside a Slurm allocation is
an ``mpirun`` launch), except that ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` always means ``horovodrun --gloo``.

Example::

    >>> LaunchContext.from_environ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5",
    ...                             "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    LaunchContext(launcher='mpirun', size=8, rank=5, local_size=4, local_rank=1)
"""
from __future__ import annotations

import dataclasses
import os

__all__ = ["LaunchContext", "LAUNCHERS", "MPI_LAUNCHERS"]

#: launcher name -> (size, rank, local size, local rank) variables, in detection order.
_VARIABLES = {
    "mpirun": ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
               "OMPI_COMM_WORLD_LOCAL_RANK"),
    "mpiexec": ("PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"),
    "horovodrun": ("HOROVOD_SIZE", "HOROVOD_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_LOCAL_RANK"),
    "srun": ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_NTASKS_PER_NODE", "SLURM_LOCALID"),
}

#: Every launcher this module tells apart ("single": no launcher).
LAUNCHERS = tuple(_VARIABLES) + ("single",)

#: Launchers whose processes form one MPI world (mpi4py's COMM_WORLD spans the job; ``srun`` through the
#: MPI library's PMI/PMIx support). Only ``horovodrun --gloo`` has none.
MPI_LAUNCHERS = ("mpirun", "mpiexec", "srun", "single")


@dataclasses.dataclass(frozen=True)
class LaunchContext:
    """The job as the launcher announced it (a frozen value).

    Attributes:
        launcher: one of :data:`LAUNCHERS`.
        size: ranks in the job (>= 1). ``rank``: this process's rank, 0 <= rank < size.
        local_size: ranks on this node (>= 1). ``local_rank``: this process's rank on its node.
        elastic: True under an elastic ``horovodrun`` (``--min-np``/``--max-np``/``--host-discovery-script``,
            which exports ``HOROVOD_ELASTIC=1``). Its size and ranks are those of the first world only:
            after a reset Horovod's own init fetches the new ones (``hvd.size()``, ``hvd.rank()``).
    """

    launcher: str
    size: int
    rank: int
    local_size: int
    local_rank: int
    elastic: bool = False

    @classmethod
    def from_environ(cls, environ=None) -> "LaunchContext":
        """The context of this process from the launcher's variables (``os.environ`` by default).

        Raises:
            ValueError: a launcher variable that is not a non-negative integer, or a rank outside the
                announced size (the message names the variable and its value).
        """
        environ = os.environ if environ is None else environ
        order = list(_VARIABLES)
        if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in environ:  # horovodrun --gloo: decisive, whatever else is set
            order.insert(0, order.pop(order.index("horovodrun")))
        for launcher in order:
            names = _VARIABLES[launcher]
            if names[0] in environ:
                size, rank = _int(environ, names[0]), _int(environ, names[1], 0)
                local_size = _int(environ, names[2], size, first_of_list=True)
                local_rank = _int(environ, names[3], 0)
                if not 0 <= rank < size:
                    raise ValueError(f"{names[1]}={rank} is outside the job's {names[0]}={size}: the "
                                     f"launcher's variables are inconsistent (start the job with the launcher)")
                elastic = launcher == "horovodrun" and environ.get("HOROVOD_ELASTIC") == "1"
                return cls(launcher, size, rank, max(1, min(local_size, size)), local_rank, elastic)
        return cls("single", 1, 0, 1, 0)

    @property
    def gloo(self) -> bool:
        """True under ``horovodrun --gloo``: there is no MPI world (each process would be a singleton)."""
        return self.launcher == "horovodrun"

    @property
    def mpi_world(self) -> bool:
        """True when mpi4py's ``COMM_WORLD`` spans the whole job (an MPI launcher, ``srun``, one process);
        False under ``horovodrun --gloo``, where each process would be an MPI world of its own."""
        return self.launcher in MPI_LAUNCHERS


def _int(environ, name: str, default: int | None = None, *, first_of_list: bool = False) -> int:
    """``environ[name]`` as an int >= 0 (``default`` when unset). Slurm writes per-node counts as lists
    such as ``4(x2),2``: ``first_of_list`` takes the first count."""
    if name not in environ:
        return default
    text = str(environ[name]).strip()
    if first_of_list:
        text = text.split(",")[0].split("(")[0]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name}={environ[name]!r} is not a non-negative integer: the launcher exported a "
                         f"malformed value (unset it, or start the job with the launcher)")
    return value
