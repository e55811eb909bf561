"""The alpha-beta cost model against hand-computed values, the planner's choice, and the calibration."""
import dataclasses

import numpy as np
import pytest

from horovod_torus.costmodel import (
    PRESETS, Cluster, Link, calibrate, cluster_halving_doubling_time, cluster_hierarchical_time,
    cluster_ring_time, cluster_torus_time, fit_alpha_beta, halving_doubling_time, hierarchical_time,
    model_coefficients, predict, ring_time, torus_grids, torus_time,
)
from horovod_torus.topology import TorusTopology

# 2 nodes x 4 ranks; intra 1 us, 10 GB/s (beta 1e-10 s/B); inter 10 us, 1 GB/s per node (beta 1e-9 s/B)
C = Cluster(nodes=2, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9))
N = 8e6


def test_textbook_formulas_by_hand():
    assert ring_time(4, 1e6, 1e-6, 1e-9) == pytest.approx(6e-6 + 1.5e-3)
    assert ring_time(4, 1e6, 0, 0, gamma=1e-9) == pytest.approx(0.75e-3)
    assert halving_doubling_time(8, 1e6, 1e-6, 1e-9) == pytest.approx(6e-6 + 1.75e-3)
    # p = 6: the 2^2 = 4 core plus the fold-in/fold-out of the 2 extra ranks
    assert halving_doubling_time(6, 1e6, 1e-6, 1e-9) == pytest.approx(4e-6 + 1.5e-3 + 3e-6 + 2e-3)
    assert torus_time(4, 2, 8e6, 1e-6, 1e-9, 1e-5, 1e-8) == pytest.approx(6e-6 + 12e-3 + 2e-5 + 20e-3)
    assert hierarchical_time(2, 4, N, C.intra, C.inter) == pytest.approx(2 * (6e-6 + 1.2e-3) + 2e-5 + 8e-3)


def test_degenerate_grids_and_single_rank():
    for p in (1, 2, 5, 8):
        assert torus_time(1, p, N, 9.0, 9.0, 1e-6, 1e-9) == pytest.approx(ring_time(p, N, 1e-6, 1e-9))
        assert torus_time(p, 1, N, 1e-6, 1e-9, 9.0, 9.0) == pytest.approx(ring_time(p, N, 1e-6, 1e-9))
    assert ring_time(1, N, 1.0, 1.0, 1.0) == 0.0
    assert halving_doubling_time(1, N, 1.0, 1.0, 1.0) == 0.0
    assert torus_time(1, 1, N, 1.0, 1.0, 1.0, 1.0) == 0.0
    single = Cluster(nodes=1, ranks_per_node=1, intra=Link(1.0, 1.0), inter=Link(1.0, 1.0), gamma=1.0)
    pred = predict(single, N)
    assert pred.times == {"ring": 0.0, "halving-doubling": 0.0, "hierarchical": 0.0, "torus": 0.0}
    assert pred.best_grid == TorusTopology(1, 1) and pred.natural_grid is None
    with pytest.raises(ValueError, match="p=0"):
        ring_time(0, N, 1.0, 1.0)


