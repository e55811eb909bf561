"""horovod_torus.agreement: the messages every rank raises when the ranks' settings differ."""
import pytest

from horovod_torus.agreement import SettingsMismatchError, agree


class FakeComm:
    """What comm.allgather returns on every rank: the given per-rank dicts."""

    def __init__(self, per_rank):
        self.per_rank = per_rank

    def allgather(self, mine):
        return self.per_rank


def test_a_rank_whose_own_value_is_bad_is_named_with_its_error_not_a_diff_of_settings():
    per_rank = [{"error": "ValueError: HOROVOD_TORUS_GRID='abc' is not XxY"}, {"grid": "2x2"}, {"grid": "2x2"}]
    with pytest.raises(SettingsMismatchError) as err:
        agree(per_rank[1], rank=1, size=3, comm=FakeComm(per_rank), what="horovod_torus.mpi.TorusComm.create")
    text = str(err.value)
    assert text.startswith("horovod_torus.mpi.TorusComm.create: the ranks were started with different torus "
                           "settings: rank(s) [0] rejected theirs, the other ranks did not")
    assert "rank 0: ValueError: HOROVOD_TORUS_GRID='abc' is not XxY" in text
    assert "None" not in text


def test_differing_settings_name_each_ranks_value_and_the_call():
    per_rank = [{"grid": "2x2"}, {"grid": "4x1"}]
    with pytest.raises(SettingsMismatchError) as err:
        agree(per_rank[0], rank=0, size=2, comm=FakeComm(per_rank))
    assert str(err.value).startswith("horovod_torus.init: the ranks were started with different torus settings")
    assert "grid: rank 0 '2x2', rank 1 '4x1'" in str(err.value)


def test_equal_settings_and_errors_on_every_rank_are_not_a_mismatch():
    assert agree({"grid": "2x2"}, rank=0, size=2, comm=FakeComm([{"grid": "2x2"}] * 2)) == [{"grid": "2x2"}] * 2
    same = [{"error": "ValueError: x"}] * 2  # every rank raises its own (agree_on), no mismatch here
    assert agree(same[0], rank=0, size=2, comm=FakeComm(same)) == same
