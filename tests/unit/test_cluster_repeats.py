"""The cluster benchmark over repeated launches: median and min-max over launches, the algorithm that ran,
per-launch ratio ranges, the planner's pass counts, the launch plan and raw files, the time estimate, and
the results page on the old and the new bench.json."""
import dataclasses
import json
import pathlib
import shutil

import numpy as np
import pytest

from tools import docs_results
from tools.cluster import bench, rounds
from tools.cluster.aggregate import (
    MIXED, aggregate_launches, paired_ratios, planner_check, planner_counts, ratio_range,
)
from tools.cluster.budget import calls_per_row, estimate_seconds, heavy_groups, overhead_per_launch, wall_per_wiring
from tools.cluster.results import format_rows_table, format_targets, launches, target_ratios

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
#: docs/cluster_bench.json as committed on 2026-11-30: one launch per row, before repeats (the old format)
ONE_LAUNCH = pathlib.Path(__file__).resolve().parent / "data" / "cluster_bench_one_launch.json"
MIB = 1024 ** 2


def _launch_row(strategy, launcher, ompi, size, repeat, t, algorithm="torus", wrong=0, wiring="rails"):
    return {"wiring": wiring, "strategy": strategy, "launcher": launcher, "ompi_allreduce": ompi,
            "size_bytes": size, "repeat": repeat, "time_s": t, "rank_avg_s": 0.9 * t, "rank_min_s": 0.8 * t,
            "algorithm": algorithm, "column": "ring" if algorithm == "torus" else None, "wrong": wrong}


#: per-launch times (repeats 0, 1, 2) at 8 MiB on the rails wiring
TIMES = {("torus", "horovodrun", None): [0.50, 0.80, 0.55], ("ring", "horovodrun", None): [1.00, 1.10, 0.90],
         ("torus:mpi", "mpirun", "default"): [0.70, 0.95, 0.72], ("ring", "mpirun", "default"): [0.80, 0.90, 1.00],
         ("mpi-torus", "mpirun", "default"): [0.62, 0.66, 0.61], ("mpi", "mpirun", "default"): [0.95, 0.97, 0.99],
         ("mpi-ring", "mpirun", "ring"): [0.70, 0.74, 0.60]}
FLAT = {"ring", "mpi", "mpi-ring"}


def _rows(torus_mpi_algorithms=("torus", "torus", "torus")):
    out = []
    for (s, l, o), times in TIMES.items():
        for k, t in enumerate(times):
            alg = "flat" if s in FLAT else torus_mpi_algorithms[k] if s == "torus:mpi" else "torus"
            out.append(_launch_row(s, l, o, 8 * MIB, k, t, alg))
    return aggregate_launches(out)


def test_aggregate_median_min_max_and_algorithm():
    rows = {(r["strategy"], r["launcher"]): r for r in _rows(("torus", "flat", "torus"))}
    torus = rows["torus", "horovodrun"]
    assert torus["time_s"] == pytest.approx(np.median([0.50, 0.80, 0.55]))
    assert (torus["time_min_s"], torus["time_max_s"], torus["launches"]) == (0.50, 0.80, 3)
    assert [p["repeat"] for p in torus["per_launch"]] == [0, 1, 2]
    assert torus["per_launch"][1]["rank_avg_s"] == pytest.approx(0.72)
    assert torus["algorithm"] == "torus" and torus["column"] == "ring" and torus["wrong"] == 0
    assert rows["torus:mpi", "mpirun"]["algorithm"] == MIXED  # flat in repeat 1
    assert rows["ring", "mpirun"]["algorithm"] == "flat" and rows["ring", "mpirun"]["column"] is None
    # an even number of launches: the mean of the middle two; wrong elements add up over launches
    two = aggregate_launches([_launch_row("mpi", "mpirun", "default", MIB, 0, 1.0, "flat", wrong=2),
                              _launch_row("mpi", "mpirun", "default", MIB, 1, 2.0, "flat", wrong=3)])
    assert len(two) == 1 and two[0]["time_s"] == pytest.approx(1.5) and two[0]["wrong"] == 5
    # a launch's JSON read twice
    with pytest.raises(ValueError, match="appears twice"):
        aggregate_launches([_launch_row("mpi", "mpirun", "default", MIB, 0, 1.0)] * 2)