def test_cluster_costs_by_hand():
    # flat ring: every step crosses a node boundary (one flow per node): inter alpha and beta
    assert cluster_ring_time(C, N) == pytest.approx(14e-5 + 2 * 7 / 8 * N * 1e-9)
    # 4x2: rows inside a node; 4 column rings leave each node at once and share its 1 GB/s
    assert cluster_torus_time(C, "4x2", N) == pytest.approx(6e-6 + 1.2e-3 + 2e-5 + 2 / 8 * N * 4e-9)
    # 2x4: columns {0,2,4,6} and {1,3,5,7} mix intra and inter hops, 2 flows leave each node
    assert cluster_torus_time(C, "2x4", N) == pytest.approx(2e-6 + 8e-4 + 6e-5 + 2 * 3 / 8 * N * 2e-9)
    # degenerate grids are the flat ring
    assert cluster_torus_time(C, "8x1", N) == pytest.approx(cluster_ring_time(C, N))
    assert cluster_torus_time(C, "1x8", N) == pytest.approx(cluster_ring_time(C, N))
    assert cluster_hierarchical_time(C, N) == pytest.approx(2 * (6e-6 + 1.2e-3) + 2e-5 + 8e-3)
    # halving-doubling (Rabenseifner as MPICH/Open MPI run it): d=1 (n/2 bytes) and d=2 (n/4) stay inside a
    # node, d=4 (n/8) crosses with 4 flows per node
    hd = 2 * (1e-6 + N / 2 * 1e-10) + 2 * (1e-6 + N / 4 * 1e-10) + 2 * (1e-5 + N / 8 * 4e-9)
    assert cluster_halving_doubling_time(C, N) == pytest.approx(hd)
    # an exchange at half the link rate doubles the inter-node beta of those steps only
    half = Cluster(nodes=2, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9), exchange_efficiency=0.5)
    assert cluster_halving_doubling_time(half, N) == pytest.approx(hd + 2 * N / 8 * 4e-9)
    assert cluster_ring_time(half, N) == pytest.approx(cluster_ring_time(C, N))  # one direction per pair
    # the torus with an MPI library's halving-doubling in the column: 4x2 columns {0,4}, {1,5}, ...: one
    # exchange of n/4 / 2 bytes between the nodes, 4 flows per node
    rows = 2 * 3 * 1e-6 + 2 * 3 / 4 * N * 1e-10
    assert cluster_torus_time(C, "4x2", N, column="halving-doubling") == pytest.approx(
        rows + 2 * (1e-5 + N / 4 / 2 * 4e-9))
    assert cluster_torus_time(half, "4x2", N, column="halving-doubling") == pytest.approx(
        rows + 2 * (1e-5 + N / 4 / 2 * 8e-9))
    with pytest.raises(ValueError, match="'ring' or 'halving-doubling'"):
        cluster_torus_time(C, "4x2", N, column="tree")
    with pytest.raises(ValueError, match=r"exchange_efficiency=1.5 must be in \(0, 1\]"):
        Cluster(nodes=2, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9), exchange_efficiency=1.5)
    with pytest.raises(ValueError, match="world size is 8"):
        cluster_torus_time(C, "3x3", N)


def test_single_node_reduces_to_textbook():
    one = Cluster(nodes=1, ranks_per_node=4, intra=Link(2e-6, 5e9), inter=Link(1.0, 1.0), gamma=1e-12)
    assert cluster_ring_time(one, N) == pytest.approx(ring_time(4, N, 2e-6, 2e-10, 1e-12))
    assert cluster_halving_doubling_time(one, N) == pytest.approx(halving_doubling_time(4, N, 2e-6, 2e-10, 1e-12))
    six = dataclasses.replace(one, ranks_per_node=6)  # the neighbour fold of 2 extra ranks, then 4
    assert cluster_halving_doubling_time(six, N) == pytest.approx(halving_doubling_time(6, N, 2e-6, 2e-10, 1e-12))
    # 3 nodes x 2: ranks 0-3 fold inside nodes 0 and 1 (neighbours), the active 0, 2, 4, 5 then exchange
    # n/2 at distance 1 (0<->2 across nodes, 4<->5 inside node 2) and n/4 at distance 2 (0<->4 and 2<->5:
    # node 2 sends and receives 2 flows on its one NIC); the fold inside the nodes is (almost) free
    three = Cluster(nodes=3, ranks_per_node=2, intra=Link(0.0, 1e15), inter=Link(0.0, 1e9))
    assert cluster_halving_doubling_time(three, N) == pytest.approx(2 * (N / 2 * 1e-9) + 2 * (N / 4 * 2e-9))
    assert cluster_torus_time(one, "2x2", N) == pytest.approx(torus_time(2, 2, N, 2e-6, 2e-10, 2e-6, 2e-10, 1e-12))


