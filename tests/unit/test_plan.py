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
               "10", "--inter-latency-us", "10", "--inter-bandwidth-gbps", "1", "--bytes", "8M", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "torus 4x3 (best grid)" in text and "recommended: torus on grid 4x3" in text
    doc = json.loads(out.read_text())
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
    assert main(["--preset", "abci", "--nodes", "544", "--print-grid"]) == 0
    out = capsys.readouterr().out
    pred = predict(dataclasses_replace(PRESETS["abci"], nodes=544), RESNET50_BYTES[0])
    assert out == f"{pred.best_grid}\n" and pred.times["torus"] <= pred.times["ring"]
    assert out == "64x34\n"                          # the README table's best grid for 544 nodes
    # 8 ABCI nodes: the model's best grid is 1x32, a flat ring: the job runs Horovod's ring
    assert predict(dataclasses_replace(PRESETS["abci"], nodes=8), RESNET50_BYTES[0]).best_grid.x == 1
    assert main(["--preset", "abci", "--nodes", "8", "--print-grid"]) == 0
    assert capsys.readouterr().out == "ring\n"


def dataclasses_replace(obj, **changes):
    import dataclasses
    return dataclasses.replace(obj, **changes)


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip().endswith("0.1.0")
