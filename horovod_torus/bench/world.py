"""The control collectives of the benchmarks (barrier, gather) and the host facts.

Which launcher started the job is :class:`horovod_torus.launch.LaunchContext`'s to say. Under an MPI
launcher (``mpirun -np N``, ``horovodrun --mpi``) the ``mpi`` / ``mpi-torus`` strategies use mpi4py on
``MPI.COMM_WORLD`` and :class:`MpiControl` runs the control collectives; under ``horovodrun --gloo`` (no
MPI world) only the Horovod strategies run and :class:`HorovodControl` uses Horovod ops.
"""
from __future__ import annotations

import datetime
import os
import platform
import socket

import numpy as np

__all__ = ["HorovodControl", "MpiControl", "host_facts", "cpu_model"]


class HorovodControl:
    """Barrier and gather through Horovod ops on the global process set (works under Gloo and MPI)."""

    def __init__(self):
        import horovod.tensorflow as hvd

        self._hvd = hvd
        self.size, self.rank = hvd.size(), hvd.rank()

    def barrier(self) -> None:
        """Return once every rank has entered (a one-element all-reduce, waited for)."""
        import tensorflow as tf

        self._hvd.allreduce(tf.zeros([1], tf.float32), op=self._hvd.Sum, name="bench_barrier").numpy()

    def gather(self, values) -> np.ndarray:
        """float64 array [size, k]: row r holds rank r's ``values`` (k floats, same k on every rank)."""
        import tensorflow as tf

        local = tf.constant([list(map(float, values))], dtype=tf.float64)
        return self._hvd.allgather(local, name="bench_gather").numpy()

    def gather_object(self, obj) -> list:
        """Every rank's picklable ``obj``, in rank order."""
        return self._hvd.allgather_object(obj, name="bench_gather_object")


class MpiControl:
    """Barrier and gather through mpi4py on ``comm``."""

    def __init__(self, comm):
        self._comm = comm
        self.size, self.rank = comm.Get_size(), comm.Get_rank()

    def barrier(self) -> None:
        self._comm.Barrier()

    def gather(self, values) -> np.ndarray:
        local = np.asarray([list(map(float, values))], dtype=np.float64)
        out = np.empty((self.size, local.shape[1]), np.float64)
        self._comm.Allgather(local, out)
        return out

    def gather_object(self, obj) -> list:
        return self._comm.allgather(obj)


def cpu_model() -> str:
    """The CPU model (``/proc/cpuinfo``'s first ``model name``, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: Allocator libraries :func:`allocator` recognises in the process' mapped files (substring -> name).
ALLOCATORS = (("libtcmalloc", "tcmalloc"), ("libjemalloc", "jemalloc"))


def allocator(maps: str = "/proc/self/maps") -> str:
    """The C allocator of this process: ``tcmalloc`` or ``jemalloc`` when that library is mapped (an
    ``LD_PRELOAD``, e.g. by ``mpi_scripts/run_local.sh``), else ``glibc`` (``unknown`` without ``maps``:
    not Linux)."""
    try:
        with open(maps) as f:
            text = f.read()
    except OSError:
        return "unknown"
    return next((name for lib, name in ALLOCATORS if lib in text), "glibc")


def host_facts(control, *, launcher: str, extra: dict | None = None) -> dict:
    """Facts about the machines and software of this run (collective: every rank must call it).

    Keys: hosts (distinct hostnames), nodes, ranks_per_host, cpu_model, cpu_count (logical CPUs per host,
    from os.cpu_count), allocator (rank 0's, :func:`allocator`), launcher, python, platform, numpy,
    tensorflow / horovod / mpi4py / mpi_library versions when loaded, utc (ISO time), plus ``extra``.
    """
    import sys

    hosts = control.gather_object(socket.gethostname())
    per_host = {h: hosts.count(h) for h in dict.fromkeys(hosts)}
    facts = {"hosts": list(per_host), "nodes": len(per_host), "ranks_per_host": per_host,
             "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "allocator": allocator(),
             "launcher": launcher,
             "python": platform.python_version(), "platform": platform.platform(),
             "numpy": np.__version__,
             "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if "tensorflow" in sys.modules:
        facts["tensorflow"] = sys.modules["tensorflow"].__version__
    if "horovod" in sys.modules:
        facts["horovod"] = sys.modules["horovod"].__version__
    if "mpi4py.MPI" in sys.modules:
        mpi = sys.modules["mpi4py.MPI"]
        facts["mpi4py"] = sys.modules["mpi4py"].__version__
        facts["mpi_library"] = mpi.Get_library_version().strip().splitlines()[0]
    facts.update(extra or {})
    return facts