def test_planner_choice_on_a_known_case():
    assert [str(g) for g in torus_grids(8)] == ["1x8", "2x4", "4x2", "8x1"]
    # 2 nodes: Rabenseifner's exchanges at distance 1 and 2 stay inside a node, and only n/8 crosses: as
    # the torus' bytes with fewer messages, so halving-doubling wins
    pred = predict(C, N)
    assert pred.best_grid == TorusTopology(4, 2) == pred.natural_grid  # a node per row
    assert pred.recommended == "halving-doubling"
    assert pred.times["torus"] == pytest.approx(cluster_torus_time(C, "4x2", N))
    # 3 nodes (12 ranks, not a power of two): the 4 extra ranks fold their whole buffer across nodes
    c3 = dataclasses.replace(C, nodes=3)
    pred = predict(c3, N)
    assert pred.best_grid == TorusTopology(4, 3) == pred.natural_grid
    assert pred.recommended == "torus"
    assert pred.times["torus"] < pred.times["hierarchical"] < pred.times["ring"] < pred.times["halving-doubling"]
    # with a free network (inter as fast as intra) nothing beats the single-link optimum ordering:
    flat = dataclasses.replace(C, inter=C.intra)
    assert predict(flat, 1.0).recommended == "halving-doubling"  # latency-bound: 2 lg p < 2(X-1)+2(Y-1)


def test_abci_preset_prefers_torus_for_resnet50():
    c = PRESETS["abci"]  # 544 nodes x 4 V100
    pred = predict(c, 25_583_592 * 4)
    assert pred.recommended == "torus"
    assert pred.times["torus"] < pred.times["ring"] and pred.natural_time < pred.times["ring"]


@pytest.mark.parametrize("strategy,grid", [("mpi", None), ("ring", None), ("torus", "2x2"), ("mpi-torus", "4x1")])
def test_calibration_recovers_alpha_beta_within_5_percent(strategy, grid):
    alpha, bw = 7e-6, 2.5e9
    a, b = model_coefficients(strategy, 4, grid)
    sizes = [4 * 4 ** k for k in range(14)]
    rng = np.random.default_rng(0)
    noise = rng.uniform(-0.03, 0.03, len(sizes))  # +-3 % measurement noise
    times = [(a * alpha + b * n / bw) * (1 + e) for n, e in zip(sizes, noise)]
    doc = {"world_size": 4, "grid": grid, "rows": [
        {"strategy": strategy, "size_bytes": n, "time_us": {"avg": t * 1e6}} for n, t in zip(sizes, times)]
        + [{"strategy": "other", "size_bytes": 4, "time_us": {"avg": 1.0}}]}
    link, rms = calibrate(doc, strategy)
    assert link.alpha == pytest.approx(alpha, rel=0.05)
    assert link.bandwidth == pytest.approx(bw, rel=0.05)
    assert rms < 0.03
    exact, rms0 = fit_alpha_beta(sizes, [a * alpha + b * n / bw for n in sizes], a, b)
    assert exact.alpha == pytest.approx(alpha, rel=1e-9) and rms0 < 1e-9


def test_calibration_errors():
    with pytest.raises(ValueError, match="no rows for strategy 'ring'"):
        calibrate({"world_size": 4, "grid": "2x2", "rows": [{"strategy": "mpi", "size_bytes": 4,
                                                              "time_us": {"avg": 1}}]}, "ring")
    with pytest.raises(ValueError, match="at least 2 distinct"):
        fit_alpha_beta([4, 4], [1e-5, 1e-5], 6, 1.5)
    with pytest.raises(ValueError, match="1 rank"):
        model_coefficients("mpi", 1)
    assert model_coefficients("torus", 8, "4x2") == (8.0, 2 * 3 / 4 + 2 / 8)
