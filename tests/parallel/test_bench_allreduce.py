"""The all-reduce benchmark, run for real: every row of every strategy must be correct (#wrong = 0).

Under mpirun all four strategies run; under horovodrun --gloo the MPI strategies are skipped (and the JSON
says why). Timings are recorded but never asserted.
"""
import json

from horovod_torus.bench.__main__ import main
from horovod_torus.launch import LaunchContext


def test_short_sweep_every_strategy_correct(hvd, world, tmp_path):
    size, rank = world
    path = tmp_path / "bench.json"
    rc = main(["-b", "4", "-e", "64K", "-f", "64", "-n", "2", "-w", "1", "--json", str(path)])
    rc_f64 = main(["-b", "3", "-e", "3000", "-f", "10", "-n", "1", "-w", "1", "-d", "double", "--min-seconds", "0.2",
                   "--strategies", "torus", "mpi-torus", "--json", str(tmp_path / "f64.json")])
    rc_bf16 = main(["-b", "2", "-e", "2000", "-f", "10", "-n", "1", "-w", "1", "-d", "bfloat16",
                    "--json", str(tmp_path / "bf16.json")])
    assert rc == 0 and rc_f64 == 0 and rc_bf16 == 0
    if rank != 0:
        return
    doc = json.loads(path.read_text())
    # the MPI baselines run first (in the CLI: before Horovod starts)
    expected = (["mpi-torus", "mpi", "torus", "horovod"] if LaunchContext.from_environ().mpi_world
                else ["torus", "horovod"])
    assert doc["world_size"] == size and doc["grid"] == str(hvd.grid())
    assert [r["strategy"] for r in doc["rows"]] == [s for s in expected for _ in range(3)]
    assert [r["size_bytes"] for r in doc["rows"][:3]] == [4, 256, 16384]
    assert [r["count"] for r in doc["rows"][:3]] == [1, 64, 4096]
    torus = hvd.torus()
    for r in doc["rows"]:
        assert r["wrong"] == 0, r
        want = {"mpi-torus": "torus", "mpi": "flat", "horovod": "flat",   # the launch runs min_torus_bytes=0
                "torus": torus.algorithm(r["size_bytes"])}[r["strategy"]]
        assert r["algorithm"] == want, r
        assert bool(r["column"]) == (want == "torus"), r
        if r["strategy"] == "torus":
            assert r["column"] == torus.column_algorithm(r["size_bytes"]), r
        assert 0 < r["time_us"]["min"] <= r["time_us"]["avg"] <= r["time_us"]["max"]
        assert r["iters"] == 2, r  # -n 2, no --min-seconds
        assert abs(r["algbw_gbps"] - r["size_bytes"] / r["time_us"]["avg"] / 1e3) < 1e-9
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * 2 * (size - 1) / size) < 1e-9
    assert doc["host"]["nodes"] == 1 and sum(doc["host"]["ranks_per_host"].values()) == size
    if not LaunchContext.from_environ().mpi_world:
        assert set(doc["skipped"]) == {"mpi-torus", "mpi"}
    f64 = json.loads((tmp_path / "f64.json").read_text())
    # 3 B is below one float64 element, so the sweep starts at 30 B = 3 elements (sizes not multiples of X)
    assert [(r["count"], r["dtype"], r["wrong"]) for r in f64["rows"] if r["strategy"] == "torus"] == [
        (3, "float64", 0), (37, "float64", 0), (375, "float64", 0)]
    # --min-seconds 0.2 with -n 1 after one warm-up call: a row whose one timed call took less than 200 ms times
    # more calls (a warm 3-element all-reduce on one host takes about a millisecond: under horovodrun only the 3
    # torus rows run, and a cold first call (-w 0) can take more than 50 ms on each), never more than 10000
    assert all(1 <= r["iters"] <= 10000 for r in f64["rows"]) and max(r["iters"] for r in f64["rows"]) > 1
    bf16 = json.loads((tmp_path / "bf16.json").read_text())
    # only the torus sums bfloat16 (as float32): Horovod and MPI have no bfloat16 reduction
    assert {"horovod", "mpi"} <= set(bf16["skipped"])
    assert [(r["strategy"], r["count"], r["wrong"]) for r in bf16["rows"]] == [
        ("torus", 1, 0), ("torus", 10, 0), ("torus", 100, 0), ("torus", 1000, 0)]
