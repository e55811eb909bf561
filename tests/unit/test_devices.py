"""horovod_torus.devices: the pure one-GPU-per-rank rule on fake device lists, and pin_gpu on this CPU host."""
import pytest

from horovod_torus.devices import launcher_pinned, pin_gpu, select_gpu

GPUS = [f"/physical_device:GPU:{i}" for i in range(4)]


@pytest.mark.parametrize("local_rank", range(4))
def test_each_local_rank_gets_its_own_gpu(local_rank):
    assert select_gpu(GPUS, local_rank, 4) == GPUS[local_rank]


def test_fewer_ranks_than_gpus_use_the_first_ones():
    assert [select_gpu(GPUS, r, 2) for r in range(2)] == GPUS[:2]


def test_more_ranks_than_gpus_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"8 ranks on this node but only 4 GPU\(s\).*ppr:4:node"):
        select_gpu(GPUS, 5, 8)
    with pytest.raises(RuntimeError, match="2 ranks on this node but only 1 GPU"):
        select_gpu(GPUS[:1], 0, 2)          # one GPU, not isolated by the launcher: two ranks would share it


def test_no_gpu_means_nothing_to_pin():
    assert select_gpu([], 3, 4) is None


def test_launcher_isolated_gpu_is_used_by_every_local_rank():
    assert launcher_pinned(GPUS[:1], {"CUDA_VISIBLE_DEVICES": "3"})
    assert not launcher_pinned(GPUS[:1], {})
    assert not launcher_pinned(GPUS[:2], {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert [select_gpu(GPUS[:1], r, 4, pinned=True) for r in range(4)] == [GPUS[0]] * 4


@pytest.mark.parametrize("rank, size", [(-1, 4), (4, 4), (0, 0)])
def test_bad_local_rank_raises(rank, size):
    with pytest.raises(ValueError, match=f"local rank {rank}"):
        select_gpu(GPUS, rank, size)


def test_pin_gpu_on_a_cpu_host_returns_none():
    assert pin_gpu(local_rank=1, local_size=2) is None      # this machine has no GPU


def test_doctor_check_and_report_line():
    """The doctor's verdict logic: exact sums of its inputs, and a mismatch named with its count."""
    import numpy as np

    from horovod_torus.doctor import RankReport, check_allreduce, doctor_input, exact_sum
    expected = exact_sum(4, 10)
    np.testing.assert_array_equal(expected, sum(doctor_input(r, 10) for r in range(4)))
    assert check_allreduce(expected.copy(), expected, "torus") == []
    bad = expected.copy()
    bad[3] += 1
    assert check_allreduce(bad, expected, "ring") == ["ring all-reduce: 1 of 10 elements differ from the exact sum"]
    assert "returned shape (9,)" in check_allreduce(expected[:9], expected, "torus")[0]
    rep = RankReport(1, 4, 1, 2, "n1", "/physical_device:GPU:1", "MPI,Gloo,NCCL", "MPI", "MULTIPLE", "2x2",
                     "horovod", [])
    assert rep.line().endswith("| OK") and "local 1/2 gpu /physical_device:GPU:1" in rep.line()
    rep.problems.append("x")
    assert rep.line().endswith("| FAIL: x")
    rep.malloc = "tcmalloc"
    assert ", malloc tcmalloc, TF threads" in rep.line()


def test_allocator_names_the_preloaded_library(tmp_path):
    from horovod_torus.bench.world import allocator

    maps = tmp_path / "maps"
    line = "7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/{}\n"
    maps.write_text(line.format("libc.so.6") + line.format("libtcmalloc_minimal.so.4.5.10"))
    assert allocator(str(maps)) == "tcmalloc"
    maps.write_text(line.format("libc.so.6") + line.format("libjemalloc.so.2"))
    assert allocator(str(maps)) == "jemalloc"
    maps.write_text(line.format("libc.so.6"))
    assert allocator(str(maps)) == "glibc"
    assert allocator(str(tmp_path / "absent")) == "unknown"
