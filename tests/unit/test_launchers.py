"""horovod_torus.launchers: the exact command lines of typical calls, the forwarding rule, the elastic
flags, the errors (naming the value), and the command-line form (its output is the function's list)."""
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from horovod_torus import launchers
from horovod_torus.launchers import forwarded_env, horovodrun_command, launcher_command, mpirun_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {"PATH": "/bin", "HOME": "/root", "PYTHONPATH": "/repo", "HOROVOD_TORUS_GRID": "2x2",
       "HOROVOD_CYCLE_TIME": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "NCCL_DEBUG": "INFO", "UCX_TLS": "rc",
       "OMP_NUM_THREADS": "2", "OMPI_MCA_btl": "tcp,self", "CUDA_VISIBLE_DEVICES": "", "UNRELATED": "x"}
APP = ["python", "-m", "keras_app.train"]


def test_forward_rule_names_then_prefixes_when_set():
    assert forwarded_env(ENV) == ["PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "HOROVOD_CYCLE_TIME",
                                  "HOROVOD_TORUS_GRID", "NCCL_DEBUG", "OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL",
                                  "UCX_TLS"]
    assert forwarded_env(ENV, extra=["UNRELATED", "PATH", "NOT_SET"])[-1] == "UNRELATED"   # once, when set
    assert forwarded_env({}) == []
    with pytest.raises(ValueError, match="'A=1' is not an environment variable name"):
        forwarded_env(ENV, extra=["A=1"])


def test_mpirun_typical_lines():
    assert mpirun_command(4, APP, allow_run_as_root=False, environ={}) == [
        "mpirun", "--bind-to", "none", "-np", "4", *APP]
    assert mpirun_command(4, APP, oversubscribe=True, allow_run_as_root=True, environ={"PATH": "/bin"}) == [
        "mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4", "-x", "PATH", *APP]
    argv = mpirun_command(16, APP, hosts="n1:8,n2:8", bind_to="core", map_by="ppr:8:node:PE=4",
                          mca=[("btl_tcp_if_include", "ib0")], env={"HOROVOD_TORUS_GRID": "8x2"},
                          env_names=["UNRELATED"], allow_run_as_root=False, environ=ENV,
                          extra=["--report-bindings"])
    assert argv == ["mpirun", "--bind-to", "core", "-np", "16", "-H", "n1:8,n2:8", "--map-by", "ppr:8:node:PE=4",
                    "--mca", "btl_tcp_if_include", "ib0", "-x", "HOROVOD_TORUS_GRID=8x2",   # set here: not again
                    "-x", "PATH", "-x", "PYTHONPATH", "-x", "CUDA_VISIBLE_DEVICES", "-x", "HOROVOD_CYCLE_TIME",
                    "-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "UCX_TLS",
                    "-x", "UNRELATED", "--report-bindings", *APP]
    assert "OMPI_MCA_btl" not in argv and "HOME" not in argv


def test_mpirun_hostfile_binding_and_root():
    a = mpirun_command(2, ["x"], hosts="hosts", bind_to=None, environ={})
    assert a[a.index("--hostfile") + 1] == "hosts" and "--bind-to" not in a
    assert "--hostfile" in mpirun_command(2, ["x"], hosts=pathlib.Path("/tmp/a:b"), environ={})
    assert ("--allow-run-as-root" in mpirun_command(1, ["x"], environ={})) == (os.geteuid() == 0)
    assert mpirun_command(1, ["x"], env=["A=1", "B=x=y"], environ={}, allow_run_as_root=False)[-5:] == [
        "-x", "A=1", "-x", "B=x=y", "x"]


