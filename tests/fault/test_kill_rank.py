"""A rank killed (SIGKILL) mid-epoch of the smoke preset, under mpirun and under horovodrun.

Each test starts a real 4-rank launch of ``python -m keras_app.train --preset fashion_mnist_smoke`` with
the tiny model (what is under test is the launch, the transport and the checkpoints, not the model; the
tiny model keeps a launch to seconds): epochs of STEPS steps of global batch 64 (a few seconds each, so
the kill lands mid-epoch), validation after epoch 2 only. It waits until checkpoint 1 is on disk and rank
0 has reported a step of epoch 2, kills one rank with SIGKILL and asserts: the launcher and every other
rank are gone within DEADLINE_S seconds; the launcher exits non-zero; mpirun names the dead process and
ends the other ranks itself; horovodrun reports the victim's SIGKILL (137), terminates the others after
the first failure it sees (the victim's, or that of a rank that aborted when its Gloo connection to the
victim broke) and reports the exit statuses it collects, none of them zero; checkpoint 1 is intact (its
SHA-256 sums match) and alone (no partial checkpoint 2); a ``--resume`` launch continues from it and
completes epoch 2.

Run directly (not under mpirun): ``.venv/bin/python -m pytest -q tests/fault``. Each launch runs in its
own session, killed whole if a test fails, so nothing is left behind.
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from horovod_torus.launchers import launcher_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = os.environ.get("PYTHON", sys.executable)
NP = 4
DEADLINE_S = 60          # the other ranks must be gone this soon after the kill
START_TIMEOUT_S = 600    # for checkpoint 1 (4 processes starting TensorFlow on a loaded 2-core box)
STEPS = 256              # steps per epoch: ~35 ms each with 4 ranks of the tiny model on 2 cores
ARGS = ["-m", "keras_app.train", "--preset", "fashion_mnist_smoke", "--arch", "tiny",
        "--train-examples", str(64 * STEPS),
        "--val-examples", "64", "--val-every-epochs", "2", "--batch-schedule", "0:64", "--epochs", "2",
        "--grid", "2x2", "--intra-op-threads", "1", "--inter-op-threads", "1", "--verbose", "1"]
RANK_ENV = {"mpirun": "OMPI_COMM_WORLD_RANK", "horovodrun": "HOROVOD_RANK"}


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore", OMPI_MCA_rmaps_base_oversubscribe="1",
               HOROVOD_TORUS_MIN_BYTES="0",  # the torus' phases, as before the calibrated default
               PATH=os.path.dirname(PYTHON) + os.pathsep + os.environ["PATH"])
    env.pop("HOROVOD_TORUS_GRID", None)
    return env


def _command(launcher, out, *extra):
    """NP ranks of the app on this machine (run in the environment :func:`_env`)."""
    app = [PYTHON] + ARGS + ["--output-dir", out] + list(extra)
    return launcher_command(launcher, NP, app, local=True, environ=_env())


def _descendants(root):
    """Live (non-zombie) processes below ``root`` (launchers may start ranks in sessions of their own)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _ranks(root, launcher):
    """{rank: pid} of the Python processes below the launcher ``root`` running keras_app.train."""
    ranks = {}
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        key = RANK_ENV[launcher].encode()
        if b"keras_app.train" in cmd and os.path.basename(cmd[0].decode()).startswith("python") and key in env:
            ranks[int(env[key])] = pid
    return ranks


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _epoch2_step_done(log_path):
    """Rank 0's Keras progress bar shows a finished step (``k/STEPS``, 0 < k < STEPS) after ``Epoch 2/2``."""
    text = log_path.read_text(errors="replace")
    if "Epoch 2/2" not in text:
        return False
    done = [int(k) for k in re.findall(rf"\b(\d+)/{STEPS}\b", text.split("Epoch 2/2", 1)[1])]
    return any(0 < k < STEPS for k in done)


