"""The per-call check's first step: one MAX all-reduce of the words and their negations (O(1) bytes per
rank) tells whether the ranks agree; only a disagreement gathers the words to name each rank's value."""
import numpy as np
import pytest

from horovod_torus.inprocess import run_ranks
from horovod_torus.phases import allreduce_buffer
from horovod_torus.signature import FIELDS, CallSignature, TorusMismatchError, disagreeing, extremes


def reduce_max(per_rank):
    return np.max(np.stack([extremes(w) for w in per_rank]), axis=0)


def test_extremes_have_a_fixed_size_whatever_the_world():
    words = CallSignature(10, "float32").words(7)
    assert extremes(words).dtype == np.int64 and extremes(words).nbytes == 2 * len(FIELDS) * 8


@pytest.mark.parametrize("n", [2, 4, 16, 3456])
def test_equal_words_agree_and_any_difference_names_its_field(n):
    base = CallSignature(1000, "float32", layout=(("float32", (10, 100)),), op="Average").words(5)
    assert disagreeing(reduce_max([base] * n)) == []
    for field in (0, FIELDS.index("op"), FIELDS.index("name")):
        other = base.copy()
        other[field] -= 1          # one rank lower, the rest equal: min != max for that field only
        words = [base] * (n - 1) + [other]
        assert disagreeing(reduce_max(words)) == [field]


def test_large_and_negative_words_are_compared_exactly():
    a = np.array([2 ** 62, -(2 ** 62), 0xFFFFFFFF], np.int64)
    assert disagreeing(reduce_max([a, a.copy()])) == []
    b = a.copy()
    b[1] += 1
    assert disagreeing(reduce_max([a, b])) == [1]


def test_a_disagreement_still_names_every_rank_on_the_shipped_algorithm():
    def body(t):
        op = "Sum" if t.rank == 3 else "Average"
        return allreduce_buffer(t, np.ones(4), CallSignature(4, "float64", op=op))
    results = run_ranks("2x2", body)
    assert all(isinstance(r, TorusMismatchError) for r in results)
    assert "op: rank 0 Average, rank 1 Average, rank 2 Average, rank 3 Sum" in str(results[0])
