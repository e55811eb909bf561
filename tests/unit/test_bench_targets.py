"""The ratios of mpi_scripts/bench_targets.sh, on hand-made rounds."""
import json

from horovod_torus.bench.targets import main, ratios, summarize


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
