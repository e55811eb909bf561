"""The cluster benchmark's arithmetic: launches, rows, calibration, predictions, target ratios; and the
cost model's NICs per node (rails)."""
import pytest

from tools.cluster.results import (
    add_predictions, fit_link, fit_or_origin, forced_algorithm, format_rows_table, format_targets, label, launches,
    make_cluster, predict_row, ran_column_rules, rows_from_doc, target_ratios, format_train_table, print_train_comparison,
)
from horovod_torus.costmodel import (
    Cluster, Link, cluster_halving_doubling_time, cluster_hierarchical_time, cluster_ring_time, cluster_torus_time,
    predict,
)

MIB = 1024 ** 2
B = 25e6  # 200 Mbit/s per NIC, bytes/s
FAST = Link(0.0, 1e15)  # an intra-node link that costs nothing


def _cluster(nics, alpha=0.0):
    return Cluster(nodes=4, ranks_per_node=2, intra=FAST, inter=Link(alpha, B * nics), nics=nics)


def test_rails_model_bandwidth_terms():
    n = 8 * MIB
    node, rails = _cluster(1), _cluster(2)
    # flat ring: one flow per node boundary, through one NIC in both wirings: 2(p-1)/p n / B
    assert cluster_ring_time(node, n) == pytest.approx(2 * 7 / 8 * n / B)
    assert cluster_ring_time(rails, n) == pytest.approx(2 * 7 / 8 * n / B)
    # torus 2x4, node per row: column rings of n/2; one NIC per node shared by 2 flows, or one rail each
    assert cluster_torus_time(node, "2x4", n) == pytest.approx(2 * 3 / 8 * n * 2 / B)
    assert cluster_torus_time(rails, "2x4", n) == pytest.approx(2 * 3 / 8 * n / B)
    assert cluster_torus_time(node, "2x4", n) / cluster_ring_time(node, n) == pytest.approx(6 / 7)
    assert cluster_torus_time(rails, "2x4", n) / cluster_ring_time(rails, n) == pytest.approx(3 / 7)
    # halving-doubling: the n/2 exchange with r^1 stays inside the node; partners r^2 (n/4) and r^4 (n/8)
    # are on other nodes with the same local rank, so the same rail: the torus' bytes per NIC
    assert cluster_halving_doubling_time(node, n) == pytest.approx(2 * (n / 4 * 2 + n / 8 * 2) / B)
    assert cluster_halving_doubling_time(rails, n) == pytest.approx(2 * (n / 4 + n / 8) / B)
    assert cluster_halving_doubling_time(rails, n) == pytest.approx(cluster_torus_time(rails, "2x4", n))
    # columns in turn (the Horovod-ops torus under mpirun): through a node's one NIC the two columns' bytes
    # take as long one after the other as at once; on rails one rail idles while the other column runs
    for column in ("ring", "halving-doubling", "tree"):
        concurrent = {w: cluster_torus_time(c, "2x4", n, column) for w, c in (("node", node), ("rails", rails))}
        assert cluster_torus_time(node, "2x4", n, column, serial_columns=True) == pytest.approx(concurrent["node"])
        assert cluster_torus_time(rails, "2x4", n, column, serial_columns=True) == pytest.approx(2 * concurrent["rails"])
    # and the latency terms add up: one more column's 2(Y-1) steps of the inter-node alpha (ring column)
    slow = _cluster(1, alpha=1e-3)
    assert (cluster_torus_time(slow, "2x4", n, serial_columns=True) - cluster_torus_time(slow, "2x4", n)
            == pytest.approx(2 * 3 * 1e-3))
    assert cluster_torus_time(rails, "8x1", n, serial_columns=True) == pytest.approx(cluster_torus_time(rails, "8x1", n))
    # hierarchical: the leaders' ring uses one NIC per node
    assert cluster_hierarchical_time(rails, n) == pytest.approx(2 * 3 / 4 * n / B)
    assert cluster_hierarchical_time(node, n) == pytest.approx(2 * 3 / 4 * n / B)


