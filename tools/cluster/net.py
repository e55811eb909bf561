"""Bring an emulated cluster up and down (needs root), and run commands on it.

``up`` runs :meth:`ClusterSpec.up_commands` and writes the cluster's files (hosts, hostfile, agent, ssh shim,
bindnic, state.json, the planner's cluster.json) under ``<root>/<name>/`` (root: ``HOROVOD_TORUS_CLUSTER_DIR``,
default ``/tmp/horovod-torus-cluster``). Any failure or interrupt during ``up`` tears down what was made.
``down`` ends the processes left in the cluster's namespaces (by their process ids, ``ip netns pids``),
deletes the namespaces (their veths and bridges go with them) and the files; it is idempotent and works
from the namespace names alone (``<name>-sw``, ``<name>-n<i>``), so it also cleans up after a crash.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

from horovod_torus.atomic import write_text_atomic
from tools.cluster.launch import ClusterFiles
from tools.cluster.layout import ClusterSpec
from tools.cluster.scripts import agent_text, bindnic_text, rank_hosts_name, ssh_shim_text

__all__ = ["ClusterError", "files_for", "require_root", "up", "down", "load", "is_up", "cluster",
           "namespaces_of", "end_processes", "launch", "interrupt_on_sigterm"]

DEFAULT_ROOT = "/tmp/horovod-torus-cluster"


class ClusterError(RuntimeError):
    """A cluster operation failed (the message says which command and why, and what to do)."""


def files_for(name: str) -> ClusterFiles:
    return ClusterFiles(os.path.join(os.environ.get("HOROVOD_TORUS_CLUSTER_DIR", DEFAULT_ROOT), name))


def require_root() -> None:
    """Raises ClusterError unless this process can make network namespaces (root) and has ip/tc/unshare."""
    if os.geteuid() != 0:
        raise ClusterError("the emulated cluster needs root (it creates network namespaces, veth links, bridges "
                           "and tc qdiscs): run it as root, e.g. sudo -E env PATH=\"$PATH\" python -m "
                           "tools.cluster ...")
    missing = [t for t in ("ip", "tc", "unshare", "mount") if shutil.which(t) is None]
    if missing:
        raise ClusterError(f"missing tools {' '.join(missing)}: install the Debian packages iproute2 and "
                           f"util-linux (apt-get install iproute2 util-linux)")


def _run(argv, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise ClusterError(f"command failed (exit {p.returncode}): {' '.join(argv)}\n{p.stderr.strip()}")
    return p


def namespaces_of(name: str) -> list[str]:
    """The existing network namespaces of cluster ``name`` (``<name>-sw``, ``<name>-n<i>``), nodes first."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    pat = re.compile(rf"^{re.escape(name)}-(sw|n\d+)$")
    found = [line.split()[0] for line in out.splitlines() if line.split() and pat.match(line.split()[0])]
    return sorted(found, key=lambda n: (n.endswith("-sw"), n))


def is_up(name: str) -> bool:
    return bool(namespaces_of(name))


def _write(path, text, mode=0o644):
    write_text_atomic(path, text, mode=mode)


def _write_files(spec: ClusterSpec, files: ClusterFiles) -> None:
    os.makedirs(files.bin, exist_ok=True)
    _write(files.hosts, spec.hosts_text())
    _write(files.hostfile, spec.hostfile_text())
    _write(files.agent, agent_text(spec, files.hosts), 0o755)
    _write(os.path.join(files.bin, "ssh"), ssh_shim_text(files.agent), 0o755)
    _write(files.bindnic, bindnic_text(spec, files.dir), 0o755)
    for i in range(spec.nodes):
        for k in range(spec.nics):
            _write(os.path.join(files.dir, rank_hosts_name(spec.hostname(i), spec.nic_name(k))), spec.hosts_text(i, k))
    _write(files.description, json.dumps(spec.planner_description(), indent=2) + "\n")
    _write(files.state, json.dumps(spec.as_dict(), indent=2) + "\n")


