"""The three torus phases simulated over n in-process ranks with numpy, against the plain sum."""
import numpy as np
import pytest

from horovod_torus.fusion import plan_fusion, shard_counts
from horovod_torus.topology import TorusTopology


def simulate_torus_allreduce(per_rank: list, grid: TorusTopology) -> list:
    """per_rank[r] is rank r's flat buffer (same length on all ranks). Returns each rank's result."""
    n, x = grid.size, grid.x
    counts = shard_counts(per_rank[0].size, x)
    starts = np.cumsum([0] + counts)
    # Phase 1: reduce-scatter along each row; rank at column c owns slice c of its row's sum
    # (uneven split as Horovod's reducescatter: the first ranks get one extra element).
    owned = {}
    for row in grid.rows():
        row_sum = np.sum([per_rank[r] for r in row], axis=0)
        for c, r in enumerate(row):
            owned[r] = row_sum[starts[c]:starts[c + 1]].copy()
    # Phase 2: all-reduce along each column on the 1/x shard.
    for col in grid.columns():
        col_sum = np.sum([owned[r] for r in col], axis=0)
        for r in col:
            owned[r] = col_sum.copy()
    # Phase 3: all-gather along each row.
    out = [None] * n
    for row in grid.rows():
        full = np.concatenate([owned[r] for r in row])
        for r in row:
            out[r] = full
    return out


@pytest.mark.parametrize("x,y", [(1, 1), (2, 2), (1, 4), (4, 1), (2, 3), (3, 2), (4, 4)])
@pytest.mark.parametrize("shapes", [[(5, 3)], [()], [(0,)], [(1,)], [(2,)], [(7,), (2, 2), ()]])
def test_simulated_torus_equals_plain_sum(x, y, shapes):
    grid = TorusTopology(x, y)
    rng = np.random.default_rng(x * 10 + y)
    inputs = [[rng.integers(-50, 50, size=s).astype(np.int64) * (r + 1) for s in shapes]
              for r in range(grid.size)]
    (g,) = plan_fusion(shapes, ["int64"] * len(shapes), x)
    if g.total == 0:
        return
    bufs = []
    for arrays in inputs:
        buf = np.zeros(g.total, np.int64)
        for i, off, c in zip(g.indices, g.offsets, g.counts):
            buf[off:off + c] = arrays[i].ravel()
        bufs.append(buf)
    results = simulate_torus_allreduce(bufs, grid)
    for k, s in enumerate(shapes):
        expected = np.sum([inputs[r][k] for r in range(grid.size)], axis=0)
        for r in range(grid.size):
            off, c = g.offsets[k], g.counts[k]
            np.testing.assert_array_equal(results[r][off:off + c].reshape(s), expected)


def test_simulation_catches_a_wrong_slice():
    """The check above would fail if phase 3 gathered the shards in the wrong order."""
    grid = TorusTopology(2, 2)
    bufs = [np.arange(4, dtype=np.int64) * (r + 1) for r in range(4)]
    good = simulate_torus_allreduce(bufs, grid)[0]
    swapped = np.concatenate([good[2:], good[:2]])
    assert not np.array_equal(swapped, np.sum(bufs, axis=0))
    np.testing.assert_array_equal(good, np.sum(bufs, axis=0))
