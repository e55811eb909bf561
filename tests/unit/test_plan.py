"""python -m horovod_torus.plan: cluster descriptions, predictions printed, calibration from a benchmark JSON."""
import json

import pytest

from horovod_torus.costmodel import Cluster, Link, cluster_torus_time, model_coefficients
from horovod_torus.plan import RESNET50_BYTES, build_parser, cluster_from_args, main


def test_resnet50_default_sizes():
    assert RESNET50_BYTES == (102_334_368, 51_167_184)


def test_cluster_file_and_overrides(tmp_path):
    spec = {"name": "mine", "nodes": 2, "ranks_per_node": 4, "intra": {"latency_us": 1, "bandwidth_gbps": 10},
            "inter": {"latency_us": 10, "bandwidth_gbps": 1}, "gamma_ps_per_byte": 0}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(spec))
    c = cluster_from_args(build_parser().parse_args(["--cluster", str(path), "--nodes", "3"]))
    assert c == Cluster(nodes=3, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9), name="mine")
    c = cluster_from_args(build_parser().parse_args(["--preset", "abci", "--inter-bandwidth-gbps", "12.5"]))
    assert c.nodes == 544 and c.inter.bandwidth == 12.5e9 and c.inter.alpha == 6e-6
    with pytest.raises(ValueError, match="no cluster given"):
        cluster_from_args(build_parser().parse_args(["--nodes", "2"]))


def test_prints_prediction_and_recommended_grid(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["--nodes", "3", "--ranks-per-node", "4", "--intra-latency-us", "1", "--intra-bandwidth-gbps",
               "10", "--inter-latency-us", "10", "--inter-bandwidth-gbps", "1", "--bytes", "8M", "--json", str(out),
               "--transport", "library"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "torus 4x3 (best grid)" in text and "recommended: torus on grid 4x3 (ring column)" in text
    doc = json.loads(out.read_text())
    assert doc["predictions"][0]["recommended"] == "torus" and doc["predictions"][0]["recommended_grid"] == "4x3"
    c = Cluster(nodes=3, ranks_per_node=4, intra=Link(1e-6, 1e10), inter=Link(1e-5, 1e9))
    assert doc["predictions"][0]["times_s"]["torus"] == pytest.approx(cluster_torus_time(c, "4x3", 8 * 2 ** 20))


def test_calibrate_from_benchmark_json(tmp_path, capsys):
    a, b = model_coefficients("mpi", 4)
    rows = [{"strategy": "mpi", "size_bytes": n, "time_us": {"avg": (a * 20e-6 + b * n / 1.5e9) * 1e6}}
            for n in (4, 4096, 2 ** 20, 2 ** 24)]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"world_size": 4, "grid": "2x2", "host": {"nodes": 1}, "rows": rows}))
    assert main(["--calibrate", str(bench), "--bytes", "1M"]) == 0
    text = capsys.readouterr().out
    assert "alpha = 20.00 us, bandwidth = 1.500 GB/s" in text and "applied to both" in text
    assert "1 nodes x 4 ranks" in text
    assert main(["--calibrate", str(bench), "--strategy", "ring"]) == 2
    assert "no rows for strategy 'ring'" in capsys.readouterr().err


def test_print_grid_prints_only_the_choice(capsys):
    from horovod_torus.costmodel import PRESETS, predict
    # 8 ABCI nodes: the alpha-beta model's best grid is 1x32, a flat ring: the job runs Horovod's ring
    assert predict(dataclasses_replace(PRESETS["abci"], nodes=8), RESNET50_BYTES[0]).best_grid.x == 1
    assert main(["--preset", "abci", "--nodes", "8", "--print-grid"]) == 0
    assert capsys.readouterr().out == "ring\n"
    # a torus first in the ranking: its grid
    small = ["--nodes", "3", "--ranks-per-node", "4", "--intra-latency-us", "1", "--intra-bandwidth-gbps", "10",
             "--inter-latency-us", "10", "--inter-bandwidth-gbps", "1", "--bytes", "8M", "--transport", "library"]
    assert main(small + ["--print-grid"]) == 0
    assert capsys.readouterr().out == "4x3\n"


