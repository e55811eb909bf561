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


def _rows(*signatures, column=""):
    return np.stack([s.words(1, column) for s in signatures])


def test_the_numpy_ops_are_named_in_a_mismatch():
    from horovod_torus.signature import compare

    sigs = [CallSignature(4, "float32", (("float32", (4,)),), op=op) for op in ("Sum", "Sum", "Max", "Product")]
    with pytest.raises(TorusMismatchError) as err:
        compare(_rows(*sigs))
    assert "op: rank 0 Sum, rank 1 Sum, rank 2 Max, rank 3 Product" in str(err.value)
    assert err.value.fields == ("op",)


def test_gathered_layouts_name_each_ranks_shapes_instead_of_their_crc():
    from horovod_torus.signature import compare

    a = CallSignature(6, "float32", (("float32", (2, 3)),))
    b = CallSignature(6, "float32", (("float32", (3, 2)),))
    with pytest.raises(TorusMismatchError) as err:
        compare(_rows(a, b), a, layouts=[a.layout, b.layout])
    assert "shapes: rank 0 [(float32, (2, 3))], rank 1 [(float32, (3, 2))]" in str(err.value)
    with pytest.raises(TorusMismatchError) as err:  # without them: the CRCs, as before
        compare(_rows(a, b), a)
    assert "shapes: rank 0 crc " in str(err.value)
    many = CallSignature(10, "float32", tuple(("float32", (1,)) for _ in range(10)))
    with pytest.raises(TorusMismatchError) as err:
        compare(_rows(many, a), many, layouts=[many.layout, a.layout])
    assert "... 10 tensors]" in str(err.value)


def test_a_transport_disagreement_says_so_not_column_algorithms():
    from horovod_torus.signature import compare

    sig = CallSignature(8, "float32", (("float32", (8,)),))
    rows = np.stack([sig.words(1, "hvd.allreduce"), sig.words(1, "mpi")])
    with pytest.raises(TorusMismatchError) as err:
        compare(rows)
    assert "different transports" in str(err.value) and "column_algorithm" not in str(err.value)
    rows = np.stack([sig.words(1, "ring"), sig.words(1, "mpi")])  # same transport, another column algorithm
    with pytest.raises(TorusMismatchError) as err:
        compare(rows)
    assert "different column algorithms" in str(err.value)
