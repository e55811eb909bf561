"""TorusSettings.resolve (argument, else variable, else default) and LaunchContext.from_environ."""
import pytest

from horovod_torus.launch import LaunchContext
from horovod_torus.settings import DEFAULT_CACHE_DIR, DEFAULT_STALL_SECONDS, TorusSettings
from horovod_torus.topology import TorusTopology


def resolve(environ=None, size=4, local_size=4, **kwargs):
    return TorusSettings.resolve(size=size, local_size=local_size, environ=environ or {}, **kwargs)


def test_defaults():
    s = resolve(size=8, local_size=4)
    assert s == TorusSettings(grid=TorusTopology(4, 2), transport="auto", min_torus_bytes="auto",
                              column_algorithm="auto", stall_seconds=DEFAULT_STALL_SECONDS,
                              cache_dir="~/.cache/horovod_torus")
    assert DEFAULT_CACHE_DIR == "~/.cache/horovod_torus"
    assert s.agreement() == {"grid": "4x2", "transport": "auto", "min_torus_bytes": "auto", "column_algorithm": "auto",
                             "stall_seconds": 300.0}


def test_min_torus_bytes_zero_still_means_always_the_torus():
    assert resolve({"HOROVOD_TORUS_MIN_BYTES": "0"}).min_torus_bytes == 0
    assert resolve({"HOROVOD_TORUS_MIN_BYTES": "auto"}, min_torus_bytes=0).min_torus_bytes == 0
    assert resolve(min_torus_bytes="auto").min_torus_bytes == "auto"


def test_cache_dir_from_argument_variable_or_off():
    assert resolve({"HOROVOD_TORUS_CACHE_DIR": "/tmp/x "}).cache_dir == "/tmp/x"
    assert resolve({"HOROVOD_TORUS_CACHE_DIR": "/tmp/x"}, cache_dir="/tmp/y").cache_dir == "/tmp/y"
    assert resolve({"HOROVOD_TORUS_CACHE_DIR": "OFF"}).cache_dir is None
    assert "cache_dir" not in resolve({"HOROVOD_TORUS_CACHE_DIR": "/tmp/x"}).agreement()
    with pytest.raises(ValueError, match=r"cache_dir='  ' must be a directory or 'off'"):
        resolve(cache_dir="  ")


def test_variables_are_read_when_no_argument_is_given():
    env = {"HOROVOD_TORUS_GRID": "1x4", "HOROVOD_TORUS_TRANSPORT": "horovod", "HOROVOD_TORUS_MIN_BYTES": "4096",
           "HOROVOD_TORUS_COLUMN_ALGORITHM": "Tree", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "45"}
    s = resolve(env)
    assert (s.grid, s.transport, s.min_torus_bytes, s.column_algorithm, s.stall_seconds) == (
        TorusTopology(1, 4), "horovod", 4096, "tree", 45.0)


def test_an_argument_wins_over_its_variable():
    env = {"HOROVOD_TORUS_GRID": "1x4", "HOROVOD_TORUS_TRANSPORT": "horovod", "HOROVOD_TORUS_COLUMN_ALGORITHM": "ring",
           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "45"}
    s = resolve(env, grid="2x2", transport="mpi", min_torus_bytes="auto", column_algorithm="halving-doubling",
                stall_seconds=0)
    assert (s.grid, s.transport, s.min_torus_bytes, s.column_algorithm, s.stall_seconds) == (
        TorusTopology(2, 2), "mpi", "auto", "halving-doubling", None)


def test_deprecated_backend_variable_is_an_alias_of_transport():
    with pytest.warns(DeprecationWarning, match="HOROVOD_TORUS_BACKEND is deprecated: export HOROVOD_TORUS_TRANSPORT"):
        assert resolve({"HOROVOD_TORUS_BACKEND": "mpi"}).transport == "mpi"
    assert resolve({"HOROVOD_TORUS_BACKEND": "mpi", "HOROVOD_TORUS_TRANSPORT": "horovod"}).transport == "horovod"


@pytest.mark.parametrize("value, want", [("1", "ring"), ("0", "mpi"), ("AUTO", "auto")])
def test_deprecated_column_ring_variable_is_an_alias_of_the_column_algorithm(value, want):
    with pytest.warns(DeprecationWarning, match="HOROVOD_TORUS_COLUMN_RING is deprecated: export "
                                                "HOROVOD_TORUS_COLUMN_ALGORITHM"):
        assert resolve({"HOROVOD_TORUS_COLUMN_RING": value}).column_algorithm == want
    both = {"HOROVOD_TORUS_COLUMN_RING": value, "HOROVOD_TORUS_COLUMN_ALGORITHM": "tree"}
    assert resolve(both).column_algorithm == "tree"  # the new variable wins, without a warning


@pytest.mark.parametrize("argument, want", [(True, "ring"), (False, "mpi"), ("auto", "auto"), ("1", "ring")])
def test_deprecated_column_ring_argument_is_an_alias_of_the_column_algorithm(argument, want):
    with pytest.warns(DeprecationWarning, match="column_ring= is deprecated: pass column_algorithm="):
        assert resolve(column_ring=argument).column_algorithm == want


