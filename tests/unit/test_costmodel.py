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
    with pytest.raises(ValueError, match="'ring', 'halving-doubling' or 'tree'"):
        cluster_torus_time(C, "4x2", N, column="binomial")
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


# ------------------------------------------------------------------ trees, per-call cost, ranking (issue 23)
from horovod_torus import costmodel  # noqa: E402
from horovod_torus.costmodel import (  # noqa: E402
    CHECK_BYTES, FITTED_CALL_S, CallCost, call_counts, check_time, cluster_allgather_time,
    cluster_recursive_doubling_time, cluster_tree_time, coordination_time, fit_call_s, init_time,
    nccl_ring_latency, per_call_time, rank_algorithms, recursive_doubling_time, transfer_time, tree_time,
)

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_tree_and_recursive_doubling_by_hand():
    # double binary tree: 2 floor(lg p) alpha + 2 n beta + n gamma (NCCL: log2i, bus/alg ratio 1/2)
    assert tree_time(8, 1e6, 1e-6, 1e-9) == pytest.approx(6e-6 + 2e-3)
    assert tree_time(6, 1e6, 1e-6, 1e-9) == pytest.approx(4e-6 + 2e-3)  # floor(lg 6) = 2
    assert tree_time(2, 1e6, 1e-6, 1e-9, gamma=1e-9) == pytest.approx(2e-6 + 2e-3 + 1e-3)
    assert tree_time(1, 1e6, 1.0, 1.0, 1.0) == 0.0
    # recursive doubling: lg p steps of the whole message; 6 ranks: 4 + a fold in and out
    assert recursive_doubling_time(8, 160, 1e-6, 1e-9) == pytest.approx(3 * (1e-6 + 160e-9))
    assert recursive_doubling_time(6, 160, 1e-6, 1e-9, gamma=1e-9) == pytest.approx(4 * (1e-6 + 160e-9) + 3 * 160e-9)
    assert recursive_doubling_time(1, 160, 1.0, 1.0) == 0.0


def test_cluster_tree_by_hand():
    # C: 2 nodes x 4. A chain of 3 NVLink-like hops inside each node, a tree of depth 1 over the 2 nodes, up
    # and down; node 0 sends 2n through its one NIC (1 GB/s); the chain's 2n at 10 GB/s is hidden under it
    assert cluster_tree_time(C, N) == pytest.approx(2 * (3e-6 + 1e-5) + 2 * N * 1e-9)
    # one rank per node: the textbook tree on the inter-node link
    flat = Cluster(nodes=8, ranks_per_node=1, intra=Link(1.0, 1.0), inter=Link(1e-5, 1e9), gamma=1e-12)
    assert cluster_tree_time(flat, N) == pytest.approx(tree_time(8, N, 1e-5, 1e-9, 1e-12))
    # rails: 4 NICs of 0.25 GB/s, the 4 ranks' channels one per NIC: the same node bandwidth
    rails = dataclasses.replace(C, nics=4)
    assert cluster_tree_time(rails, N) == pytest.approx(cluster_tree_time(C, N))
    # the torus' tree column on 4x2: rows as before; 4 column trees of n/4 leave each node at once (2n in all)
    rows = 2 * 3 * 1e-6 + 2 * 3 / 4 * N * 1e-10
    assert cluster_torus_time(C, "4x2", N, column="tree") == pytest.approx(rows + 2 * 1e-5 + 2 * N * 1e-9)
    assert transfer_time(C, "torus-tree", N, "4x2") == cluster_torus_time(C, "4x2", N, column="tree")
    # the recursive doubling of the check on C: d=1, 2 inside a node, d=4 across with 4 flows on one NIC
    assert cluster_recursive_doubling_time(C, 160) == pytest.approx(2 * (1e-6 + 160e-10) + 1e-5 + 160 * 4e-9)
    assert check_time(C) == cluster_recursive_doubling_time(C, CHECK_BYTES) and CHECK_BYTES == 160
    # the all-gather of 8 B per rank: 8, 16 B inside the node, 32 B across
    assert cluster_allgather_time(C, 8) == pytest.approx(1e-6 + 8e-10 + 1e-6 + 16e-10 + 1e-5 + 32 * 4e-9)
    # NCCL's ring latency: 2(N-1) = 2 inter-node hops, the other 12 of 2(p-1) = 14 inside nodes
    assert nccl_ring_latency(C) == pytest.approx(12e-6 + 2e-5)