def up(spec: ClusterSpec, log=None) -> ClusterFiles:
    """Create the cluster and its files. On any error (or Ctrl-C) everything made so far is removed.

    Raises:
        ClusterError: not root, the cluster already exists, or a command failed (after tearing down).
    """
    require_root()
    if is_up(spec.name):
        raise ClusterError(f"a cluster named {spec.name!r} is already up ({' '.join(namespaces_of(spec.name))}): "
                           f"run `python -m tools.cluster down --name {spec.name}` first, or pick another --name")
    files = files_for(spec.name)
    try:
        for argv in spec.up_commands():
            _run(argv)
        _write_files(spec, files)
    except BaseException:
        down(spec.name, log=log)
        raise
    if log:
        log(f"cluster {spec.name}: {spec.nodes} nodes x {spec.ranks_per_node} ranks, {spec.wiring} wiring, "
            + (f"{spec.rate_mbit:g} Mbit/s per NIC and direction" if spec.rate_mbit else "unshaped")
            + f"; files in {files.dir}")
    return files


def end_processes(namespaces, log=None, grace_s: float = 5.0) -> int:
    """SIGTERM, then SIGKILL after ``grace_s``, the processes inside ``namespaces``; returns how many."""
    def pids():
        found = set()
        for ns in namespaces:
            out = _run(["ip", "netns", "pids", ns], check=False).stdout
            found |= {int(p) for p in out.split() if p.isdigit() and int(p) != os.getpid()}
        return found

    first = pids()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = pids()
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 2.0)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = pids()
        if not left:
            break
    if first and log:
        log(f"ended {len(first)} process(es) left in the cluster's namespaces")
    return len(first)


def down(name: str, log=None) -> list[str]:
    """Remove cluster ``name``: its processes, namespaces (with their links) and files. Idempotent.

    Returns:
        The namespaces deleted.
    Raises:
        ClusterError: not root, or a namespace could not be deleted.
    """
    require_root()
    namespaces = namespaces_of(name)
    end_processes(namespaces, log=log)
    errors = []
    for ns in namespaces:
        p = _run(["ip", "netns", "del", ns], check=False)
        if p.returncode != 0:
            errors.append(f"ip netns del {ns}: {p.stderr.strip()}")
    files = files_for(name)
    if os.path.isdir(files.dir):
        shutil.rmtree(files.dir, ignore_errors=True)
    if errors:
        raise ClusterError("could not remove everything: " + "; ".join(errors))
    if log and namespaces:
        log(f"cluster {name}: removed {' '.join(namespaces)}")
    return namespaces


def load(name: str) -> tuple[ClusterSpec, ClusterFiles]:
    """The spec and files of a cluster that is up. Raises ClusterError if it is not."""
    files = files_for(name)
    if not is_up(name) or not os.path.exists(files.state):
        raise ClusterError(f"no cluster named {name!r} is up: start it with `python -m tools.cluster up "
                           f"--name {name} ...`")
    with open(files.state) as f:
        return ClusterSpec.from_dict(json.load(f)), files


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM (e.g. ``kill``, ``timeout``) into KeyboardInterrupt, so the clean-up code runs, as on
    Ctrl-C (a process started in the background by a non-interactive shell even ignores SIGINT)."""
    signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def cluster(spec: ClusterSpec, log=None):
    """``with cluster(spec) as files:`` up on entry, down on exit (also on errors, Ctrl-C and SIGTERM)."""
    old_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        files = up(spec, log=log)
        try:
            yield files
        finally:
            # a second Ctrl-C or SIGTERM while tearing down must not leave namespaces behind
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                down(spec.name, log=log)
            finally:
                signal.signal(signal.SIGINT, old_int)
    finally:
        signal.signal(signal.SIGTERM, old_term)


def launch(spec: ClusterSpec, files: ClusterFiles, argv, node: int = 0, timeout: float | None = None,
           env=None, log=None, stdout=None) -> int:
    """Run ``argv`` inside node ``node`` (e.g. a launcher line from :mod:`tools.cluster.launch`).

    ``files.bin`` (the ssh shim) goes first on PATH; ``stdout``: a file for stdout and stderr (default: ours). On a timeout or Ctrl-C the launcher is ended and so are
    the processes it left in the cluster's namespaces. Returns the exit code (124 on a timeout).
    """
    from tools.cluster.launch import in_node

    env = dict(os.environ if env is None else env)
    env["PATH"] = files.bin + os.pathsep + env.get("PATH", "")
    proc = subprocess.Popen(in_node(files, spec, argv, node), env=env, stdout=stdout,
                            stderr=subprocess.STDOUT if stdout is not None else None,
                            stdin=subprocess.DEVNULL if stdout is not None else None)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        if log:
            log(f"timed out after {timeout:g} s: ending the launch")
        return 124
    except KeyboardInterrupt:
        if log:
            log("interrupted: ending the launch")
        raise
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            end_processes(spec.namespaces, log=log)