def test_nics_validation_and_arrivals_count():
    with pytest.raises(ValueError, match="nics=0"):
        Cluster(nodes=2, ranks_per_node=2, intra=FAST, inter=FAST, nics=0)
    # cross-rail ring in a rails cluster of 2 nodes x 2: every step has one flow per NIC pair at most
    c = Cluster(nodes=2, ranks_per_node=2, intra=FAST, inter=Link(0.0, 2 * B), nics=2)
    assert cluster_ring_time(c, 4 * MIB) == pytest.approx(2 * 3 / 4 * 4 * MIB / B)
    assert predict(c, MIB).natural_grid is not None


def test_launches_and_rows():
    ls = launches(("ring", "rabenseifner"))
    assert [l.label for l in ls] == ["mpirun", "mpi-ring", "mpi-rabenseifner", "gloo"]
    assert ls[0].strategies == ("torus", "torus:mpi", "ring", "mpi-torus", "mpi")
    assert ls[0].bench_args == ("--torus-backend", "horovod")
    assert ls[1].mca == (("coll_tuned_use_dynamic_rules", "1"), ("coll_tuned_allreduce_algorithm", "4"))
    assert ls[1].strategies == ("torus", "torus:mpi", "ring", "mpi-torus", "mpi")  # everything again under the ring
    assert ls[2].mca[1] == ("coll_tuned_allreduce_algorithm", "6") and ls[2].strategies == ("mpi",)
    assert [forced_algorithm(l) for l in ls] == [None, "ring", "rabenseifner", None]
    assert ls[3].launcher == "horovodrun" and ls[3].strategies == ("torus", "ring")
    with pytest.raises(ValueError, match="'fastest' is unknown"):
        launches(("fastest",))
    doc = {"rows": [{"strategy": "mpi", "size_bytes": MIB, "time_us": {"min": 1e5, "avg": 2e5, "max": 3e5},
                     "wrong": 0}]}
    rows = rows_from_doc(doc, "rails", ls[1])  # a file from before the algorithm fields
    assert rows == [{"wiring": "rails", "strategy": "mpi-ring", "launcher": "mpirun", "ompi_allreduce": "ring",
                     "size_bytes": MIB, "repeat": 0,
                     "time_s": pytest.approx(0.3), "rank_avg_s": pytest.approx(0.2), "rank_min_s": pytest.approx(0.1),
                     "algorithm": None, "column": None, "wrong": 0, "column_rules": False}]
    doc["rows"].append({"strategy": "torus", "size_bytes": MIB, "time_us": {"min": 1e5, "avg": 2e5, "max": 4e5},
                        "wrong": 0, "algorithm": "torus", "column": "ring"})
    rows = rows_from_doc(doc, "rails", ls[3], repeat=2)
    assert [(r["strategy"], r["launcher"], r["ompi_allreduce"], r["repeat"], r["algorithm"], r["column"]) for r in rows] \
        == [("mpi", "horovodrun", None, 2, None, None), ("torus", "horovodrun", None, 2, "torus", "ring")]
    assert rows[1]["time_s"] == pytest.approx(0.4)


def _ring_rows(alpha, bw, p=8, wiring="node"):
    return [{"wiring": wiring, "strategy": "mpi-ring", "launcher": "mpirun", "size_bytes": n,
             "time_s": 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bw} for n in (MIB, 4 * MIB, 16 * MIB)]


def test_fit_link_recovers_alpha_and_bandwidth():
    link, rms = fit_link(_ring_rows(2e-3, 23e6), 8)
    assert link.alpha == pytest.approx(2e-3, rel=1e-6) and link.bandwidth == pytest.approx(23e6, rel=1e-6)
    assert rms < 1e-9
    # noise that makes beta negative falls back to a bandwidth-only fit through the origin
    link, _ = fit_or_origin([MIB, 2 * MIB], [0.5, 0.2], 2.0, 1.0)
    assert link.alpha == 0.0 and link.bandwidth == pytest.approx((1 + 4) * MIB ** 2 / (0.5 * MIB + 0.4 * MIB))