def _kill_session(proc, ranks=()):
    """Kill the launcher, its session, every process below it and ``ranks`` (nothing is left behind)."""
    for pid in _descendants(proc.pid) + list(ranks):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _checkpoint_intact(path):
    with open(os.path.join(path, "state.json")) as fh:
        meta = json.load(fh)
    for name, digest in meta["sha256"].items():
        with open(os.path.join(path, name), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == digest, f"{path}/{name} is damaged"
    return meta


@pytest.mark.parametrize("launcher,victim", [("mpirun", 1), ("horovodrun", 2)])
def test_killed_rank_ends_the_run_and_resume_continues(tmp_path, launcher, victim):
    out = str(tmp_path / "run")
    ckpts = os.path.join(out, "checkpoints")
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(launcher, out), cwd=ROOT, env=_env(), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    ranks = {}
    try:
        # wait for checkpoint 1 (end of epoch 1) and a finished step of epoch 2 in rank 0's progress bar
        t0 = time.monotonic()
        while not (os.path.isdir(os.path.join(ckpts, "ckpt-0001")) and _epoch2_step_done(log_path)):
            assert proc.poll() is None, f"the launch ended (exit {proc.returncode}) before epoch 2:\n" \
                                        f"{log_path.read_text()[-3000:]}"
            assert time.monotonic() - t0 < START_TIMEOUT_S, "no step of epoch 2 in time"
            time.sleep(0.2)
        ranks = _ranks(proc.pid, launcher)
        assert sorted(ranks) == list(range(NP)), f"rank processes found: {ranks}"
        assert not os.path.exists(os.path.join(ckpts, "ckpt-0002")), "epoch 2 ended before the kill"
        os.kill(ranks[victim], signal.SIGKILL)
        killed = time.monotonic()
        try:
            rc = proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            alive = [r for r, pid in ranks.items() if _alive(pid)]
            pytest.fail(f"{launcher}: {DEADLINE_S} s after SIGKILL of rank {victim}, the launcher is still "
                        f"running; ranks still alive: {alive}\n{log_path.read_text()[-3000:]}")
        while any(_alive(pid) for pid in ranks.values()) and time.monotonic() - killed < DEADLINE_S:
            time.sleep(0.2)
        left = [r for r, pid in ranks.items() if _alive(pid)]     # the rank pids seen before the kill
        elapsed = time.monotonic() - killed
    finally:
        _kill_session(proc, ranks.values())
    text = log_path.read_text()
    print(f"{launcher}: rank {victim} killed; launcher exit {rc} after {elapsed:.1f} s; its last output:\n"
          + "\n".join(text.splitlines()[-12:]))
    assert not left, f"ranks {left} still alive {DEADLINE_S} s after the kill"
    assert rc != 0
    assert elapsed < DEADLINE_S
    if launcher == "mpirun":
        assert f"process rank {victim} with PID" in text and "exited on signal 9" in text, text[-3000:]
    else:       # horovodrun reports the victim's SIGKILL and ends the others after the first failure it sees:
        # the victim's, or that of a rank whose Gloo connection to the victim broke first (abort, 134)
        assert f"Process {victim} exit with status code 137." in text, text[-3000:]
        assert re.search(r"Terminating remaining workers after failure of Process \d+\.", text), text[-3000:]
        codes = [int(c) for c in re.findall(r"Process \d+ exit with status code (\d+)\.", text)]
        assert codes and 0 not in codes, text[-3000:]          # nobody reported a clean exit
    assert sorted(os.listdir(ckpts)) == ["ckpt-0001"], os.listdir(ckpts)   # no partial checkpoint 2
    meta = _checkpoint_intact(os.path.join(ckpts, "ckpt-0001"))
    assert meta["epoch"] == 1

    # --resume continues from checkpoint 1 and completes epoch 2
    log2 = tmp_path / "resume.log"
    with open(log2, "w") as log:
        proc = subprocess.Popen(_command(launcher, out, "--resume"), cwd=ROOT, env=_env(), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        rc = proc.wait(timeout=START_TIMEOUT_S)
    finally:
        _kill_session(proc)
    text = log2.read_text()
    assert rc == 0, text[-3000:]
    assert "resumed after epoch 1" in text
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2]
    assert summary["epochs"][0] == meta["state"]["epochs"][0]       # epoch 1 restored, not re-run
    assert sorted(os.listdir(ckpts)) == ["ckpt-0001", "ckpt-0002"]
    _checkpoint_intact(os.path.join(ckpts, "ckpt-0002"))
