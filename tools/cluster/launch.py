"""Command lines that launch a job across the emulated nodes (pure).

Both launchers run INSIDE node0 (through the agent), so that the remote daemons reach them over the
emulated network:

* Open MPI: ``mpirun --hostfile`` with ``plm_rsh_agent`` = the agent, ``btl tcp,vader,self`` (shared memory
  inside a node, TCP between nodes), the out-of-band channel on eth0, ``mpi_yield_when_idle 1`` (all nodes
  share the machine's cores), and every rank wrapped by bindnic (which sets ``btl_tcp_if_include`` to its
  own NIC);
* horovodrun (Gloo): ``horovodrun --gloo -H node0:L,...`` with the ssh shim first on PATH, the driver on
  eth0, every rank wrapped by bindnic (which sets ``HOROVOD_GLOO_IFACE`` to its own NIC).
"""
from __future__ import annotations

import dataclasses
import os
import shlex

from tools.cluster.layout import ClusterSpec

__all__ = ["ClusterFiles", "LAUNCHERS", "mpirun_argv", "horovodrun_argv", "in_node", "FORWARDED_ENV"]

LAUNCHERS = ("mpirun", "horovodrun")

#: environment variables mpirun forwards to the ranks with -x when they are set (plus every HOROVOD_*).
FORWARDED_ENV = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHON", "PYTHONWARNINGS",
                 "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL", "PAR_LOGDIR", "OMP_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class ClusterFiles:
    """Where ``up`` writes a cluster's files: ``<root>/<name>/``."""

    dir: str

    @property
    def state(self):
        return os.path.join(self.dir, "state.json")

    @property
    def agent(self):
        return os.path.join(self.dir, "agent")

    @property
    def bindnic(self):
        return os.path.join(self.dir, "bindnic")

    @property
    def bin(self):
        """Directory with the ssh shim (first on horovodrun's PATH)."""
        return os.path.join(self.dir, "bin")

    @property
    def hosts(self):
        return os.path.join(self.dir, "hosts")

    @property
    def hostfile(self):
        return os.path.join(self.dir, "hostfile")

    @property
    def description(self):
        """The planner's ``--cluster`` JSON (nominal rate)."""
        return os.path.join(self.dir, "cluster.json")


def _check_np(spec: ClusterSpec, np):
    np = spec.size if np is None else np
    if isinstance(np, bool) or not isinstance(np, int) or not 1 <= np <= spec.size:
        raise ValueError(f"-np {np!r} must be in 1..{spec.size} ({spec.nodes} nodes x {spec.ranks_per_node} "
                         f"slots; ranks fill node0 first)")
    return np


def mpirun_argv(spec: ClusterSpec, files: ClusterFiles, command, np: int | None = None, mca=(),
                env_names=(), environ=None) -> list[str]:
    """``mpirun ...`` (run inside node0) for ``command`` (argv list) on ``np`` ranks (default all).

    Args:
        mca: (name, value) pairs added as ``--mca name value`` (e.g. a forced collective algorithm).
        env_names: more environment variables to forward with ``-x`` (when set in ``environ``).
        environ: the environment to look the names up in (default os.environ).
    """
    np = _check_np(spec, np)
    environ = os.environ if environ is None else environ
    if not command:
        raise ValueError("no command to launch: give it after --")
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np),
            "--hostfile", files.hostfile,
            "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", files.agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl", "tcp,vader,self",
            "--mca", "btl_tcp_if_include", ",".join(spec.nic_name(k) for k in range(spec.nics)),
            "--mca", "oob_tcp_if_include", spec.nic_name(0),
            # every "node" shares this machine's cores: a rank waiting in MPI yields its core instead of
            # spinning (Open MPI would spin: each node's slots are not oversubscribed in its eyes)
            "--mca", "mpi_yield_when_idle", "1"]
    for name, value in mca:
        argv += ["--mca", str(name), str(value)]
    names = list(dict.fromkeys([*FORWARDED_ENV, *sorted(k for k in environ if k.startswith("HOROVOD_")),
                                *env_names]))
    for name in names:
        if name in environ:
            argv += ["-x", name]
    return argv + [files.bindnic, *command]


def horovodrun_argv(spec: ClusterSpec, files: ClusterFiles, command, np: int | None = None,
                    extra=(), start_timeout: int = 120) -> list[str]:
    """``horovodrun --gloo ...`` (run inside node0, with ``files.bin`` first on PATH) for ``command``."""
    np = _check_np(spec, np)
    if not command:
        raise ValueError("no command to launch: give it after --")
    return ["horovodrun", "--gloo", "--disable-cache", "-np", str(np), "-H", spec.horovodrun_hosts(),
            "--network-interface", spec.nic_name(0), "--start-timeout", str(start_timeout), *extra,
            files.bindnic, *command]


def in_node(files: ClusterFiles, spec: ClusterSpec, argv, node: int = 0) -> list[str]:
    """``argv`` run inside node ``node`` (through the agent, as one shell-quoted command string)."""
    return [files.agent, spec.hostname(node), shlex.join(argv)]