def test_the_horovod_ops_torus_column_follows_the_open_mpi_rules_file():
    """Under mpirun the Horovod-ops torus' column is Open MPI's MPI_Allreduce: its default (halving-doubling)
    unless the launch ran under the package's rules file, which gives a column of 2 .. N-1 ranks the ring
    from 256 KiB per shard; a forced algorithm (the user's variables) wins over the file."""
    nic = Link(0.0, B)
    rails = make_cluster(4, 2, 2, FAST, nic, "rails", exchange_efficiency=0.5)  # HD's exchanges at half speed
    n = 8 * MIB
    ring = predict_row(rails, "torus:mpi", "mpirun", n, "2x4")[1]
    hd = predict_row(rails, "torus", "mpirun", n, "2x4")
    assert hd[0] == "torus 2x4, columns in turn, halving-doubling column" and hd[1] != pytest.approx(ring)
    ruled = predict_row(rails, "torus", "mpirun", n, "2x4", "default", column_rules=True)
    # Horovod's one background thread runs the two columns in turn: on rails each alone on its rail
    assert ruled == ("torus 2x4, columns in turn, ring column (Open MPI rule)", pytest.approx(2 * ring))
    # a shard below 256 KiB (512 KiB on a row of 2: 256 KiB shards ring, 511 KiB do not)
    assert predict_row(rails, "torus", "mpirun", 512 * 1024 - 8, "2x4", "default", True)[0].endswith("halving-doubling column")
    assert predict_row(rails, "torus", "mpirun", 512 * 1024, "2x4", "default", True)[0].endswith("(Open MPI rule)")
    # a forced algorithm is the user's: the file yields to it
    assert predict_row(rails, "torus", "mpirun", n, "2x4", "rabenseifner", True)[0].endswith("halving-doubling column")
    # a column of the whole world (grid 1x8) is the world's default, which the file keeps
    assert predict_row(rails, "torus", "mpirun", n, "1x8", "default", True)[0].endswith("halving-doubling column")
    doc = {"host": {"ompi_rules": "/tmp/horovod_torus_ompi_rules-0/allreduce-x.rules"}, "rows": []}
    assert ran_column_rules(doc, launches()[0]) and not ran_column_rules(doc, launches()[-1])
    assert not ran_column_rules({"host": {"ompi_rules": "none: fewer than 3 ranks"}}, launches()[0])
    assert not ran_column_rules({"rows": []}, launches()[0])


