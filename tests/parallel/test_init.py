"""init(): Horovod's parameter order, the ranks' agreement on the settings before Horovod starts, the torus
over a sub-communicator. Every test here runs BEFORE Horovod is initialised in this process (no session
fixture), except the last two, which initialise it."""
import os
import time

import numpy as np
import pytest
import tensorflow as tf

import horovod_torus.tensorflow as hvd
from horovod_torus.agreement import SettingsMismatchError


def launcher_rank():
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("HOROVOD_RANK", "0")))


def under_mpi():
    return "OMPI_COMM_WORLD_SIZE" in os.environ


def _fails_everywhere(match, **kwargs):
    start = time.monotonic()
    with pytest.raises(ValueError, match=match):
        hvd.init(**kwargs)
    assert time.monotonic() - start < 30
    assert not hvd.is_initialized()


@pytest.mark.parametrize("var, value", [("HOROVOD_TORUS_GRID", "4x1"), ("HOROVOD_TORUS_TRANSPORT", "horovod"),
                                        ("HOROVOD_TORUS_BACKEND", "horovod"), ("HOROVOD_TORUS_COLUMN_RING", "1"),
                                        ("HOROVOD_TORUS_COLUMN_ALGORITHM", "tree"),
                                        ("HOROVOD_TORUS_GRID", "3x3")])
def test_env_var_on_one_rank_only_fails_on_every_rank(var, value):
    old = os.environ.get(var)
    if launcher_rank() == 3:
        os.environ[var] = value
    try:
        _fails_everywhere("different torus settings")
    finally:
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


def test_process_sets_that_differ_across_ranks_fail_on_every_rank():
    rows = [hvd.ProcessSet([0, 1])] if launcher_rank() < 2 else [hvd.ProcessSet([2, 3])]
    _fails_everywhere(r"process_sets: rank 0 \[\[0, 1\]\]", process_sets=rows)


@pytest.mark.parametrize("ranks, match", [([0, 0], "twice"), ([0, 4], "outside")])
def test_bad_process_sets_name_the_cause(ranks, match):
    _fails_everywhere(match, process_sets=[hvd.ProcessSet(ranks)])


def test_user_sets_that_duplicate_a_torus_or_global_set_fail_the_same_way_on_every_rank_in_repeated_cycles():
    """Horovod sorts a set's ranks and rejects duplicates inside hvd.init, where ranks can disagree and
    hang: init checks first, so every cycle gives every rank the same ValueError (or the same success)."""
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("HOROVOD_SIZE", "1")))
    grid = os.environ.get("HOROVOD_TORUS_GRID", "2x2")
    x = int(grid.split("x")[0])
    cases = [([hvd.ProcessSet(list(range(size)))], r"process_sets\[0\] = ProcessSet\(\[0, 1, 2, 3\]\) is the same "
                                                      r"set as the global process set"),
             ([hvd.ProcessSet([3, 0]), hvd.ProcessSet([0, 3])], r"process_sets\[1\] = ProcessSet\(\[0, 3\]\) is "
                                                                 r"the same set as process_sets\[0\] = ProcessSet\(\[0, 3\]\)")]
    if x == 2 and size == 4:  # rows [0, 1], [2, 3]; columns [0, 2], [1, 3]
        cases += [([hvd.ProcessSet([3, 2])], r"is the same set as torus row 1"),
                  ([hvd.ProcessSet([2, 0])], r"is the same set as torus column 0")]
    for cycle in range(3):
        for sets, match in cases:
            _fails_everywhere(match, grid=grid, process_sets=sets)
        torus = hvd.init(grid=grid, process_sets=[hvd.ProcessSet([0, 3])] if size == 4 else None)
        out = hvd.allreduce(tf.fill([3], float(launcher_rank())), op=hvd.Sum, strategy="torus")
        np.testing.assert_array_equal(out.numpy(), [float(sum(range(size)))] * 3, err_msg=f"cycle {cycle}")
        assert str(torus.grid) == grid
        hvd.shutdown()
    assert not hvd.is_initialized()


def test_grid_passed_positionally_is_refused():
    with pytest.raises(TypeError, match="keyword-only"):
        hvd.init("2x2")


def test_init_on_a_sub_communicator_positionally():
    """Horovod's init(comm): 4 ranks split into two communicators of 2; each torus sums over its own 2."""
    if under_mpi():
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        sub = world.Split(color=world.Get_rank() // 2, key=world.Get_rank())
        torus = hvd.init(sub, grid="2x1")
        assert (hvd.size(), hvd.rank()) == (2, world.Get_rank() % 2)
        pair = [2 * (world.Get_rank() // 2), 2 * (world.Get_rank() // 2) + 1]
        want = float(sum(pair))
    else:  # horovodrun: no MPI communicator to pass; the whole world
        torus = hvd.init(None, None, grid="2x2")
        want = float(sum(range(hvd.size())))
    assert isinstance(torus, hvd.TorusAllreduce) and hvd.torus() is torus
    x = tf.fill([5], float(launcher_rank()))
    for strategy in ["torus", "torus:horovod"] + (["torus:mpi"] if torus.torus_comm is not None else []):
        out = hvd.allreduce(x, op=hvd.Sum, strategy=strategy)
        np.testing.assert_array_equal(out.numpy(), [want] * 5, err_msg=strategy)
    np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, strategy="ring").numpy(), [want] * 5)


def test_second_init_returns_the_torus_or_names_both_grids():
    torus = hvd.torus()
    assert hvd.init() is torus and hvd.init(grid=str(torus.grid)) is torus
    other = "1x2" if str(torus.grid) == "2x1" else "4x1"
    with pytest.raises(ValueError, match=f"init\\(grid={other}\\): horovod_torus already runs on grid {torus.grid}"):
        hvd.init(grid=other)
    other_transport = "horovod" if hvd.transport() == "mpi" else "mpi"
    with pytest.raises(ValueError, match=f"init\\(transport='{other_transport}'\\): .* with transport="
                                         f"'{hvd.transport()}'"):
        hvd.init(transport=other_transport)
    with pytest.raises(ValueError, match=r"init\(min_torus_bytes=12345\): .* with min_torus_bytes=0"):
        hvd.init(min_torus_bytes=12345)
    assert hvd.init(transport="auto", min_torus_bytes=0, stall_shutdown_seconds=hvd.settings().stall_seconds) is torus