def test_paired_ratios_only_over_common_repeats():
    a = aggregate_launches([_launch_row("torus", "horovodrun", None, MIB, k, t) for k, t in ((0, 1.0), (1, 2.0), (2, 3.0))])[0]
    b = aggregate_launches([_launch_row("ring", "horovodrun", None, MIB, k, t) for k, t in ((0, 2.0), (2, 4.0))])[0]
    assert paired_ratios(a, b) == pytest.approx([0.5, 0.75])
    assert ratio_range(a, b) == pytest.approx((0.5, 0.75))
    one = aggregate_launches([_launch_row("ring", "horovodrun", None, MIB, 1, 4.0)])[0]
    assert paired_ratios(a, one) == pytest.approx([0.5]) and ratio_range(a, one) is None


def test_targets_use_medians_ranges_and_the_algorithm_that_ran():
    targets = {t["comparison"]: t for t in target_ratios(_rows(), "rails", sizes=(8 * MIB,))}
    gloo = targets["torus (gloo) / ring (gloo)"]
    assert gloo["ratio"] == pytest.approx(0.55 / 1.00) and gloo["target"] == "<= 0.6" and gloo["ok"]
    per_gloo = np.array(TIMES["torus", "horovodrun", None]) / np.array(TIMES["ring", "horovodrun", None])
    assert gloo["range"] == pytest.approx((per_gloo.min(), per_gloo.max())) and gloo["launches"] == 3
    tm = targets["torus:mpi (mpirun) / ring (mpirun)"]
    assert tm["ratio"] == pytest.approx(0.72 / 0.90) and tm["target"] == "<= 1, torus ran" and tm["ok"]
    # the MPI torus against the fastest flat call (mpi-ring's median 0.70), paired by repeat across launch groups
    best = targets["mpi-torus (mpirun) / MPI best (mpi-ring (mpirun))"]
    per = np.array(TIMES["mpi-torus", "mpirun", "default"]) / np.array(TIMES["mpi-ring", "mpirun", "ring"])
    assert best["ratio"] == pytest.approx(0.62 / 0.70) and best["ok"]
    assert best["range"] == pytest.approx((per.min(), per.max()))
    # the same times, but the torus:mpi launches ran the flat call: the target is missed
    flat = {t["comparison"]: t for t in target_ratios(_rows(("flat",) * 3), "rails", sizes=(8 * MIB,))}
    assert flat["torus:mpi (mpirun) / ring (mpirun)"]["ratio"] == pytest.approx(tm["ratio"])
    assert not flat["torus:mpi (mpirun) / ring (mpirun)"]["ok"]
    assert flat["torus:mpi (mpirun) / ring (mpirun)"]["algorithm"] == "flat"
    mixed = {t["comparison"]: t for t in target_ratios(_rows(("torus", "flat", "torus")), "rails", sizes=(8 * MIB,))}
    assert not mixed["torus:mpi (mpirun) / ring (mpirun)"]["ok"]
    md = format_targets(list(targets.values())).splitlines()
    assert md[0] == "| comparison | size | ratio, median [per-launch min-max] | launches | algorithm that ran | target | met |"
    assert (f"| torus (gloo) / ring (gloo) | 8 MiB | 0.55 [{per_gloo.min():.2f}-{per_gloo.max():.2f}] | 3 | "
            "torus | <= 0.6 | yes |") in md


