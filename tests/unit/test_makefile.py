"""Makefile recipes, read with `make -n` (nothing is installed): the GPU stack, the apt-less set-up on a
machine with its own MPI (run for real on the stamp target), `make demo NP=N` for N = 1, 2, 4, 6, 8 (the
app rounds the preset's batches to N), `make smoke` (the quick preset, then its top-1 check), and the tool
targets (cluster-bench, ablation, cluster-train) running the drivers in tools/."""
import os
import shutil
import subprocess

import pytest

from keras_app.train import configure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _make(tmp_path, *args, path=None):
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run(["make", "-C", ROOT, f"VENV={tmp_path}/venv", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_gpu_setup_installs_gpu_tensorflow_and_builds_nccl(tmp_path):
    gpu = _make(tmp_path, "-n", "setup", "GPU=1").stdout
    assert "pip install -q -r requirements-gpu.txt -c constraints-gpu.txt" in gpu
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in gpu and "for w in TensorFlow MPI Gloo NCCL" in gpu
    cpu = _make(tmp_path, "-n", "setup").stdout
    assert "pip install -q -r requirements.txt -c constraints.txt" in cpu
    assert "NCCL" not in cpu
    pins = {p: open(os.path.join(ROOT, p)).read() for p in ("requirements-gpu.txt", "constraints-gpu.txt")}
    assert "tensorflow[and-cuda]==2.18.1" in pins["requirements-gpu.txt"] and "tensorflow-cpu" not in pins[
        "requirements-gpu.txt"]
    assert "\ntensorflow==2.18.1\n" in pins["constraints-gpu.txt"] and "tensorflow_cpu" not in pins["constraints-gpu.txt"]


def _path_without_apt(tmp_path, with_mpi):
    bin_dir = tmp_path / ("bin-mpi" if with_mpi else "bin")
    bin_dir.mkdir()
    for tool in ("bash", "sh", "mkdir", "touch", "make", "id", "dpkg") + (("mpicc", "mpirun") if with_mpi else ()):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    return str(bin_dir)


def test_setup_without_apt_uses_the_site_mpi(tmp_path):
    stamp = tmp_path / "venv" / ".stamps" / "apt"
    ok = _make(tmp_path, str(stamp), path=_path_without_apt(tmp_path, with_mpi=True))
    assert ok.returncode == 0, ok.stderr
    assert "no apt-get here; using the MPI on PATH" in ok.stdout and stamp.exists()
    stamp.unlink()
    bad = _make(tmp_path, str(stamp), path=_path_without_apt(tmp_path, with_mpi=False))
    assert bad.returncode != 0 and "no apt-get and no MPI on PATH" in bad.stderr and not stamp.exists()


@pytest.mark.parametrize("np_", [1, 2, 4, 6, 8])
def test_demo_any_rank_count(tmp_path, np_):
    line = [l for l in _make(tmp_path, "-n", "demo", f"NP={np_}").stdout.replace("\\\n", " ").splitlines()
            if "run_local.sh" in l][0]
    words = subprocess.run(["bash", "-c", f"printf '%s\\n' {line.split('run_local.sh', 1)[1].split('&&')[0]}"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert words[0] == str(np_)
    assert ("--grid" in words) == (np_ == 4) and (np_ != 4 or words[words.index("--grid") + 1] == "2x2")
    assert "--batch-schedule" not in words      # the app rounds the preset's batches (one rule: run_local.sh too)
    cfg, notes = configure(words[1:], np_)
    batches = [int(item.split(":")[1]) for item in cfg.train.batch_schedule.split(",")]
    assert all(b % np_ == 0 for b in batches) and 256 - np_ < batches[0] <= 256 and 512 - np_ < batches[1] <= 512
    assert bool(notes) == (np_ == 6)
    assert "-m keras_app.expect runs/fashion_mnist_demo/summary.json --name \"make demo\" --min-top1 0.85" in line
    assert "--target-seconds 1200" in line


def test_smoke_runs_the_quick_preset_then_checks_its_top1(tmp_path):
    assert "make smoke" in _make(tmp_path, "help").stdout
    recipe = _make(tmp_path, "-n", "smoke").stdout.replace("\\\n", " ")
    line = [l for l in recipe.splitlines() if "run_local.sh" in l][0]
    assert "bash mpi_scripts/run_local.sh 4 --preset fashion_mnist_quick --output-dir runs/smoke &&" in line
    assert "-m keras_app.expect runs/smoke/summary.json" in line and "--min-top1 0.5" in line
    assert "--target-seconds 60" in line and "--seconds $(( $(date +%s) - start ))" in line
    assert "--preset fashion_mnist_quick" in _make(tmp_path, "-n", "smoke", "NP=2").stdout
    assert "--min-top1 0.3" in _make(tmp_path, "-n", "smoke", "SMOKE_TOP1=0.3").stdout


def test_tool_targets_run_the_drivers_in_tools(tmp_path):
    bench = _make(tmp_path, "-n", "cluster-bench").stdout
    assert "-m tools.cluster.bench --out runs/cluster_bench" in bench
    ablation = _make(tmp_path, "-n", "ablation").stdout
    assert "-m tools.ablation --np 4 --seeds 1,2 --out runs/ablation" in ablation
    assert "bash mpi_scripts/cluster_train.sh" in _make(tmp_path, "-n", "cluster-train").stdout
    assert '"$PYTHON" -m tools.cluster "$sub"' in open(os.path.join(ROOT, "mpi_scripts", "cluster_train.sh")).read()
