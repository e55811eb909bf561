"""CLI validation of python -m horovod_torus.bench (no MPI launch: errors come before any collective)."""
import pytest

from horovod_torus.bench.__main__ import build_parser, config_from_args, main
from horovod_torus.launch import LaunchContext


def parse(*argv):
    return config_from_args(build_parser().parse_args(list(argv)))


def test_defaults_and_nccl_tests_flags():
    c = parse()
    assert c.sizes[0] == 4 and c.sizes[-1] == 128 * 2 ** 20 and len(c.sizes) == 26
    assert (c.iters, c.warmup, c.check, c.dtype) == (20, 5, True, "float32")
    assert c.strategies == ("torus", "horovod", "mpi-torus", "mpi")
    c = parse("-b", "1K", "-e", "1M", "-f", "32", "-n", "3", "-w", "0", "-c", "0", "-d", "half",
              "--strategies", "ring", "ring", "mpi", "--grid", "2x2")
    assert c.sizes == (1024, 32768, 1048576) and (c.iters, c.warmup, c.check) == (3, 0, False)
    assert c.dtype == "float16" and c.strategies == ("ring", "mpi") and c.grid == "2x2"
    assert c.min_seconds == 0.0 and parse("--min-seconds", "0.5").min_seconds == 0.5


@pytest.mark.parametrize("iters,min_seconds,pace,expected", [
    (10, 0.0, 1e-6, 10),        # 0: always -n
    (10, 0.5, 0.002, 250),      # 10 calls of 2 ms last 20 ms: 250 for half a second
    (10, 0.5, 0.1, 10),         # 10 calls already last a second: never fewer than -n
    (10, 0.5, 1e-7, 10000),     # at most MAX_ITERS
    (10, 0.5, 0.0, 10000),      # a zero pace (clock resolution) is no division by zero
])
def test_row_iters(iters, min_seconds, pace, expected):
    from horovod_torus.bench.allreduce import MAX_ITERS, row_iters

    assert MAX_ITERS == 10000
    assert row_iters(iters, min_seconds, pace) == expected


@pytest.mark.parametrize("argv,message", [
    (["--strategies", "nccl"], "--strategies nccl unknown"),
    (["--grid", "2by2"], "malformed"),
    (["-b", "1M", "-e", "4K"], "exceeds maximum size"),
    (["--plot", "out.svg"], "must name a .png"),
    (["-d", "complex64"], "dtype 'complex64' is not supported"),
    (["-n", "0"], "iterations -n 0"),
    (["--min-seconds", "-1"], "--min-seconds -1.0 must be >= 0"),
])
def test_bad_flags_fail_before_any_collective(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_gloo_launch_skips_mpi_strategies(monkeypatch, capsys):
    assert LaunchContext.from_environ({"OMPI_COMM_WORLD_SIZE": "4", "HOROVOD_SIZE": "4"}).mpi_world
    assert LaunchContext.from_environ({}).mpi_world  # a plain process is an MPI singleton
    assert not LaunchContext.from_environ({"HOROVOD_SIZE": "4", "HOROVOD_RANK": "0"}).mpi_world
    monkeypatch.setenv("HOROVOD_SIZE", "4")
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert main(["--strategies", "mpi", "mpi-torus"]) == 2
    err = capsys.readouterr().err
    assert "nothing to run" in err and "horovodrun --gloo" in err


def test_mpi_torus_runs_float16_where_mpi_has_no_datatype():
    from horovod_torus.bench.reducers import MPI_STRATEGIES, mpi_supports

    assert mpi_supports("mpi-torus", "float16") and not mpi_supports("mpi", "float16")
    assert not any(mpi_supports(s, "bfloat16") for s in MPI_STRATEGIES)
    assert all(mpi_supports(s, d) for s in MPI_STRATEGIES for d in ("float32", "float64", "int32", "int64"))
