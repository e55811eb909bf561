"""The column algorithm's cost model and per-call choice (horovod_torus.columns), the binomial tree's cost
(horovod_torus.costmodel.binomial_tree_time) and the column code in the call signature. The algorithms
themselves run on mpirun: tests/parallel/test_column_algorithms.py."""
import dataclasses

import numpy as np
import pytest

from horovod_torus.columns import ACROSS_NODES, ON_NODE, ColumnModel, column_bytes, tree_chunks
from horovod_torus.costmodel import Link, binomial_tree_time
from horovod_torus.settings import COLUMN_ALGORITHMS
from horovod_torus.signature import COLUMN_CODES, FIELDS, CallSignature, TorusMismatchError, compare

#: alpha 1 s, 1 B/s, no reduction cost: the times below are counts of messages and bytes, by hand.
UNIT = ColumnModel(step=Link(alpha=1.0, bandwidth=1.0), library=Link(alpha=1.0, bandwidth=0.5), chunk_bytes=4)


@pytest.mark.parametrize("algorithm, ranks, nbytes, seconds", [
    ("ring", 4, 8, 2 * 3 + 2 * 3 / 4 * 8),                    # 2(p-1) a + 2(p-1)/p n b = 18
    ("mpi", 4, 8, 2 * 3 + 2 * 3 / 4 * 8 * 2),                 # a ring at the library's half bandwidth = 30
    ("halving-doubling", 4, 8, 2 * 2 + 2 * 3 / 4 * 8),        # 2 lg p a + 2(p-1)/p n b = 16
    ("halving-doubling", 3, 8, 2 * 1 + 2 * 1 / 2 * 8 + 3 + 2 * 8),  # q = 2, + the fold: 3 a + 2 n b = 29
    ("tree", 3, 8, 2 * (2 * 2 + 2 * 8)),                      # ceil(lg 3) = 2 rounds, 2 pieces of 4 B = 40
    ("tree", 8, 0, 3 * (2 * 1)),                              # 3 rounds, one (empty) piece each way = 6
    ("tree", 1, 100, 0.0), ("ring", 1, 100, 0.0), ("halving-doubling", 1, 100, 0.0),
])
def test_time_counts_messages_and_bytes(algorithm, ranks, nbytes, seconds):
    assert UNIT.time(algorithm, ranks, nbytes) == pytest.approx(seconds)


def test_exchange_efficiency_slows_halving_doubling_only():
    slow = dataclasses.replace(UNIT, exchange_efficiency=0.5)
    assert slow.time("halving-doubling", 4, 8) == pytest.approx(2 * 2 + 2 * 3 / 4 * 8 / 0.5)
    assert [slow.time(a, 4, 8) for a in ("ring", "tree", "mpi")] == [UNIT.time(a, 4, 8) for a in ("ring", "tree", "mpi")]


def test_reduction_cost_is_charged_to_the_point_to_point_algorithms():
    folded = dataclasses.replace(UNIT, gamma=1.0)
    assert folded.time("ring", 4, 8) - UNIT.time("ring", 4, 8) == pytest.approx(3 / 4 * 8)
    assert folded.time("tree", 4, 8) - UNIT.time("tree", 4, 8) == pytest.approx(2 * 8)
    assert folded.time("mpi", 4, 8) == UNIT.time("mpi", 4, 8)  # the library's fitted speed includes its own


def test_choose_takes_the_least_time_and_breaks_ties_in_order():
    assert UNIT.choose(1, 1000) == "mpi"  # every time is 0: the first
    assert UNIT.choose(4, 8) == "halving-doubling"  # 16 < 18 (ring) < 30 (mpi), tree 2(2*2 + 16) = 40
    assert UNIT.choose(5, 0.1) == "tree"  # 6 messages against halving-doubling's 7 and the ring's 8
    assert UNIT.choose(3, 1000) == "ring"  # bandwidth: 4/3 n against 3 n (halving-doubling), 4 n (tree)
    for ranks in range(1, 9):
        for nbytes in (0, 1, 100, 10 ** 4, 10 ** 7):
            times = UNIT.times(ranks, nbytes)
            assert times[UNIT.choose(ranks, nbytes)] == min(times.values())
    fast_library = dataclasses.replace(UNIT, library=Link(alpha=0.1, bandwidth=10.0))
    assert {fast_library.choose(y, n) for y in range(2, 9) for n in (0, 8, 10 ** 6)} == {"mpi"}