def test_predictions_and_targets():
    nic = Link(0.0, B)
    clusters = {w: make_cluster(4, 2, nics, FAST, nic, w) for w, nics in (("node", 1), ("rails", 2))}
    assert clusters["rails"].inter.bandwidth == 2 * B and clusters["rails"].nics == 2
    n = 8 * MIB
    assert predict_row(clusters["rails"], "torus", "horovodrun", n, "2x4") == ("torus 2x4", pytest.approx(0.75 * n / B))
    assert predict_row(clusters["rails"], "ring", "horovodrun", n, "2x4") == ("ring", pytest.approx(1.75 * n / B))
    assert predict_row(clusters["rails"], "mpi", "mpirun", n, "2x4")[0] == "halving-doubling"
    with pytest.raises(ValueError, match="no model for strategy 'mpi-basic_linear'"):
        predict_row(clusters["rails"], "mpi-basic_linear", "mpirun", n, "2x4")
    # forced ring: Horovod's ring under mpirun is then Open MPI's ring
    assert predict_row(clusters["rails"], "ring", "mpirun", n, "2x4", "ring")[0] == "ring"
    measured = {("torus", "horovodrun", None): 0.4, ("ring", "horovodrun", None): 1.0,
                ("mpi-torus", "mpirun", "default"): 0.5, ("mpi", "mpirun", "default"): 0.9,
                ("mpi-ring", "mpirun", "ring"): 0.8, ("mpi-torus", "mpirun", "ring"): 0.44}
    rows = [{"wiring": "rails", "strategy": s, "launcher": l, "ompi_allreduce": o, "size_bytes": n, "time_s": t}
            for (s, l, o), t in measured.items()]
    rows = add_predictions(rows, clusters, "2x4", ("node", "mpi-ring", "mpirun"))
    assert not any(r["calibration"] for r in rows)
    assert [label(r) for r in rows] == ["torus (gloo)", "ring (gloo)", "mpi-torus (mpirun)", "mpi (mpirun)",
                                        "mpi-ring (mpirun)", "mpi-torus (mpirun, ring)"]
    targets = {t["comparison"]: t for t in target_ratios(rows, "rails", sizes=(n,))}
    tr = targets["torus (gloo) / ring (gloo)"]
    assert tr["ratio"] == pytest.approx(0.4) and tr["ok"]
    best = targets["mpi-torus (mpirun) / MPI best (mpi-ring (mpirun))"]
    assert best["ratio"] == pytest.approx(0.5 / 0.8) and best["ok"] and best["target"] == "<= 1"
    forced = targets["mpi-torus (mpirun, ring) / MPI best (mpi-ring (mpirun))"]
    assert forced["ratio"] == pytest.approx(0.44 / 0.8) and forced["ok"]
    pm = targets["predicted / measured: ring (gloo)"]
    assert pm["ratio"] == pytest.approx(1.75 * n / B / 1.0) and pm["ok"] == (0.75 <= pm["ratio"] <= 1.33)
    assert not any(k.startswith("torus (mpirun)") for k in targets)  # no rows: left out
    # the TF torus on the MPI transport, against Horovod's ring under mpirun (Open MPI's default)
    extra = [{"wiring": "rails", "strategy": s, "launcher": "mpirun", "ompi_allreduce": "default", "size_bytes": n,
              "time_s": t} for s, t in (("torus:mpi", 0.3), ("ring", 0.6))]
    more = {t["comparison"]: t for t in target_ratios(rows + extra, "rails", sizes=(n,))}
    assert more["torus:mpi (mpirun) / ring (mpirun)"]["ratio"] == pytest.approx(0.5)
    assert not more["torus:mpi (mpirun) / ring (mpirun)"]["ok"]  # rows without the algorithm that ran
    extra[0]["algorithm"] = "torus"
    more = {t["comparison"]: t for t in target_ratios(rows + extra, "rails", sizes=(n,))}
    assert more["torus:mpi (mpirun) / ring (mpirun)"]["ok"]
    assert predict_row(clusters["rails"], "torus:mpi", "mpirun", n, "2x4")[0] == "torus 2x4"
    md = format_targets(target_ratios(rows, "rails", sizes=(n,)))
    assert md.splitlines()[2] == "| torus (gloo) / ring (gloo) | 8 MiB | 0.40 | 1 | - | <= 0.6 | yes |"
    table = format_rows_table(rows, "rails").splitlines()
    assert table[0].startswith("| size | torus (gloo) | ring (gloo) | mpi-torus (mpirun) | mpi (mpirun)")
    assert table[2].startswith("| 8 MiB | 0.400 (")


def _train_doc(strategy, step, sync, ips):
    return {"strategy": strategy, "step_time_s": {"avg": step}, "sync_time_s": {"avg": sync},
            "sync_share": sync / step, "images_per_s": ips, "global_batch": 16}


def test_train_table_and_comparison(tmp_path, capsys):
    import json

    torus, ring = _train_doc("torus", 5.0, 4.0, 3.2), _train_doc("ring", 8.0, 6.0, 2.0)
    table = format_train_table({"mpirun, torus": torus, "mpirun, ring": {"result": ring}})
    assert table.splitlines()[2] == "| mpirun, torus | torus | 5.00 | 4.00 | 80% | 3.20 (16) |"
    assert table.splitlines()[3] == "| mpirun, ring | ring | 8.00 | 6.00 | 75% | 2.00 (16) |"
    for name, doc in (("torus", torus), ("ring", ring)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    print_train_comparison(str(tmp_path))
    assert capsys.readouterr().out.splitlines()[-1] == "torus / ring: images/s 1.60x, sync time 0.67"