def test_planner_check_and_counts():
    rows = _rows()
    predicted = {"torus": 0.5, "ring": 1.5, "torus:mpi": 0.70, "mpi-torus": 0.3, "mpi": 0.97, "mpi-ring": 0.71}
    rows = [{**r, "predicted_s": predicted[r["strategy"]], "calibration": r["strategy"] == "mpi-ring"} for r in rows]
    rows.append({**rows[0], "wiring": "node", "predicted_s": None, "calibration": False})
    checked = planner_check(rows)
    ratios = [r["predicted_s"] / r["time_s"] for r in rows[:-1]]
    assert [c["planner_ratio"] for c in checked[:-1]] == pytest.approx(ratios)
    assert [c["planner_ok"] for c in checked[:-1]] == [0.75 <= x <= 1.33 for x in ratios]
    assert checked[-1]["planner_ratio"] is None and checked[-1]["planner_ok"] is None
    counts = planner_counts(checked)
    out_of_sample = [x for r, x in zip(rows[:-1], ratios) if not r["calibration"]]
    assert counts == {"rails": {"passed": sum(0.75 <= x <= 1.33 for x in out_of_sample), "rows": len(out_of_sample),
                                "calibration_passed": 1, "calibration_rows": 1}}
    assert counts["rails"]["passed"] == 3  # torus 0.91, torus:mpi 0.97, mpi 1.0; ring 1.5 and mpi-torus 0.48 miss
    assert planner_counts(checked, sizes=(MIB,)) == {}
    targets = {t["comparison"]: t for t in target_ratios(checked, "rails", sizes=(8 * MIB,))}
    pm = targets["predicted / measured: torus (gloo)"]
    assert pm["ratio"] == pytest.approx(0.5 / 0.55) and pm["range"] == pytest.approx((0.5 / 0.8, 0.5 / 0.5))
    assert targets["predicted / measured: mpi-ring (mpirun) [calibration]"]["ok"]


