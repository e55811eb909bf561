"""The elastic torus scenario shared by the one-host and the emulated-cluster tests.

Two "nodes" of 2 ranks each form 4 ranks on a 2x2 grid under ``horovodrun --gloo --min-np 2 --max-np 4
--host-discovery-script`` (a blacklist cooldown of 1-3 s, so a lost node may come back). Each launch runs
``python -m keras_app.train --elastic true`` (the tiny model on a Fashion-MNIST subset, 2 epochs of 64 steps,
commits every 4 steps) through ``tests/paced_elastic_train.py``, which sleeps 0.15 s after each step while
the world is shrunk, so that the node is back before the run ends on a fast machine.
A *site* says where the nodes are:

* :class:`LocalSite`: two host names of this machine (``localhost`` and ``127.0.0.1``: Horovod blacklists
  the host of a failed worker, so the lost "node" needs a name of its own);
* :class:`ClusterSite`: two emulated nodes (network namespaces, one NIC each; :mod:`tools.cluster`), the
  launcher running inside node0.

:func:`reference` runs the job uninterrupted; :func:`lost_and_added_back` drops the node that does not hold
rank 0 from the discovery script once 16 steps are committed and SIGKILLs its two ranks, waits for 24 more
committed steps on 2 ranks (grid 2x1), then lists the node again so that the job grows back to 4 ranks
(2x2). Asserted by :func:`check_common` and :func:`lost_and_added_back`: the launcher exits 0; after each
(re)start every rank holds the same variables (SHA-256 over weights and optimizer variables) and so at the
end; the optimizer's iterations equal the committed steps (epochs x steps per epoch: no step lost or
applied twice); ``summary.json`` records both world changes (4 -> 2 -> 4, grids 2x2 -> 2x1 -> 2x2) in order
and mid-run; the surviving processes kept their PIDs (no relaunch); the final val top-1 is within 0.02 of
the uninterrupted run's (same seed).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from horovod_torus.atomic import write_text_atomic
from horovod_torus.launchers import horovodrun_command, launcher_command
from keras_app.elastic import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.environ.get("PYTHON", sys.executable)
EPOCHS, EXAMPLES, BATCH = 2, 8192, 128
STEPS = EPOCHS * (EXAMPLES // BATCH)
PACED_TRAIN = os.path.join(ROOT, "tests", "paced_elastic_train.py")   # keras_app.train, paced on 2 ranks
ARGS = [PACED_TRAIN, "--elastic", "true", "--preset", "fashion_mnist_quick", "--train-examples",
        str(EXAMPLES), "--val-examples", "2000", "--batch-schedule", f"0:{BATCH}", "--epochs", str(EPOCHS),
        "--commit-every", "4", "--seed", "3", "--verbose", "0"]
TIMEOUT_S = 420
ELASTIC_ARGS = dict(min_np=2, max_np=4, extra=["--blacklist-cooldown-range", "1", "3"])


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore", HOROVOD_GLOO_TIMEOUT_SECONDS="20",
               PATH=os.path.dirname(PYTHON) + os.pathsep + os.environ["PATH"])
    env.pop("HOROVOD_TORUS_GRID", None)
    return env


def write_hosts(path, hosts):
    write_text_atomic(path, "".join(f"{h}:2\n" for h in hosts))   # horovodrun's driver polls it


class _LocalJob:
    """A launch on this machine: ``poll()`` (None while running, else the exit code), ``wait(timeout)``,
    ``kill()`` (the launcher and every process of its session)."""

    def __init__(self, proc):
        self.proc = proc

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class LocalSite:
    """Two host names of this machine, 2 slots each."""

    hosts = ("localhost", "127.0.0.1")

    def start(self, argv, script, log_path) -> "_LocalJob":
        cmd = launcher_command("horovodrun", 4, argv, host_discovery_script=script, environ=_env(), **ELASTIC_ARGS)
        with open(log_path, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return _LocalJob(proc)


class _ClusterJob:
    """A launch inside the emulated cluster (a thread running :func:`tools.cluster.net.launch`); the same
    ``poll``/``wait``/``kill`` as :class:`_LocalJob` (``kill`` ends every process in the nodes)."""

    def __init__(self, site, thread, rc):
        self.site, self.thread, self.rc = site, thread, rc

    def poll(self):
        return None if self.thread.is_alive() else self.rc.get("code", -1)

    def wait(self, timeout):
        self.thread.join(timeout)
        return self.poll()

    def kill(self):
        from tools.cluster import net

        net.end_processes(self.site.spec.namespaces, grace_s=1.0)
        self.thread.join(30)


class ClusterSite:
    """Two emulated nodes of 2 ranks each (``tools.cluster``, one NIC per node, unshaped), already up:
    ``spec`` and ``files`` from :func:`tools.cluster.net.cluster`. The launcher runs inside node0 and
    binds every rank to its node's NIC."""

    def __init__(self, spec, files):
        self.spec, self.files = spec, files
        self.hosts = tuple(spec.hostnames)

    def start(self, argv, script, log_path) -> "_ClusterJob":
        from tools.cluster import net

        cmd = horovodrun_command(4, [self.files.bindnic, *argv], host_discovery_script=script,
                                 network_interfaces=self.spec.nic_name(0), start_timeout=120, **ELASTIC_ARGS)
        rc = {}
        log = open(log_path, "w")

        def run():
            try:
                rc["code"] = net.launch(self.spec, self.files, cmd, timeout=2 * TIMEOUT_S, env=_env(), stdout=log)
            finally:
                log.close()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return _ClusterJob(self, thread, rc)


