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
import pathlib
import shlex

from horovod_torus.launchers import LAUNCHERS, horovodrun_command, mpirun_command
from tools.cluster.layout import ClusterSpec

__all__ = ["ClusterFiles", "LAUNCHERS", "mpirun_argv", "horovodrun_argv", "in_node", "HARNESS_ENV"]

#: forwarded through mpirun (when set) besides horovod_torus.launchers' rule (``forwarded_env``): the
#: shared log folder of the multi-rank test harness (tests/cluster/run.sh, rank_pytest.sh).
HARNESS_ENV = ("PAR_LOGDIR",)


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
    """``mpirun ...`` (run inside node0) for ``command`` (argv list) on ``np`` ranks (default all):
    :func:`horovod_torus.launchers.mpirun_command` with the emulator's hostfile, agent and NICs.

    Args:
        mca: (name, value) pairs added as ``--mca name value`` (e.g. a forced collective algorithm).
        env_names: more environment variables to forward with ``-x`` (when set in ``environ``), besides
            the launchers' rule and :data:`HARNESS_ENV`.
        environ: the environment to look the names up in (default os.environ).
    """
    np = _check_np(spec, np)
    if not command:
        raise ValueError("no command to launch: give it after --")
    emulator = [("plm", "rsh"), ("plm_rsh_agent", files.agent), ("plm_rsh_no_tree_spawn", 1),
                ("btl", "tcp,vader,self"),
                ("btl_tcp_if_include", ",".join(spec.nic_name(k) for k in range(spec.nics))),
                ("oob_tcp_if_include", spec.nic_name(0)),
                # every "node" shares this machine's cores: a rank waiting in MPI yields its core instead of
                # spinning (Open MPI would spin: each node's slots are not oversubscribed in its eyes)
                ("mpi_yield_when_idle", 1)]
    return mpirun_command(np, [files.bindnic, *command], hosts=pathlib.Path(files.hostfile), oversubscribe=True,
                          allow_run_as_root=True, mca=[*emulator, *mca], env_names=[*HARNESS_ENV, *env_names],
                          environ=environ)


def horovodrun_argv(spec: ClusterSpec, files: ClusterFiles, command, np: int | None = None,
                    extra=(), start_timeout: int = 120) -> list[str]:
    """``horovodrun --gloo ...`` (run inside node0, with ``files.bin`` first on PATH) for ``command``:
    :func:`horovod_torus.launchers.horovodrun_command` with the emulator's hosts and driver NIC."""
    np = _check_np(spec, np)
    if not command:
        raise ValueError("no command to launch: give it after --")
    return horovodrun_command(np, [files.bindnic, *command], hosts=spec.horovodrun_hosts(),
                              network_interfaces=spec.nic_name(0), start_timeout=start_timeout, extra=extra)


def in_node(files: ClusterFiles, spec: ClusterSpec, argv, node: int = 0) -> list[str]:
    """``argv`` run inside node ``node`` (through the agent, as one shell-quoted command string)."""
    return [files.agent, spec.hostname(node), shlex.join(argv)]