def test_column_ring_and_column_algorithm_arguments_must_not_disagree():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="column_ring=True and "
                                                                           "column_algorithm='tree' disagree"):
        resolve(column_ring=True, column_algorithm="tree")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="column_ring='often' must be one of"):
        resolve(column_ring="often")


def test_fields_limit_the_variables_read():
    """A caller that uses some settings only (the training app's early grid check, the calibration CLI's
    cache directory) reads only their variables: a bad transport variable is not its business. (The numpy
    API resolves every setting, as init does: tests/unit/test_settings_checks.py.)"""
    env = {"HOROVOD_TORUS_TRANSPORT": "nccl", "HOROVOD_TORUS_MIN_BYTES": "lots", "HOROVOD_TORUS_GRID": "1x4",
           "HOROVOD_TORUS_COLUMN_ALGORITHM": "mpi"}
    s = resolve(env, fields=("grid", "column_algorithm", "stall_seconds"))
    assert (s.grid, s.transport, s.min_torus_bytes, s.column_algorithm) == (TorusTopology(1, 4), "auto", "auto", "mpi")
    with pytest.raises(ValueError, match="HOROVOD_TORUS_TRANSPORT='nccl'"):
        resolve(env)


@pytest.mark.parametrize("env, kwargs, match", [
    ({"HOROVOD_TORUS_GRID": "2x"}, {}, r"HOROVOD_TORUS_GRID='2x': torus grid '2x' is malformed"),
    ({"HOROVOD_TORUS_GRID": "3x3"}, {}, r"HOROVOD_TORUS_GRID='3x3': .*world size is 4"),
    ({}, {"grid": "4x2"}, r"grid='4x2': .*world size is 4"),
    ({"HOROVOD_TORUS_TRANSPORT": "nccl"}, {}, r"HOROVOD_TORUS_TRANSPORT='nccl' is not a torus transport"),
    ({}, {"transport": "gloo"}, r"transport='gloo' is not a torus transport: choose one of auto, horovod, mpi"),
    ({"HOROVOD_TORUS_MIN_BYTES": "1k"}, {}, r"HOROVOD_TORUS_MIN_BYTES='1k' must be 'auto' or an integer"),
    ({}, {"min_torus_bytes": -1}, r"min_torus_bytes=-1 must be"),
    ({"HOROVOD_TORUS_COLUMN_RING": "sometimes"}, {}, r"HOROVOD_TORUS_COLUMN_RING='sometimes' must be one of auto"),
    ({"HOROVOD_TORUS_COLUMN_ALGORITHM": "binary"}, {},
     r"HOROVOD_TORUS_COLUMN_ALGORITHM='binary' is not a column algorithm: choose one of auto, mpi, ring, "
     r"halving-doubling, tree"),
    ({}, {"column_algorithm": "rings"}, r"column_algorithm='rings' is not a column algorithm"),
    ({"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "soon"}, {}, r"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS='soon' must be"),
])
def test_bad_values_name_their_source_and_the_fix(env, kwargs, match):
    with pytest.raises(ValueError, match=match):
        resolve(env, **kwargs)


def test_grid_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="must be a TorusTopology"):
        resolve(grid=(2, 2))


@pytest.mark.parametrize("env, want", [
    ({}, LaunchContext("single", 1, 0, 1, 0)),
    ({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, LaunchContext("mpirun", 8, 5, 4, 1)),
    ({"PMI_SIZE": "6", "PMI_RANK": "2", "MPI_LOCALNRANKS": "3", "MPI_LOCALRANKID": "2"},
     LaunchContext("mpiexec", 6, 2, 3, 2)),
    ({"HOROVOD_SIZE": "6", "HOROVOD_LOCAL_SIZE": "3", "HOROVOD_RANK": "4", "HOROVOD_LOCAL_RANK": "1",
      "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1"}, LaunchContext("horovodrun", 6, 4, 3, 1)),
    ({"SLURM_NTASKS": "8", "SLURM_PROCID": "7", "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_LOCALID": "3"},
     LaunchContext("srun", 8, 7, 4, 3)),
    # mpirun inside a Slurm allocation is an mpirun launch
    ({"SLURM_NTASKS": "8", "SLURM_PROCID": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"},
     LaunchContext("mpirun", 2, 1, 2, 0)),
])
def test_launch_context_from_each_launcher(env, want):
    got = LaunchContext.from_environ(env)
    assert got == want
    assert got.gloo == (want.launcher == "horovodrun")
    assert got.mpi_world == (want.launcher != "horovodrun")


@pytest.mark.parametrize("env, match", [
    ({"OMPI_COMM_WORLD_SIZE": "four"}, r"OMPI_COMM_WORLD_SIZE='four' is not a non-negative integer"),
    ({"HOROVOD_SIZE": "2", "HOROVOD_RANK": "2"}, r"HOROVOD_RANK=2 is outside the job's HOROVOD_SIZE=2"),
])
def test_launch_context_rejects_inconsistent_variables(env, match):
    with pytest.raises(ValueError, match=match):
        LaunchContext.from_environ(env)