def test_horovodrun_typical_lines():
    assert horovodrun_command(4, APP) == ["horovodrun", "--gloo", "--disable-cache", "-np", "4", *APP]
    assert horovodrun_command(4, APP, hosts="localhost:4", gloo=False, disable_cache=False,
                              env={"HOROVOD_TORUS_GRID": "2x2"}) == [
        "env", "HOROVOD_TORUS_GRID=2x2", "horovodrun", "--mpi", "-np", "4", "-H", "localhost:4", *APP]
    assert horovodrun_command(3, ["t.py"], hosts="node0:2,node1:2", network_interfaces=["eth0", "eth1"],
                              start_timeout=120, gloo=None, extra=["--verbose"]) == [
        "horovodrun", "--disable-cache", "-np", "3", "-H", "node0:2,node1:2", "--network-interfaces",
        "eth0,eth1", "--start-timeout", "120", "--verbose", "t.py"]
    assert horovodrun_command(2, ["t.py"], hosts="hosts")[-3:] == ["--hostfile", "hosts", "t.py"]


def test_horovodrun_elastic_flags():
    assert horovodrun_command(4, ["t.py"], min_np=2, max_np=8, host_discovery_script="./discover.sh",
                              slots_per_host=4, elastic_timeout=600, reset_limit=3) == [
        "horovodrun", "--gloo", "--disable-cache", "-np", "4", "--host-discovery-script", "./discover.sh",
        "--slots-per-host", "4", "--min-np", "2", "--max-np", "8", "--elastic-timeout", "600",
        "--reset-limit", "3", "t.py"]
    fixed = horovodrun_command(4, ["t.py"], hosts="a:2,b:2", min_np=2, reset_limit=0)
    assert fixed[fixed.index("-H") + 1] == "a:2,b:2" and fixed[fixed.index("--reset-limit") + 1] == "0"


@pytest.mark.parametrize("call, match", [
    (lambda: mpirun_command(0, APP), "np=0: the number of ranks"),
    (lambda: mpirun_command(True, APP), "np=True"),
    (lambda: horovodrun_command("4", APP), "np='4'"),
    (lambda: mpirun_command(4, []), "no program to launch"),
    (lambda: mpirun_command(4, APP, hosts="h1:4,h2"), "'h2' is not HOST:SLOTS"),
    (lambda: horovodrun_command(4, APP, hosts="h1:0"), "'h1:0' is not HOST:SLOTS with SLOTS >= 1"),
    (lambda: mpirun_command(4, APP, hosts=" "), "hosts=' '"),
    (lambda: mpirun_command(4, APP, env=["NOVALUE"]), "'NOVALUE' is not NAME=VALUE"),
    (lambda: mpirun_command(4, APP, env={"1BAD": "x"}), "'1BAD' is not an environment variable name"),
    (lambda: horovodrun_command(4, APP, min_np=6, max_np=2, host_discovery_script="d"), "min_np=6 > max_np=2"),
    (lambda: horovodrun_command(1, APP, min_np=2, host_discovery_script="d"), "np=1 is outside min_np=2"),
    (lambda: horovodrun_command(4, APP, min_np=0, host_discovery_script="d"), "min_np=0 must be an integer >= 1"),
    (lambda: horovodrun_command(4, APP, max_np=8), "max_np=8: elastic options, but the launch is not elastic"),
    (lambda: horovodrun_command(4, APP, reset_limit=1), "reset_limit=1: elastic options"),
    (lambda: horovodrun_command(4, APP, min_np=2, hosts="a:4", ), "needs at least 2 of them"),
    (lambda: horovodrun_command(4, APP, min_np=2, hosts="a:2,b:2", slots_per_host=2), "slots_per_host=2"),
    (lambda: horovodrun_command(4, APP, min_np=2, host_discovery_script="d", gloo=False), "Gloo only"),
    (lambda: horovodrun_command(4, APP, hosts="a:2,b:2", host_discovery_script="d"), "give one of them"),
    (lambda: horovodrun_command(4, APP, start_timeout=0), "start_timeout=0 must be an integer >= 1 seconds"),
    (lambda: launcher_command("srun", 4, APP), "'srun' is not one of mpirun, horovodrun"),
])
def test_errors_name_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_program_must_be_a_list():
    with pytest.raises(TypeError, match="shlex.split"):
        mpirun_command(4, "python -m x")