def launch(site, tmp_path, name):
    """Start the elastic job on ``site``; returns (job, output dir, hosts file, log path)."""
    hosts = str(tmp_path / f"{name}.hosts")
    write_hosts(hosts, site.hosts)
    script = tmp_path / f"{name}.discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    out = str(tmp_path / name)
    log = tmp_path / f"{name}.log"
    return site.start([PYTHON] + ARGS + ["--output-dir", out], str(script), log), out, hosts, log


def rank_lines(out):
    return records(out, "ranks")


def progress(out):
    lines = records(out, "progress")
    return lines[-1] if lines else {"step": -1, "changes": -1}


def wait_for(job, log, until, what, timeout=TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while not until():
        if job.poll() is not None:
            raise AssertionError(f"the job ended (exit {job.poll()}) before {what}:\n" + log.read_text()[-3000:])
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s:\n" + log.read_text()[-3000:])
        time.sleep(0.5)


def finish(job, log):
    try:
        rc = job.wait(TIMEOUT_S)
    finally:
        job.kill()
    assert rc == 0, f"horovodrun exit {rc}:\n" + log.read_text()[-4000:]


def summary(out):
    with open(os.path.join(out, "summary.json")) as fh:
        return json.load(fh)


def check_common(out):
    """Identical variables after every (re)start and at the end; iterations = committed steps."""
    lines = rank_lines(out)
    finals = [r for r in lines if r.get("final")]
    starts = [r for r in lines if not r.get("final")]
    by_generation = {}
    for r in starts:
        by_generation.setdefault(r["changes"], []).append(r)
    for generation, rows in sorted(by_generation.items()):
        assert len({r["digest"] for r in rows}) == 1, f"ranks differ after reset {generation}: {rows}"
        assert sorted(r["rank"] for r in rows) == list(range(rows[0]["size"])), rows
    assert len(finals) == 4 and len({r["digest"] for r in finals}) == 1, finals
    assert {r["iterations"] for r in finals} == {STEPS}, finals
    s = summary(out)
    assert s["final"]["optimizer_iterations"] == s["final"]["committed_steps"] == STEPS, s["final"]
    return s, by_generation


def reference(site, tmp_path) -> float:
    """The uninterrupted run; returns its final val top-1."""
    job, out, _, log = launch(site, tmp_path, "reference")
    finish(job, log)
    s, generations = check_common(out)
    assert s["world_changes"] == [] and list(generations) == [0], s["world_changes"]
    assert s["final"]["val_top1"] > 0.5, s["final"]   # chance is 0.1
    return s["final"]["val_top1"]


def lost_and_added_back(site, tmp_path, reference_top1: float) -> dict:
    """The run that loses the node without rank 0 and gets it back; returns its summary."""
    job, out, hosts, log = launch(site, tmp_path, "elastic")
    try:
        wait_for(job, log, lambda: progress(out)["step"] >= 16, "16 committed steps on 4 ranks")
        first = rank_lines(out)[:4]
        rank0_host = next(r["host"] for r in first if r["rank"] == 0)
        victims = [r["pid"] for r in first if r["host"] != rank0_host]
        survivors = sorted(r["pid"] for r in first if r["host"] == rank0_host)
        assert len(victims) == 2, first
        write_hosts(hosts, [rank0_host])                # mid-epoch 1 (64 steps per epoch)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        wait_for(job, log, lambda: progress(out)["changes"] == 1 and progress(out)["step"] >= 40,
                 "24 committed steps on 2 ranks")
        write_hosts(hosts, site.hosts)                  # the node comes back (after Horovod's cooldown)
        finish(job, log)
    finally:
        job.kill()
    s, generations = check_common(out)
    changes = s["world_changes"]
    assert [(c["old_size"], c["new_size"]) for c in changes] == [(4, 2), (2, 4)], changes
    assert [(c["old_grid"], c["new_grid"]) for c in changes] == [("2x2", "2x1"), ("2x1", "2x2")], changes
    assert 16 <= changes[0]["step"] < 40 <= changes[1]["step"] < STEPS, changes   # both mid-run, in order
    assert sorted(r["pid"] for r in generations[1]) == survivors, generations[1]   # no relaunch
    assert generations[2][0]["size"] == 4 and len(generations[2]) == 4, generations[2]
    top1 = s["final"]["val_top1"]
    assert abs(top1 - reference_top1) <= 0.02, (top1, reference_top1)
    return s
