import numpy as np
import pytest

from horovod_torus.fusion import plan_fusion, shard_counts


def test_shard_counts_follow_horovod_reducescatter():
    assert shard_counts(10, 4) == [3, 3, 2, 2]
    assert shard_counts(3, 4) == [1, 1, 1, 0]
    assert shard_counts(0, 2) == [0, 0]
    assert shard_counts(7, 1) == [7]
    for n in range(0, 30):
        for x in range(1, 7):
            c = shard_counts(n, x)
            assert sum(c) == n and max(c) - min(c) <= 1 and c == sorted(c, reverse=True)


def test_plan_groups_by_dtype_in_first_appearance_order():
    shapes = [(2, 3), (), (0,), (5,), (1, 1, 1)]
    dtypes = ["float32", "int64", "float32", "int64", "float32"]
    g32, g64 = plan_fusion(shapes, dtypes)
    assert g32.dtype == "float32" and g32.indices == (0, 2, 4)
    assert g32.counts == (6, 0, 1) and g32.offsets == (0, 6, 6)
    assert g32.total == 7
    assert g64.dtype == "int64" and g64.indices == (1, 3)
    assert g64.counts == (1, 5) and g64.offsets == (0, 1) and g64.total == 6


def test_plan_all_empty():
    (g,) = plan_fusion([(0,), (3, 0)], ["float32", "float32"])
    assert g.total == 0 and g.counts == (0, 0)


def test_plan_errors():
    with pytest.raises(ValueError, match="2 shapes but 1 dtypes"):
        plan_fusion([(1,), (2,)], ["float32"])
    with pytest.raises(ValueError, match="unknown dimension"):
        plan_fusion([(None, 3)], ["float32"])


def test_pack_unpack_roundtrip_numpy():
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np.float32) for s in [(3, 2), (), (0, 4), (7,)]]
    (g,) = plan_fusion([a.shape for a in arrays], [a.dtype for a in arrays])
    buf = np.zeros(g.total, np.float32)
    for i, off, c in zip(g.indices, g.offsets, g.counts):
        buf[off:off + c] = arrays[i].ravel()
    for i, off, c, s in zip(g.indices, g.offsets, g.counts, g.shapes):
        np.testing.assert_array_equal(buf[off:off + c].reshape(s), arrays[i])
