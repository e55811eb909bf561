"""Job templates and launchers: `bash -n` of every script, and DRY_RUN=1 runs under fake scheduler
environments that check the printed mpirun lines (ranks, hostfile, grid from the planner, staging, stable
output folder, --resume, --verbose 2), a GRID that does not fit the job refused by every template (exit 2,
before any mpirun line), prefix forwarding of variables, physical-core counting and GPU-socket binding
(fake lscpu / nvidia-smi / sysfs)."""
import glob
import os
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "mpi_scripts", "*.sh")))


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "NCCL_", "UCX_", "OMP_",
                                                                        "PBS_", "SGE_", "SLURM_"))}
    env.update(DRY_RUN="1", PYTHON=sys.executable, PYTHONPATH=ROOT, TMPDIR=str(tmp_path), **extra)
    return env


def _run(script, env, *args):
    out = subprocess.run(["bash", os.path.join(ROOT, "mpi_scripts", script), *args], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [shlex.split(line) for line in out.stdout.splitlines() if line.startswith("mpirun")]


def _flag(cmd, name):
    return cmd[cmd.index(name) + 1]


def _plan(preset, nodes, per_node):
    return subprocess.run([sys.executable, "-m", "horovod_torus.plan", "--preset", preset, "--nodes", str(nodes),
                           "--ranks-per-node", str(per_node), "--print-grid"], cwd=ROOT, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": ROOT}).stdout.strip()


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_bash_syntax(script):
    subprocess.run(["bash", "-n", script], check=True)


def _nodefile(tmp_path, hosts, repeat):
    path = tmp_path / "nodes"
    path.write_text("".join(f"{h}\n" * repeat for h in hosts))
    return str(path)


def _check_train(cmd, np_, grid, data_dir, out_dir):
    assert cmd[cmd.index("-m") + 1] == "keras_app.train" and _flag(cmd, "-np") == str(np_)
    if grid == "ring":
        assert _flag(cmd, "--strategy") == "horovod" and "--grid" not in cmd
    else:
        assert _flag(cmd, "--strategy") == "torus" and _flag(cmd, "--grid") == grid
    assert _flag(cmd, "--data-dir") == data_dir and _flag(cmd, "--output-dir") == out_dir
    assert "--resume" in cmd and _flag(cmd, "--verbose") == "2" and _flag(cmd, "--preset") == "imagenet_abci"
    assert _flag(cmd, "--batch-schedule") == f"0:{16 * np_},5:{32 * np_}"


def test_abci3_pbs_job(tmp_path):
    env = _env(tmp_path, PBS_NODEFILE=_nodefile(tmp_path, ["h1", "h2", "h3"], 1), PBS_JOBID="77.pbs",
               PBS_O_WORKDIR=ROOT, PBS_LOCALDIR="/local/77.pbs", IMAGENET_DIR="/groups/g/imagenet")
    stage, train = _run("abci3_job.sh", env, "--epochs", "3")
    hostfile = str(tmp_path / "hosts.77.pbs")
    assert open(hostfile).read().split("\n")[:3] == ["h1 slots=8", "h2 slots=8", "h3 slots=8"]
    assert stage[stage.index("-m") + 1:stage.index("-m") + 3] == ["keras_app.data", "stage"]
    assert _flag(stage, "-np") == "3" and _flag(stage, "--map-by") == "ppr:1:node"
    assert _flag(stage, "--world-size") == "24" and _flag(stage, "--dest") == "/local/77.pbs/imagenet"
    assert _flag(stage, "--data-dir") == "/groups/g/imagenet" and _flag(stage, "--hostfile") == hostfile
    _check_train(train, 24, _plan("abci3", 3, 8), "/local/77.pbs/imagenet", "runs/imagenet-3-nodes")
    assert _flag(train, "--hostfile") == hostfile and train[-2:] == ["--epochs", "3"]
    assert _flag(train, "--map-by").startswith("ppr:8:node:PE=") and "NCCL_IB_HCA" in train


def test_abci_uge_job_ring_override_and_no_staging(tmp_path):
    env = _env(tmp_path, SGE_JOB_HOSTLIST=_nodefile(tmp_path, ["g1", "g2"], 4), JOB_ID="9", SGE_LOCALDIR="/l/9",
               GRID="ring", STAGE="0", OUTPUT_DIR="runs/mine", IMAGENET_DIR="/data/in")
    (train,) = _run("abci_job.sh", env)                          # STAGE=0: no staging line
    assert open(tmp_path / "hosts.9").read() == "g1 slots=4\ng2 slots=4\n"
    _check_train(train, 8, "ring", "/data/in", "runs/mine")


def test_abci_uge_job_planned_grid(tmp_path):
    env = _env(tmp_path, SGE_JOB_HOSTLIST=_nodefile(tmp_path, [f"g{i}" for i in range(8)], 1), JOB_ID="10",
               SGE_LOCALDIR="/l/10", IMAGENET_DIR="/data/in")
    stage, train = _run("abci_job.sh", env)
    _check_train(train, 32, _plan("abci", 8, 4), "/l/10/imagenet", "runs/imagenet-8-nodes")


def test_slurm_job(tmp_path):
    env = _env(tmp_path, SLURM_JOB_NUM_NODES="3", SLURM_NTASKS_PER_NODE="4", SLURM_SUBMIT_DIR=ROOT,
               SLURM_TMPDIR="/tmp/slurm-5", IMAGENET_DIR="/data/in")
    stage, train = _run("slurm_job.sh", env)
    assert "--hostfile" not in train and "--hostfile" not in stage        # mpirun reads the allocation
    _check_train(train, 12, "4x3", "/tmp/slurm-5/imagenet", "runs/imagenet-3-nodes")
    with pytest.raises(AssertionError, match="not inside a Slurm job"):
        _run("slurm_job.sh", _env(tmp_path))



def _two_nodes_of_four(tmp_path, script):
    """The environment of a 2-node job with 4 ranks per node under each template's scheduler."""
    if script == "slurm_job.sh":
        return _env(tmp_path, SLURM_JOB_NUM_NODES="2", SLURM_NTASKS_PER_NODE="4", SLURM_SUBMIT_DIR=ROOT)
    if script == "abci_job.sh":
        return _env(tmp_path, SGE_JOB_HOSTLIST=_nodefile(tmp_path, ["g1", "g2"], 4), JOB_ID="11", STAGE="0")
    return _env(tmp_path, PBS_NODEFILE=_nodefile(tmp_path, ["h1", "h2"], 1), PBS_JOBID="12.pbs", PBS_O_WORKDIR=ROOT,
                STAGE="0", NPERNODE="4")


@pytest.mark.parametrize("script", ["slurm_job.sh", "abci_job.sh", "abci3_job.sh"])
@pytest.mark.parametrize("grid", ["3x3", "8", "2x2"])
def test_templates_refuse_a_grid_that_does_not_fit(tmp_path, script, grid):
    env = _two_nodes_of_four(tmp_path, script)
    out = subprocess.run(["bash", os.path.join(ROOT, "mpi_scripts", script)], env={**env, "GRID": grid}, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "mpirun" not in out.stdout, out.stdout + out.stderr
    assert out.stderr.strip() == (f"job: grid {grid} does not fit the job's 8 ranks (2 nodes x 4 per node): X*Y must be "
                                  "8; valid grids: 1x8 2x4 4x2 8x1 (GRID=4x2: a node per row), or GRID=ring")
    (train,) = _run(script, {**env, "GRID": "2x4"})
    assert _flag(train, "--grid") == "2x4" and _flag(train, "-np") == "8"


def _fake_tools(tmp_path, lscpu_lines, bus_ids=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "lscpu").write_text("#!/bin/sh\necho '# Core,Socket'\nprintf '%s\\n' " +
                                   " ".join(lscpu_lines) + "\n")
    if bus_ids is not None:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(bus_ids) + "\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def _sysfs(tmp_path, numa_of_gpu, domains):
    root = tmp_path / "sys"
    ids = []
    for i, node in enumerate(numa_of_gpu):
        bus = f"0000:{0x10 + i:02x}:00.0"
        d = root / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{node}\n")
        ids.append(f"00000000:{0x10 + i:02X}:00.0")
    for n in range(domains):
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
    return str(root), ids


def test_mpirun_forwards_by_prefix_counts_physical_cores(tmp_path):
    # 2 sockets x 4 cores x 2 hardware threads: 16 lines, 8 physical cores
    lines = [f"{c},{s}" for s in range(2) for c in range(s * 4, s * 4 + 4) for _ in range(2)]
    env = _env(tmp_path, PATH=_fake_tools(tmp_path, lines), HOROVOD_TORUS_BACKEND="mpi", NCCL_SOCKET_IFNAME="ib0",
               TF_ENABLE_ONEDNN_OPTS="0", UCX_TLS="rc", OMP_NUM_THREADS="2", UNRELATED_VAR="x", NP="8",
               NPERNODE="2", MODULE="horovod_torus.doctor")
    (cmd,) = _run("mpirun.sh", env, "--flag")
    exported = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    assert {"HOROVOD_TORUS_BACKEND", "NCCL_SOCKET_IFNAME", "TF_ENABLE_ONEDNN_OPTS", "UCX_TLS", "OMP_NUM_THREADS",
            "PATH", "PYTHONPATH"} <= exported and "UNRELATED_VAR" not in exported
    assert _flag(cmd, "--map-by") == "ppr:2:node:PE=4" and _flag(cmd, "--bind-to") == "core"
    assert cmd[-3:] == ["-m", "horovod_torus.doctor", "--flag"]


@pytest.mark.parametrize("numa, domains, mapping", [
    ([0, 0, 0, 0, 1, 1, 1, 1], 2, "ppr:4:numa:PE=2"),      # GPU i on socket i // 4: bind by socket
    ([0, 1, 0, 1, 0, 1, 0, 1], 2, "ppr:8:node:PE=2"),      # interleaved numbering: unknown order
    ([0, 0, 0, 0, 0, 0, 0, 0], 2, "ppr:8:node:PE=2"),      # all on one of two sockets
])
def test_mpirun_binds_to_the_gpu_socket(tmp_path, numa, domains, mapping):
    lines = [f"{c},{c // 8}" for c in range(16)]
    sysfs, ids = _sysfs(tmp_path, numa, domains)
    env = _env(tmp_path, PATH=_fake_tools(tmp_path, lines, ids), SYSFS=sysfs, NP="16", NPERNODE="8")
    (cmd,) = _run("mpirun.sh", env)
    assert _flag(cmd, "--map-by") == mapping


def test_horovod_suite_names_a_missing_checkout(tmp_path):
    out = subprocess.run(["bash", os.path.join(ROOT, "mpi_scripts", "horovod_suite.sh"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "test/parallel/test_tensorflow.py not found" in out.stderr and "v0.28.1" in out.stderr
