import pytest

from horovod_torus.process_sets import TorusProcessSets
from horovod_torus.topology import TorusTopology, parse_grid


def test_coords_and_members():
    g = TorusTopology(x=4, y=2)
    assert g.size == 8
    assert g.coords(0) == (0, 0)
    assert g.coords(5) == (1, 1)
    assert g.row_members(5) == (4, 5, 6, 7)
    assert g.column_members(5) == (1, 5)
    assert g.rows() == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert g.columns() == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert str(g) == "4x2"


@pytest.mark.parametrize("x,y", [(1, 1), (1, 4), (4, 1), (2, 3), (3, 2), (4, 8)])
def test_rows_and_columns_partition_the_world(x, y):
    g = TorusTopology(x, y)
    for parts in (g.rows(), g.columns()):
        flat = sorted(r for part in parts for r in part)
        assert flat == list(range(x * y))
    for r in range(g.size):
        row, col = g.coords(r)
        assert r in g.row_members(r) and r in g.column_members(r)
        assert set(g.row_members(r)) & set(g.column_members(r)) == {r}
        assert g.row_members(r)[col] == r and g.column_members(r)[row] == r


def test_steps_formula():
    assert TorusTopology(4, 2).steps() == 2 * 3 + 2 * 1
    assert TorusTopology(1, 1).steps() == 0
    assert TorusTopology(8, 1).steps() == 2 * (8 - 1)  # one flat ring


@pytest.mark.parametrize("size,local,expected", [
    (8, 4, (4, 2)),      # a node's ranks form one row
    (16, 4, (4, 4)),
    (4, 4, (2, 2)),      # one node: most square
    (6, 6, (3, 2)),
    (12, 5, (4, 3)),     # local size does not divide: most square
    (7, 1, (7, 1)),      # prime
    (1, 1, (1, 1)),
    (2176, 4, (4, 544)),  # the paper's 2,176 GPUs on 544 nodes
])
def test_from_world(size, local, expected):
    g = TorusTopology.from_world(size, local)
    assert (g.x, g.y) == expected
    assert g.size == size


def test_parse():
    assert parse_grid("4x2") == (4, 2)
    assert parse_grid(" 3 X 5 ") == (3, 5)
    assert TorusTopology.parse("2*3") == TorusTopology(2, 3)
    with pytest.raises(ValueError, match="'4by2' is malformed"):
        parse_grid("4by2")
    with pytest.raises(ValueError, match="x=0"):
        TorusTopology.parse("0x4")


@pytest.mark.parametrize("x,y", [(0, 2), (-1, 2), (2, 0), (1.5, 2), (True, 2)])
def test_bad_dimensions(x, y):
    with pytest.raises(ValueError, match="positive integers"):
        TorusTopology(x, y)


def test_check_size_names_both_numbers():
    g = TorusTopology(2, 3)
    assert g.check_size(6) is g
    with pytest.raises(ValueError, match=r"2x3=6 ranks but the world size is 4"):
        g.check_size(4)
    with pytest.raises(ValueError) as lib:
        g.check_size(4)
    assert str(lib.value).endswith('X*Y=4 (1x4, 2x2, 4x1; e.g. hvd.init(grid="2x2") or HOROVOD_TORUS_GRID=2x2), '
                                   'or launch 6 ranks')
    with pytest.raises(ValueError, match=r"X\*Y=4 \(1x4, 2x2, 4x1; e.g. --grid 2x2\), or launch 6 ranks$"):
        g.check_size(4, flag="--grid")


def test_grids_of_a_size():
    assert [str(g) for g in TorusTopology.grids(6)] == ["1x6", "2x3", "3x2", "6x1"]
    assert TorusTopology.grids(1) == [TorusTopology(1, 1)]
    with pytest.raises(ValueError, match="world size 0"):
        TorusTopology.grids(0)


def test_rank_out_of_range():
    with pytest.raises(ValueError, match="rank 4 is outside"):
        TorusTopology(2, 2).coords(4)


class _FakeSet:
    def __init__(self, ranks):
        self.ranks = ranks

    def __repr__(self):
        return f"Set{self.ranks}"


GLOBAL = _FakeSet("all")


def test_process_sets_regular_grid():
    sets = TorusProcessSets.build(TorusTopology(2, 3), 3, _FakeSet, GLOBAL)
    assert [s.ranks for s in sets.registered] == [[0, 1], [2, 3], [4, 5], [0, 2, 4], [1, 3, 5]]
    assert sets.row.ranks == [2, 3] and sets.column.ranks == [1, 3, 5]
    other = sets.with_rank(4)
    assert other.row.ranks == [4, 5] and other.column.ranks == [0, 2, 4]
    assert other.registered is sets.registered  # same objects: same registration on every rank


def test_process_sets_degenerate_grids():
    one_row = TorusProcessSets.build(TorusTopology(4, 1), 2, _FakeSet, GLOBAL)
    assert one_row.registered == () and one_row.row is GLOBAL and one_row.column is None
    one_col = TorusProcessSets.build(TorusTopology(1, 4), 2, _FakeSet, GLOBAL)
    assert one_col.registered == () and one_col.row is None and one_col.column is GLOBAL
    single = TorusProcessSets.build(TorusTopology(1, 1), 0, _FakeSet, GLOBAL)
    assert single.registered == () and single.row is None and single.column is None