def test_recommendation_and_print_grid_follow_the_ranking(capsys):
    """The user's report: 544 ABCI nodes printed "recommended: torus on grid 64x34" and --print-grid 64x34
    while the ranking of the same output put the double binary tree first and the best torus 1.50x slower.
    The recommendation is the ranking's first (per-call cost included); --print-grid prints ring for a flat
    one (docs/guide/clusters.md)."""
    from horovod_torus.costmodel import PRESETS
    abci = dataclasses_replace(PRESETS["abci"], nodes=544)
    for n in RESNET50_BYTES:
        assert rank_algorithms(abci, n, "horovod")[0].algorithm == "tree"
    assert main(["--preset", "abci", "--nodes", "544"]) == 0
    text = capsys.readouterr().out
    assert "recommended: torus" not in text
    assert text.count("recommended: double binary tree (Horovod's own all-reduce)") == 2
    assert "    1     double binary tree " in text
    assert main(["--preset", "abci", "--nodes", "544", "--print-grid"]) == 0
    assert capsys.readouterr().out == "ring\n"
    # every first entry of a ranking gives the same choice in words and for job scripts
    from horovod_torus.plan import grid_choice, recommendation
    for cluster in (abci, dataclasses_replace(PRESETS["abci"], nodes=3)):
        for transport in ("horovod", "library"):
            ranked = rank_algorithms(cluster, 8 * 2 ** 20, transport)
            choice, words = grid_choice(ranked), recommendation(ranked)
            assert (choice == "ring") == (ranked[0].grid is None)
            assert words.startswith(f"torus on grid {choice} (") if choice != "ring" else "Horovod's own" in words


def dataclasses_replace(obj, **changes):
    import dataclasses
    return dataclasses.replace(obj, **changes)


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip().endswith("0.1.0")


# ------------------------------------------------------------------ the ranking, the ABCI page, bad descriptions
import pathlib  # noqa: E402

from horovod_torus.costmodel import PLAN_ALGORITHMS, PRESETS, rank_algorithms  # noqa: E402
from horovod_torus.plan import RANKING_HEADER, ranking_rows  # noqa: E402

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "planner.md"
PAGE_ARGS = ["--preset", "abci-v1", "abci-v2", "--transport", "horovod", "library", "--markdown"]


@pytest.fixture(scope="module")
def page_output():
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(PAGE_ARGS) == 0
    return buf.getvalue()


def test_planner_page_is_the_commands_output(page_output):
    assert PAGE.read_text() == page_output, ("docs/planner.md is stale: regenerate it with "
                                             "python -m horovod_torus.plan " + " ".join(PAGE_ARGS) + " > docs/planner.md")
    assert f"Generated by `python -m horovod_torus.plan {' '.join(PAGE_ARGS)}`" in page_output


def test_abci_presets_ranking_comes_from_the_model(page_output):
    assert (PRESETS["abci-v1"].size, PRESETS["abci-v2"].size) == (2176, 3456)
    assert (PRESETS["abci-v1"].ranks_per_node, PRESETS["abci-v2"].nodes) == (4, 864)
    for name in ("abci-v1", "abci-v2"):
        for transport in ("horovod", "library"):
            for n in RESNET50_BYTES:
                ranked = rank_algorithms(PRESETS[name], n, transport)
                rows = ranking_rows(ranked)
                block = "\n".join("| " + " | ".join(r) + " |" for r in rows)  # the page's table, in order
                assert block in page_output, (name, transport, n)
                assert {e.algorithm for e in ranked} == set(PLAN_ALGORITHMS)
                assert rows[0][-1] == "1.00" and [float(r[-1]) for r in rows] == sorted(float(r[-1]) for r in rows)
    assert "| " + " | ".join(RANKING_HEADER) + " |" in page_output
    for ranks in ("2,176", "3,456"):
        assert f"per-call check: one MAX all-reduce of 160 B over {ranks} ranks" in page_output
        assert f"Start-up and the per-call check at {ranks} ranks" in page_output