def test_defaults_pick_by_layout_and_size():
    """On one node the library's MPI_Allreduce (no Python per step) is the default choice for small shards;
    across nodes (the emulated cluster's numbers) halving-doubling for small shards and the ring for large
    ones on a 4-rank column, the tree for tiny shards on 5-7 ranks."""
    assert {ON_NODE.choose(y, n) for y in range(2, 9) for n in (0, 8, 4096, 1 << 20, 1 << 26)} == {"mpi"}
    assert ACROSS_NODES.choose(4, 1024) == "halving-doubling" and ACROSS_NODES.choose(4, 4 << 20) == "ring"
    assert {ACROSS_NODES.choose(y, 8) for y in (5, 6, 7)} == {"tree"}
    assert ON_NODE.source and ACROSS_NODES.source


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": -1.0}, r"gamma=-1.0 s/B must be >= 0"),
    ({"exchange_efficiency": 0.0}, r"exchange_efficiency=0.0 must be in \(0, 1\]"),
    ({"chunk_bytes": 0}, r"chunk_bytes=0 must be a positive integer"),
])
def test_bad_model_parameters_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(UNIT, **kwargs)


def test_unknown_algorithm_names_the_choices():
    with pytest.raises(ValueError, match="column algorithm 'binary': choose one of mpi, ring, halving-doubling, tree"):
        UNIT.time("binary", 4, 8)


def test_shard_bytes_and_pieces_are_rank_independent():
    assert [column_bytes(n, 4) for n in (0, 1, 4, 10, 4096)] == [0, 1, 1, 3, 1024]
    assert [tree_chunks(n, 4) for n in (0, 1, 4, 5, 9)] == [1, 1, 1, 2, 3]


def test_binomial_tree_time():
    assert binomial_tree_time(1, 10, 1.0, 1.0) == 0.0
    assert binomial_tree_time(2, 10, 1.0, 0.5, 0.25) == pytest.approx(1 * (2 + 10 + 2.5))
    assert binomial_tree_time(5, 10, 1.0, 0.0, chunks=3) == pytest.approx(3 * 2 * 3)  # 3 rounds, 3 pieces
    with pytest.raises(ValueError, match="chunks=0 must be a positive integer"):
        binomial_tree_time(4, 10, 1.0, 1.0, chunks=0)
    with pytest.raises(ValueError, match="p=0"):
        binomial_tree_time(0, 10, 1.0, 1.0)


def test_signature_carries_the_column_algorithm():
    sig = CallSignature(elements=100, dtype="float32")
    word = FIELDS.index("algorithm")
    assert sig.words(3)[word] == 0 and sig.words(3, "")[word] == 0  # torus, no column: as before
    assert [int(sig.words(3, c)[word]) for c in COLUMN_CODES] == [0, 8, 16, 24, 32, 40]
    assert set(COLUMN_CODES) == {"", "hvd.allreduce"} | set(COLUMN_ALGORITHMS)
    flat = CallSignature(elements=100, dtype="float32", algorithm="flat")
    assert int(flat.words(1)[word]) == 1
    gathered = np.stack([sig.words(3, "ring"), sig.words(3, "tree")])
    with pytest.raises(TorusMismatchError, match=r"algorithm: rank 0 torus \(column ring\), rank 1 torus "
                                                 r"\(column tree\)\nthe ranks chose different column algorithms") as info:
        compare(gathered, sig)
    assert info.value.fields == ("algorithm",)
    with pytest.raises(TorusMismatchError, match=r"rank 0 torus \(column ring\), rank 1 flat\nevery rank must pass"):
        compare(np.stack([sig.words(3, "ring"), flat.words(3)]), sig)