def test_per_call_term_by_hand():
    cost = CallCost(call_s=1e-4, cycle_s=1e-3)
    coord = 2 * (1e-6 + 8e-10) + 1e-5 + 8 * 4e-9  # 8 B over the 8 ranks of C, as the check above
    assert coordination_time(C) == pytest.approx(coord)
    rows_cols = 2 * (1e-6 + 8e-10) + (1e-5 + 8 * 4e-9)  # rows of 4 inside a node, columns of 2 across
    assert coordination_time(C, "4x2") == pytest.approx(coord + rows_cols)
    check = check_time(C)
    # Horovod: one op per flat call; the torus' check + 3 phases = 4 ops, each a cycle, the three sets coordinating
    assert per_call_time(C, "ring", transport="horovod", cost=cost) == pytest.approx(1e-4 + 1e-3 + coord)
    assert per_call_time(C, "torus", "4x2", "horovod", cost) == pytest.approx(
        4 * (1e-4 + 1e-3 + coord + rows_cols) + check)
    assert per_call_time(C, "hierarchical", transport="horovod", cost=cost) == pytest.approx(3e-4 + 1e-3 + coord)
    # straight library calls: no cycles
    assert per_call_time(C, "tree", transport="library", cost=cost) == pytest.approx(1e-4)
    assert per_call_time(C, "torus-tree", "4x2", "library", cost) == pytest.approx(4e-4 + check)
    assert per_call_time(C, "hierarchical", transport="library", cost=cost) == pytest.approx(3e-4)
    # a phase over one rank is skipped: 1x8 is the check + the column, 8x1 the check + the two row phases
    assert call_counts("torus", "1x8") == (2, 0) and call_counts("torus", "8x1") == (3, 0)
    assert call_counts("torus-hd", "4x2", "library") == (0, 4) and call_counts("ring") == (1, 0)
    with pytest.raises(ValueError, match="transport='gloo'"):
        call_counts("ring", transport="gloo")
    with pytest.raises(ValueError, match="algorithm='binomial': choose one of ring, tree"):
        call_counts("binomial")
    with pytest.raises(ValueError, match=r"call_s=-1 s must be >= 0 \(e.g. --call-overhead-us 10\)"):
        CallCost(call_s=-1)


def test_per_call_term_fitted_from_one_row_and_checked_on_another():
    """FITTED_CALL_S is ONE row (hvd.allreduce, 4 KB, cycle 1 ms) less a cycle and the transfer on the host's
    calibrated intra-node link; the row at 10 ms cycles is then predicted within 1 %."""
    import json

    # the calibration the constant was fitted with (the cluster bench of 2026-11-30)
    calib = json.loads((ROOT / "tests" / "unit" / "data" / "cluster_bench_one_launch.json").read_text())["calibration"]
    host = Cluster(nodes=1, ranks_per_node=4, intra=Link(calib["intra_alpha_s"], calib["intra_bandwidth_Bps"]),
                   inter=Link(0.0, 1e9))

    def ring_4k(name):
        doc = json.loads((ROOT / "docs" / name).read_text())
        assert doc["world_size"] == 4 and doc["host"]["nodes"] == 1
        return next(r for r in doc["rows"] if r["strategy"] == "ring" and r["size_bytes"] == 4096)["time_us"]["avg"] * 1e-6

    fitted = fit_call_s(ring_4k("bench_targets-small.json"), host, 4096)
    assert FITTED_CALL_S == pytest.approx(fitted, abs=0.05e-6)
    predicted = 10e-3 + FITTED_CALL_S + coordination_time(host) + cluster_ring_time(host, 4096)
    assert predicted == pytest.approx(ring_4k("bench_targets-cycle10-small.json"), rel=0.01)
    # round trip, and a time below one cycle has nothing to fit
    t = 1e-3 + 5e-5 + coordination_time(C) + cluster_ring_time(C, N)
    assert fit_call_s(t, C, N) == pytest.approx(5e-5)
    with pytest.raises(ValueError, match="nothing left to fit"):
        fit_call_s(5e-4, C, 8)