def test_plain_output_ranks_every_preset_given(capsys):
    assert main(["--preset", "abci-v1", "abci", "--bytes", "4K", "--transport", "library"]) == 0
    text = capsys.readouterr().out
    assert text.count("ranking with trees and the per-call cost (per-call cost on the library transport") == 2
    assert "cluster abci-v1: 544 nodes x 4 ranks" in text and "cluster abci: 544 nodes" in text
    assert "init on 4x544 over Horovod process sets: 548 sets registered (Y rows + X columns = 544 + 4)" in text
    assert main(["--preset", "abci-v1", "abci", "--print-grid"]) == 2
    assert "2 presets given" in capsys.readouterr().err


@pytest.mark.parametrize("spec,message", [
    ({"nodes": 0}, r"cluster nodes=0 must be a positive integer; set it with --nodes N or \"nodes\": N"),
    ({"nodes": "544"}, r"nodes='544' is not an integer \(number of nodes, e.g. 544\)"),
    ({"ranks_per_nodes": 4}, r"unknown key\(s\) 'ranks_per_nodes'; the keys are name, nodes, ranks_per_node"),
    ({"inter": None}, r"inter=None must be an object like \{\"latency_us\": 14"),
    ({"inter": {"latency_us": 14}}, r"inter needs latency_us and bandwidth_gbps \(missing 'bandwidth_gbps'"),
    ({"inter": {"latency_us": 14, "bandwidth_gbps": 0}}, r"inter bandwidth_gbps=0 must be > 0 \(GB/s"),
    ({"intra": {"latency_us": -1, "bandwidth_gbps": 50}}, r"intra latency_us=-1 must be >= 0"),
    ({"nics_per_node": 0}, r"cluster nics=0 must be a positive integer; set it with --nics-per-node K"),
    ({"exchange_efficiency": 2}, r"exchange_efficiency=2.0 must be in \(0, 1\]"),
])
def test_bad_cluster_descriptions_name_the_value_and_the_fix(tmp_path, capsys, spec, message):
    good = {"name": "mine", "nodes": 2, "ranks_per_node": 4, "intra": {"latency_us": 1, "bandwidth_gbps": 10},
            "inter": {"latency_us": 10, "bandwidth_gbps": 1}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**good, **spec}))
    assert main(["--cluster", str(path), "--bytes", "1M"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("horovod_torus.plan: error: ") and __import__("re").search(message, err), err


def test_bad_flags_name_the_value_and_the_fix(capsys):
    assert main(["--preset", "abci", "--nodes", "0"]) == 2
    assert "the cluster flags: cluster nodes=0 must be a positive integer; set it with --nodes N" in capsys.readouterr().err
    assert main(["--preset", "abci", "--inter-bandwidth-gbps", "-1"]) == 2
    assert "must be > 0; set it with --intra-bandwidth-gbps / --inter-bandwidth-gbps" in capsys.readouterr().err
    assert main(["--preset", "abci", "--call-overhead-us", "-5"]) == 2
    assert "call_s=-5e-06 s must be >= 0 (e.g. --call-overhead-us 10)" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--top", "0"], r"--top 0 must be >= 1"), (["--top", "-1"], r"--top -1 must be >= 1"),
    (["--inter-bandwidth-gbps", "inf"], r"--inter-bandwidth-gbps inf must be a finite number"),
    (["--call-overhead-us", "inf"], r"--call-overhead-us inf must be a finite number"),
    (["--bytes", "2048T"], r"more than 1125899906842624 \(1 PiB\) per rank"),
    (["--nodes", "20000"], r"20000 nodes x 4 ranks = 80000 ranks: .* at most 32768 ranks")])
def test_flags_it_would_misread_or_take_minutes_on_are_errors(capsys, flags, message):
    """--top below 1 listed all but the last grid, an infinite bandwidth was planned, and 80,000 ranks took
    95 s with no output: one error line, exit 2, at once."""
    import re
    assert main(["--preset", "abci", "--print-grid", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("horovod_torus.plan: error: ") and re.search(message, err), err