def test_a_torus_row_that_ran_flat_is_predicted_as_the_flat_call():
    from horovod_torus.costmodel import Cluster, Link, cluster_halving_doubling_time, cluster_ring_time, cluster_torus_time
    from tools.cluster.results import add_predictions

    c = Cluster(nodes=4, ranks_per_node=2, intra=Link(0.0, 1e15), inter=Link(1e-3, 50e6), nics=2)
    rows = add_predictions(_rows(("flat",) * 3), {"rails": c}, "2x4", ("node", "mpi-ring", "mpirun"))
    by = {(r["strategy"], r["launcher"]): r for r in rows}
    n = 8 * MIB
    assert by["torus:mpi", "mpirun"]["model"] == "halving-doubling (flat call)"  # Open MPI's default
    assert by["torus:mpi", "mpirun"]["predicted_s"] == pytest.approx(cluster_halving_doubling_time(c, n))
    assert by["torus", "horovodrun"]["model"] == "torus 2x4"  # it ran the torus
    assert by["torus", "horovodrun"]["predicted_s"] == pytest.approx(cluster_torus_time(c, "2x4", n))
    assert by["ring", "horovodrun"]["predicted_s"] == pytest.approx(cluster_ring_time(c, n))
    # the numpy API's flat call from 1 MiB is libnbc's MPI_Iallreduce: Rabenseifner's, textbook exchanges,
    # whatever the fitted efficiency of Open MPI's default MPI_Allreduce; below 1 MiB the blocking call
    slow = dataclasses.replace(c, exchange_efficiency=0.5)
    for size, want in ((n, cluster_halving_doubling_time(c, n)),
                       (MIB // 2, cluster_halving_doubling_time(slow, MIB // 2))):
        row = {**by["mpi-torus", "mpirun"], "algorithm": "flat", "size_bytes": size}
        (got,) = add_predictions([row], {"rails": slow}, "2x4", ("node", "mpi-ring", "mpirun"))
        assert got["predicted_s"] == pytest.approx(want) and got["model"].endswith("(flat call)")
        assert ("libnbc" in got["model"]) == (size >= MIB)


def test_rows_table_shows_ranges_and_flat_runs():
    rows = _rows(("flat",) * 3)
    table = format_rows_table(rows, "rails").splitlines()
    keys = [k.strip() for k in table[0].strip("|").split("|")][1:]
    cells = dict(zip(keys, [c.strip() for c in table[2].strip("|").split("|")][1:]))
    assert cells["torus (gloo)"] == "0.550 [0.500-0.800]"
    assert cells["torus:mpi (mpirun)"] == "0.720 [0.700-0.950] flat"
    assert cells["ring (gloo)"] == "1.000 [0.900-1.100]"


def test_old_targets_keep_their_layout():
    old = [{"comparison": "torus (gloo) / ring (gloo)", "size_bytes": 8 * MIB, "ratio": 0.5645, "target": "<= 0.6",
            "ok": True}]
    assert format_targets(old).splitlines() == ["| comparison | size | ratio | target | met |",
                                                "|---|---|---|---|---|",
                                                "| torus (gloo) / ring (gloo) | 8 MiB | 0.56 | <= 0.6 | yes |"]


def test_launch_plan_alternates_groups_and_strategies():
    groups = launches(("ring",))
    plan = rounds.launch_plan(groups, 3, ["8M"])
    assert [(k, g.label) for k, g in plan] == [(0, "mpirun"), (0, "mpi-ring"), (0, "gloo"),
                                                (1, "gloo"), (1, "mpi-ring"), (1, "mpirun"),
                                                (2, "mpirun"), (2, "mpi-ring"), (2, "gloo")]
    assert plan[3][1].strategies == ("ring", "torus") and plan[8][1].strategies == ("torus", "ring")
    assert plan[5][1].strategies == tuple(reversed(groups[0].strategies)) and plan[6][1] == groups[0]
    assert plan[5][1].mca == groups[0].mca and plan[4][1].mca == groups[1].mca
    assert rounds.launch_plan(groups, 3, []) == [(0, g) for g in groups]  # no repeated sizes: one round
    assert rounds.launch_plan(groups, 1, ["8M"]) == [(0, g) for g in groups]


def test_raw_files_and_repeat_commands(tmp_path):
    for name in ("node-mpirun.json", "node-mpirun-r0.json", "node-mpi-ring.json", "rails-mpi-ring-r2.json",
                 "intra.json", "facts.json", "rails-gloo-r1.log"):
        (tmp_path / name).write_text("{}")
    files = rounds.raw_launch_files(str(tmp_path))
    assert files == {("node", "mpirun", 0): str(tmp_path / "node-mpirun-r0.json"),
                     ("node", "mpi-ring", 0): str(tmp_path / "node-mpi-ring.json"),
                     ("rails", "mpi-ring", 2): str(tmp_path / "rails-mpi-ring-r2.json")}
    cache = tmp_path / "cache"
    for name in ("node-mpirun", "rails-gloo", "rails-mpi-ring"):
        (cache / name).mkdir(parents=True)
        (cache / name / "crossover-0.json").write_text("{}")
    rounds.clear_raw(str(tmp_path), str(cache), ["rails"], ["mpi-ring"])  # a rerun of one group in one wiring
    assert sorted(p.name for p in cache.iterdir()) == ["node-mpirun", "rails-gloo"]
    assert set(rounds.raw_launch_files(str(tmp_path))) == {("node", "mpirun", 0), ("node", "mpi-ring", 0)}
    rounds.clear_raw(str(tmp_path), str(cache), ["node"])  # a full run of the node wiring
    assert rounds.raw_launch_files(str(tmp_path)) == {} and [p.name for p in cache.iterdir()] == ["rails-gloo"]
    assert (tmp_path / "intra.json").exists() and (tmp_path / "rails-gloo-r1.log").exists()
    args = bench.build_parser().parse_args([])
    group = launches(("ring",))[2]
    main = bench._bench_command("py", args, "2x4", group, "x.json", 0)
    rep = bench._bench_command("py", args, "2x4", group, "x.json", 1)
    assert main[main.index("-e") + 1] == "32M" and main[main.index("-n") + 1] == "2"
    assert rep[rep.index("--sizes") + 1] == f"{8 * MIB},{32 * MIB}" and rep[rep.index("-n") + 1] == "1"
    assert "-b" not in rep and rep[rep.index("-w") + 1] == "1"


@pytest.mark.parametrize("argv, message", [
    (["--repeat-sizes", "64M"], "--repeat-sizes 64M is not a size of the main sweep"),
    (["--repeats", "0"], "--repeats 0 must be >= 1"),
    (["--min-torus-bytes", "lots"], "--min-torus-bytes lots: min_torus_bytes='lots' must be 'auto'"),
])
def test_bad_flags_are_refused_before_anything_runs(argv, message, capsys):
    assert bench.main(argv + ["--estimate"]) == 2
    assert message in capsys.readouterr().err


def _previous():
    """A bench.json of one wiring: 2 launch groups, 1 + 1 + 2 calls per row, 600 s of wall time."""
    rows = [{"wiring": "node", "strategy": s, "size_bytes": n, "time_s": t}
            for s, n, t in (("a", MIB, 1.0), ("b", MIB, 2.0), ("a", 4 * MIB, 4.0), ("b", 4 * MIB, 6.0))]
    return {"wirings": ["node"], "rows": rows, "config": {"iters": 2, "warmup": 1, "algorithms": []},
            "load": [{"utc": "2026-01-01T10:00:00Z"}, {"utc": "2026-01-01T10:10:00Z"}]}


def test_time_estimate_from_an_earlier_run():
    prev = _previous()
    assert wall_per_wiring(prev) == {"node": 600.0} and calls_per_row(1, 2) == 4
    # calls: (1 + 2 + 4 + 6) s x 4 = 52 s over 2 TensorFlow launches
    assert overhead_per_launch(prev, 2) == {"node": pytest.approx((548 / 2, 548 / 2))}
    same = estimate_seconds(prev, previous_groups=2, groups=2, wirings=["node"], sizes=[MIB, 4 * MIB],
                            repeat_sizes=[], repeats=1, iters=2, warmup=1, repeat_iters=2)
    assert same == {"node": pytest.approx(600.0), "total": pytest.approx(600.0)}
    # 8 MiB scaled from 4 MiB (x2); 3 launches per row at 4 MiB with 1 + 1 + 1 calls in each repeat; a wiring
    # the earlier run lacks takes its overhead and per-call times
    more = estimate_seconds(prev, previous_groups=2, groups=2, wirings=["node", "rails"], sizes=[MIB, 4 * MIB, 8 * MIB],
                            repeat_sizes=[4 * MIB], repeats=3, iters=2, warmup=1, repeat_iters=1)
    node = (2 + 2 * 2) * 548 / 2 + (3 + 10 + 20) * 4 + 2 * 10 * 3
    assert more == {"node": pytest.approx(node), "rails": pytest.approx(node), "total": pytest.approx(2 * node)}
    assert heavy_groups(launches(("ring", "rabenseifner"))) == 3  # mpi-rabenseifner runs MPI_Allreduce only
    with pytest.raises(ValueError, match="2 load timestamps for 2 wirings"):
        wall_per_wiring({**prev, "wirings": ["node", "rails"]})


def test_time_estimate_from_the_launch_log():
    """A run with repeats records each launch's seconds: the overheads of whole-sweep and repeat launches
    come from them (minus each launch's own calls), light launches left out."""
    rows = aggregate_launches([
        _launch_row("torus", "horovodrun", None, MIB, 0, 1.0, wiring="node"),
        _launch_row("torus", "horovodrun", None, 4 * MIB, 0, 3.0, wiring="node"),
        _launch_row("torus", "horovodrun", None, 4 * MIB, 1, 2.0, wiring="node"),
        _launch_row("mpi-ring", "mpirun", "ring", 4 * MIB, 0, 5.0, "flat", wiring="node")])
    log = [{"wiring": "node", "group": "gloo", "repeat": 0, "seconds": 100.0},
           {"wiring": "node", "group": "gloo", "repeat": 1, "seconds": 40.0},
           {"wiring": "node", "group": "mpi-ring", "repeat": 0, "seconds": 30.0}]
    prev = {"wirings": ["node"], "rows": rows, "launch_log": log,
            "config": {"iters": 2, "warmup": 1, "repeat_iters": 1, "repeats": 2, "repeat_sizes": ["4M"]}}
    # gloo r0: 100 - (1 + 3) x 4 calls; gloo r1: 40 - 2 x 3 calls
    assert overhead_per_launch(prev, 1, ["gloo"]) == {"node": pytest.approx((84.0, 34.0))}
    est = estimate_seconds(prev, previous_groups=1, groups=1, wirings=["node"], sizes=[MIB, 4 * MIB],
                           repeat_sizes=[4 * MIB], repeats=3, iters=2, warmup=1, repeat_iters=1, heavy_labels=["gloo"])
    # one call of every row: 1.0 s at 1 MiB, 2.5 (median of 3.0 and 2.0) + 5.0 s at 4 MiB
    assert est["node"] == pytest.approx(84 + 2 * 34 + (1.0 + 7.5) * 4 + 2 * 7.5 * 3)


def test_estimate_of_a_one_launch_run_is_its_wall_time():
    with open(ONE_LAUNCH) as f:
        doc = json.load(f)
    c = doc["config"]
    sizes = sorted({r["size_bytes"] for r in doc["rows"]})
    groups = heavy_groups(launches(c["algorithms"]))
    est = estimate_seconds(doc, previous_groups=groups, groups=groups,
                           wirings=doc["wirings"], sizes=sizes, repeat_sizes=[], repeats=1, iters=c["iters"],
                           warmup=c["warmup"], repeat_iters=c["iters"])
    assert est["total"] == pytest.approx(sum(wall_per_wiring(doc).values()))


def _new_format_doc():
    rows = planner_check([{**r, "predicted_s": 0.6, "model": "x", "calibration": False} for r in _rows()])
    return {"description": "all-reduce on an emulated cluster: test", "wirings": ["rails"], "rows": rows,
            "config": {"nodes": 4, "ranks_per_node": 2, "repeat_sizes": ["8M"], "repeats": 3, "repeat_iters": 2,
                       "min_torus_bytes": "auto"},
            "calibration": {"reference": "node:mpi-ring"}, "targets": {"rails": target_ratios(rows, "rails", (8 * MIB,))},
            "planner_passes": {"all sizes": planner_counts(rows)}, "failed_launches": [],
            "load": [{"utc": "2026-01-01T10:00:00Z", "loadavg": [1, 1, 1]}], "launch_log": [],
            "elapsed_s": 2880.0, "estimate_s": 3000.0}


def test_results_page_on_old_and_new_bench_json(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build", "results", docs_results.RERUN))
    shutil.copy(ONE_LAUNCH, docs / "cluster_bench.json")
    old = docs_results._cluster_bench_page(str(docs))  # the old format: no launches, no planner counts
    assert "| comparison | size | ratio | target | met |" in old and "Launches per row" not in old
    (docs / "cluster_bench.json").write_text(json.dumps(_new_format_doc()))
    page = docs_results._cluster_bench_page(str(docs))
    assert "Launches per row: 3 at 8M" in page and "the launches took 48 min (expected 50 min)" in page
    assert "- rails: planner / measured within 0.75-1.33 for 4 of 7 rows out of sample (all sizes)" in page
    assert "| torus:mpi (mpirun) / ring (mpirun) | 8 MiB | 0.80 [" in page and "<= 1, torus ran | yes |" in page
    assert "| 8 MiB | 0.550 [0.500-0.800] (0.600)" in page
    block = docs_results.readme_blocks(str(docs))["cluster-bench"]
    assert block.splitlines()[0].startswith("| comparison | size | ratio, median [per-launch min-max]")
    assert "predicted" not in block and "mpi-ring (mpirun) / " not in block


def test_a_rerun_beside_the_bench_json_gets_its_own_section():
    """docs/cluster_bench_rerun.json (the same command later, another host): its machine, start, planner
    counts and targets per wiring follow the first run's section; without the file there is no section."""
    rerun = json.loads((DOCS / docs_results.RERUN).read_text())
    page = docs_results._cluster_bench_page(str(DOCS))
    head, _, section = page.partition("## The same command again, out of sample")
    assert section and f"the same command on {rerun['host']['cpu_model']} ({rerun['host']['cpu_count']} cores)" in section
    assert f"started {rerun['load'][0]['utc']}" in section
    assert section.count("Ratios against the targets (") == len(rerun["wirings"]) and rerun["targets"]["rails"]
    counts = rerun["planner_passes"]["8 and 32 MiB"]["rails"]
    assert (f"rails: planner / measured within 0.75-1.33 for {counts['passed']} of {counts['rows']} rows out of "
            "sample (8 and 32 MiB)") in section
    assert "## The same command again" not in head


def test_the_committed_cluster_bench_names_the_machine():
    """bench.json carries the first launch's machine facts (bench.MACHINE_FACTS), so its results page gives the
    CPU model with the figures."""
    doc = json.loads((DOCS / "cluster_bench.json").read_text())
    assert set(doc["host"]) <= set(bench.MACHINE_FACTS) and doc["host"]["cpu_model"] and doc["host"]["cpu_count"] >= 1
    page = docs_results._cluster_bench_page(str(DOCS))
    assert f"`cpu_model`: {doc['host']['cpu_model']}" in page and "CPU model: not recorded" not in page


def test_rescore_remakes_predictions_from_the_files_own_calibration(tmp_path, capsys):
    """``--rescore``: the measured rows stay, every prediction is made again on clusters rebuilt from the
    file's calibration (the same as predict_row on make_cluster with those links), with the targets and
    planner counts; a file without a calibration is refused."""
    from horovod_torus.costmodel import Link
    from tools.cluster.results import make_cluster, predict_row

    rows = aggregate_launches([_launch_row(s, l, "default", 8 * MIB, k, t)
                               for s, l, t in (("torus", "mpirun", 0.8), ("torus:mpi", "mpirun", 0.4),
                                               ("mpi-ring", "mpirun", 0.7), ("mpi", "mpirun", 0.6))
                               for k in range(3)])
    calibration = {"reference": "node:mpi-ring", "inter_alpha_s": 2e-3, "inter_bandwidth_Bps_per_nic": 25e6,
                   "intra_alpha_s": 0.0, "intra_bandwidth_Bps": 3e9, "exchange_reference": "node:mpi",
                   "exchange_efficiency": 0.6, "nominal_Bps_per_nic": 25e6, "inter_rms_relative_residual": 0.1,
                   "intra_rms_relative_residual": None, "exchange_rms_relative_residual": 0.1}
    doc = {"description": "x", "config": {"nodes": 4, "ranks_per_node": 2, "rate": "200mbit", "name": "htcb"},
           "rows": [{**r, "model": "old", "predicted_s": 9.0, "planner_ratio": 1.0, "planner_ok": True} for r in rows],
           "calibration": calibration, "wirings": ["rails"], "grid": "2x4", "targets": {}, "planner_passes": {},
           "elapsed_s": 60.0}
    new = bench.rescore(doc)
    rails = make_cluster(4, 2, 2, Link(0.0, 3e9), Link(2e-3, 25e6), "rails", exchange_efficiency=0.6)
    assert [r["time_s"] for r in new["rows"]] == [r["time_s"] for r in rows] and new["elapsed_s"] == 60.0
    for r in new["rows"]:
        model, t = predict_row(rails, r["strategy"], r["launcher"], r["size_bytes"], "2x4", r["ompi_allreduce"])
        assert (r["model"], r["predicted_s"]) == (model, pytest.approx(t))
        assert r["planner_ratio"] == pytest.approx(t / r["time_s"]) and r["calibration"] is False  # rails: not fitted
    assert "columns in turn" in next(r["model"] for r in new["rows"] if r["strategy"] == "torus")
    assert new["targets"]["rails"] and new["planner_passes"]["8 and 32 MiB"]["rails"]["rows"] == 4
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc))
    assert bench.main(["--rescore", str(path), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["rows"] == json.loads(json.dumps(new["rows"]))
    assert "rescored (no launches)" in capsys.readouterr().out
    path.write_text(json.dumps({**doc, "calibration": None}))
    assert bench.main(["--rescore", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "has no calibration" in capsys.readouterr().err
