"""The ratios of mpi_scripts/bench_targets.sh, on hand-made rounds."""
import json

from horovod_torus.bench.targets import main, markdown_table, ratios, summarize, target_of


def _row(strategy, size, avg):
    return {"strategy": strategy, "size_bytes": size, "time_us": {"avg": avg}, "wrong": 0}


def test_ratios_median_min_max(tmp_path, capsys):
    for k, (t, r) in enumerate([(90, 100), (120, 100), (80, 100)], start=1):
        rows = [_row("torus", 8, t), _row("ring", 8, r), _row("mpi-torus", 8, 2 * t), _row("mpi", 8, 2 * r)]
        (tmp_path / f"allreduce-{k}.json").write_text(json.dumps({"rows": rows}))
        for s, step in (("torus", 0.8), ("ring", 1.0)):
            (tmp_path / f"train-{s}-{k}.json").write_text(json.dumps({"step_time_s": {"avg": step}}))
    docs = [json.loads((tmp_path / f"allreduce-{k}.json").read_text()) for k in (1, 2, 3)]
    assert ratios(docs, "torus", "ring", 8) == [0.9, 1.2, 0.8]
    assert summarize([0.9, 1.2, 0.8]) == (0.9, 0.8, 1.2)
    assert main([str(tmp_path), "3"]) == 0
    out = capsys.readouterr().out
    assert "0.90 [0.80-1.20]" in out and "pass" in out and "0.80 [0.80-0.80]" in out


def _round(rows, k, tmp_path, stem="allreduce"):
    doc = {"world_size": 4, "grid": "2x2", "config": {"sizes": [8, 1 << 20], "iters": 10, "warmup": 2, "check": True,
           "dtype": "float32", "strategies": ["mpi-torus", "mpi", "torus:horovod", "torus:mpi", "horovod"],
           "grid": "2x2"}, "host": {"hosts": ["vm"], "ranks_per_host": {"vm": 4}, "launcher": "mpi"}, "rows": rows}
    (tmp_path / f"{stem}-{k}.json").write_text(json.dumps(doc))


def _alg_row(strategy, size, avg, algorithm):
    return {**_row(strategy, size, avg), "algorithm": algorithm}


def test_summary_targets_algorithms_and_the_docs_table(tmp_path, capsys):
    """Per comparison and size: the median over rounds, the algorithm of each round, the issue's target
    (mpi-torus: 2.2 below 1 MiB, 1.10 from it) and the rule that a slower torus must have run the flat call."""
    rounds = [  # (torus:horovod, torus:mpi, horovod, mpi-torus, mpi) at 8 B and 1 MiB
        {8: (1.05, 0.5, 1.0, 2.0, 1.0), 1 << 20: (1.2, 1.05, 1.0, 1.0, 1.0)},
        {8: (1.00, 0.6, 1.0, 2.4, 1.0), 1 << 20: (1.3, 1.05, 1.0, 1.2, 1.0)},
        {8: (1.10, 0.7, 1.0, 2.1, 1.0), 1 << 20: (1.0, 1.05, 1.0, 1.1, 1.0)},
    ]
    for k, r in enumerate(rounds, start=1):
        rows = []
        for size, (th, tm, h, mt, m) in r.items():
            rows += [_alg_row("torus:horovod", size, th, "flat"), _alg_row("torus:mpi", size, tm,
                     "torus" if size > 8 else "flat"), _alg_row("horovod", size, h, "flat"),
                     _alg_row("mpi-torus", size, mt, "flat"), _alg_row("mpi", size, m, "flat")]
        _round(rows, k, tmp_path)
    assert main([str(tmp_path), "3", "--json", str(tmp_path / "targets.json")]) == 0
    doc = json.loads((tmp_path / "targets.json").read_text())
    got = {(t["numerator"], t["size_bytes"]): t for t in doc["targets"]}
    assert set(got) == {(n, s) for n in ("torus:horovod", "torus:mpi", "mpi-torus") for s in (8, 1 << 20)}
    th8 = got["torus:horovod", 8]
    assert (th8["median"], th8["min"], th8["max"], th8["target"], th8["met"]) == (1.05, 1.0, 1.1, 1.1, True)
    assert th8["algorithms"] == ["flat"] * 3 and th8["flat_named_where_slower"]
    th1 = got["torus:horovod", 1 << 20]
    assert (th1["median"], th1["met"]) == (1.2, False)                     # above 1.10
    tm1 = got["torus:mpi", 1 << 20]                                        # 1.05 <= 1.10, but the slower torus ran
    assert (tm1["median"], tm1["algorithms"], tm1["flat_named_where_slower"], tm1["met"]) == (
        1.05, ["torus"] * 3, False, False)
    assert (got["mpi-torus", 8]["median"], got["mpi-torus", 8]["target"], got["mpi-torus", 8]["met"]) == (2.1, 2.2, True)
    assert (got["mpi-torus", 1 << 20]["target"], got["mpi-torus", 1 << 20]["met"]) == (1.1, True)
    out = capsys.readouterr().out
    assert "torus:mpi / horovod (mpirun)     1M   1.05 [1.05-1.05]          torus   <= 1.1  MISS" in out
    assert "# 4 passed, 2 missed" in out
    table = markdown_table(doc)
    assert "| torus:mpi / horovod (mpirun) | 1MB | 1.05 [1.05-1.05] | torus | <= 1.1 | no |" in table
    assert "| mpi-torus / MPI_Allreduce (mpirun) | 8B | 2.10 [2.00-2.40] | flat | <= 2.2 | yes |" in table
    from tools.docs_results import _bench_targets_summary

    (tmp_path / "bench_targets.json").write_text((tmp_path / "targets.json").read_text())
    page = _bench_targets_summary(str(tmp_path))
    assert table in page and "3 rounds of one all-reduce launch each (4 ranks, grid 2x2)" in page
    assert "mpirun -np 4 python -m horovod_torus.bench -b 8 -e 1M -f 131072 -n 10 -w 2" in page
    assert "Not measured yet" in _bench_targets_summary(str(tmp_path / "none"))


def test_old_files_with_ring_still_count():
    docs = [{"rows": [_row("torus", 8, 2.0), _row("ring", 8, 1.0)]}]
    assert ratios(docs, "torus", ("horovod", "ring"), 8) == [2.0]
    assert target_of("torus", 8) == 1.10 and target_of("mpi-torus", 65536) == 2.2 and target_of("mpi-torus", 1 << 20) == 1.10