def test_launcher_command_local():
    assert launcher_command("mpirun", 4, APP, local=True, allow_run_as_root=False, environ={"PATH": "/b"}) == [
        "mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", "-x", "PATH", *APP]
    assert launcher_command("horovodrun", 4, APP, local=True, env_names=["PATH"]) == [
        "horovodrun", "--gloo", "--disable-cache", "-np", "4", "-H", "localhost:4", *APP]
    assert launcher_command("horovodrun", 4, APP, local=True, hosts="n:4")[6] == "n:4"   # explicit wins
    assert "--oversubscribe" not in launcher_command("mpirun", 4, APP, environ={})


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "horovod_torus.launchers", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env={**(env or ENV), "PYTHONPATH": ROOT,
                                                                 "PATH": os.environ["PATH"]})


@pytest.mark.parametrize("args, expect", [
    (["mpirun", "--np", "4", "--local", "-x", "HOROVOD_TORUS_GRID=2x2", "-x", "UNRELATED", "--mca", "a", "1",
      "--extra=--report-bindings --tag-output", "--no-allow-run-as-root"],
     lambda env: launcher_command("mpirun", 4, ["python", "-m", "a b", "--flag"], local=True,
                                  env=["HOROVOD_TORUS_GRID=2x2"], env_names=["UNRELATED"], mca=[("a", "1")],
                                  allow_run_as_root=False, environ=env,
                                  extra=["--report-bindings", "--tag-output"])),
    (["mpirun", "--np", "2", "--hostfile", "/h/file", "--bind-to", "", "--map-by", "ppr:1:node"],
     lambda env: mpirun_command(2, ["python", "-m", "a b", "--flag"], hosts=pathlib.Path("/h/file"), bind_to="",
                                map_by="ppr:1:node", environ=env)),
    (["horovodrun", "--np", "4", "--local", "-x", "A=1 2"],
     lambda env: launcher_command("horovodrun", 4, ["python", "-m", "a b", "--flag"], local=True, env=["A=1 2"])),
    (["horovodrun", "--np", "4", "--min-np", "2", "--max-np", "6", "--host-discovery-script", "./d.sh",
      "--elastic-timeout", "60", "--reset-limit", "2", "--mpi", "--no-disable-cache", "--start-timeout", "5"],
     None),   # --mpi with elastic: an error
])
def test_cli_round_trip(args, expect):
    program = ["--", "python", "-m", "a b", "--flag"]
    out = _cli(*args, *program)
    if expect is None:
        assert out.returncode == 2 and "Gloo only" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    env = {**ENV, "PYTHONPATH": ROOT, "PATH": os.environ["PATH"]}
    assert shlex.split(out.stdout) == expect(env) and out.stdout.count("\n") == 1
    nul = _cli(*args, "--print0", *program)
    assert nul.stdout.split("\0")[:-1] == expect(env) and nul.stdout.endswith("\0")


def test_cli_errors_and_version():
    out = _cli("mpirun", "--np", "0", "--", "x")
    assert out.returncode == 2 and "np=0: the number of ranks" in out.stderr
    out = _cli("mpirun", "--np", "2", "x")
    assert out.returncode == 2 and "give the program after --" in out.stderr
    out = _cli("mpirun", "--np", "2", "--hosts", "a:1,b", "--", "x")
    assert out.returncode == 2 and "'b' is not HOST:SLOTS" in out.stderr
    assert _cli("--version").stdout.strip().startswith("python -m horovod_torus.launchers ")


def test_cli_forwards_only_what_its_caller_set():
    """Importing horovod_torus sets TensorFlow's oneDNN default in the CLI's own process; mpirun would warn
    about ``-x`` of a variable it does not see, so the CLI leaves it out."""
    env = {k: v for k, v in ENV.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    assert "TF_ENABLE_ONEDNN_OPTS" not in _cli("mpirun", "--np", "1", "--", "x", env=env).stdout
    assert "TF_ENABLE_ONEDNN_OPTS" in _cli("mpirun", "--np", "1", "--", "x",
                                           env={**env, "TF_ENABLE_ONEDNN_OPTS": "0"}).stdout


def test_main_in_process(capsys):
    assert launchers.main(["mpirun", "--np", "1", "--no-allow-run-as-root", "--", "x"], environ={}) == 0
    assert capsys.readouterr().out == "mpirun --bind-to none -np 1 x\n"