def test_check_cost_at_the_papers_scales_is_the_docstrings():
    for name, ranks in (("abci-v1", 2176), ("abci-v2", 3456)):
        c = PRESETS[name]
        assert c.size == ranks
        t = check_time(c)
        # 2,048 + a fold: 13 latency-bound steps, 3 inside a node and 10 across (160 B: the bytes hardly count)
        assert t == pytest.approx(3 * c.intra.alpha + 10 * c.inter.alpha, rel=5e-3)
        assert f"{t * 1e3:.3f} ms at {ranks:,}" in " ".join(costmodel.__doc__.split())  # the figure given once


def test_ranking_on_a_toy_cluster_tree_small_torus_large():
    # 16 nodes x 4, one NIC per rank on its own rail (as the emulated cluster's rails wiring)
    toy = Cluster(nodes=16, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9), name="toy", nics=4)
    small = rank_algorithms(toy, 8.0)
    order = [e.algorithm for e in small]
    assert order.index("tree") < order.index("ring")
    by = {(e.algorithm, str(e.grid)): e for e in small}
    # latency: 2*63 inter-node steps against 2*(3 + 4) steps; the same one Horovod op each
    assert by["ring", "None"].transfer_s / by["tree", "None"].transfer_s > 10
    assert by["ring", "None"].overhead_s == by["tree", "None"].overhead_s
    large = rank_algorithms(toy, 64 * 2 ** 20)
    by = {(e.algorithm, str(e.grid)): e for e in large}
    # a node per row: the 4 column rings on 4 rails, against the flat ring's one flow per node on one NIC
    assert by["torus", "4x16"].total_s < by["ring", "None"].total_s / 2
    for ranked in (small, large):
        totals = [e.total_s for e in ranked]
        assert totals == sorted(totals) and ranked[0].ratio == 1.0
        for e in ranked:
            assert e.ratio == pytest.approx(e.total_s / totals[0])
            assert e.total_s == pytest.approx(e.transfer_s + e.overhead_s)
            assert e.latency_s == pytest.approx(transfer_time(toy, e.algorithm, 0.0, e.grid))
            assert e.overhead_s == pytest.approx(per_call_time(toy, e.algorithm, e.grid))
        # each torus variant on its best non-degenerate grid, and on the node-per-row grid 4x16
        for a in ("torus", "torus-tree", "torus-hd"):
            grids = [e.grid for e in ranked if e.algorithm == a]
            assert TorusTopology(4, 16) in grids and all(g.x > 1 and g.y > 1 for g in grids)


def test_init_estimate_counts_the_process_sets():
    cost = init_time(C, "4x2", 150)
    assert cost.sets == 2 + 4  # Y rows + X columns
    one = cluster_allgather_time(C, 4) + cluster_recursive_doubling_time(C, 4)
    expected = (2 * (one + 2 * cluster_recursive_doubling_time(C, 16))
                + 4 * (one + 2 * cluster_recursive_doubling_time(C, 8)))
    assert cost.registration_s == pytest.approx(expected)
    assert cost.agreement_s == pytest.approx(cluster_allgather_time(C, 150))
    assert cost.total_s == pytest.approx(expected + cost.agreement_s)
    assert init_time(C, "8x1", 150).sets == 0  # the row is the global set: nothing registered
    assert init_time(C, "4x2", 150, "library").sets == 3  # Dup + 2 Splits
