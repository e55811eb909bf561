"""tools.scaling: efficiency, CPU ceiling and the planner's prediction from bench.train JSON."""
import pytest

from tools import scaling
from horovod_torus.costmodel import model_coefficients


def _doc(ips, step, grid, grad_bytes=1000, sync=0.01):
    return {"images_per_s": ips, "step_time_s": {"avg": step}, "sync_time_s": {"avg": sync}, "grid": grid,
            "gradient_bytes": grad_bytes}


def test_efficiency_is_throughput_over_ranks_times_one_rank():
    results = {(1, "ring"): [_doc(10, 0.8, "1x1"), _doc(12, 0.7, "1x1"), _doc(11, 0.75, "1x1")],
               (4, "ring"): [_doc(20, 1.6, "2x2"), _doc(22, 1.5, "2x2"), _doc(30, 1.1, "2x2")]}
    rows = scaling.efficiency_rows(results, cores=2)
    one, four = rows
    assert one["efficiency"] == pytest.approx(1.0) and one["cpu_ceiling"] == 1.0
    assert four["images_per_s"] == {"median": 22, "min": 20, "max": 30, "runs": 3}
    assert four["efficiency"] == pytest.approx(22 / (4 * 11))
    assert four["cpu_ceiling"] == 0.5 and four["predicted_sync_s"] is None


def test_prediction_uses_the_model_coefficients_of_the_grid():
    cal = {"torus": {"alpha": 1e-4, "bandwidth": 1e9}, "ring": {"alpha": 2e-4, "bandwidth": 2e9}}
    results = {(1, "torus"): [_doc(10, 0.5, "1x1", 10**8)], (6, "torus"): [_doc(30, 2.0, "3x2", 10**8)]}
    rows = scaling.efficiency_rows(results, cores=2, calibration=cal)
    a, b = model_coefficients("torus", 6, "3x2")
    want = a * 1e-4 + b * 10**8 / 1e9
    assert rows[1]["predicted_sync_s"] == pytest.approx(want)
    assert rows[1]["predicted_efficiency"] == pytest.approx(0.5 / (0.5 + want))
    assert rows[0]["predicted_sync_s"] == 0.0
    assert "3x2" in scaling.markdown_table(rows)


def test_missing_one_rank_baseline_and_bad_flags_are_errors():
    with pytest.raises(ValueError, match="no 1-rank result"):
        scaling.efficiency_rows({(2, "ring"): [_doc(1, 1, "2x1")]}, cores=2)
    with pytest.raises(SystemExit, match="including 1"):
        scaling.main(["--ranks", "2,4", "--calibrate", ""])
    with pytest.raises(SystemExit, match="integers"):
        scaling.main(["--ranks", "a,b", "--calibrate", ""])


def test_launch_command_is_bench_train_under_mpirun():
    args = scaling.build_parser().parse_args([])
    cmd = scaling.launch_command(4, "torus", "x.json", args)
    assert cmd[0] == "mpirun" and cmd[cmd.index("-np") + 1] == "4"
    assert cmd[cmd.index("-m") + 1] == "horovod_torus.bench.train" and cmd[cmd.index("--json") + 1] == "x.json"
    assert cmd[cmd.index("--grid") + 1] == "2x2"
    assert [scaling.square_grid(n) for n in (1, 2, 4, 6, 8, 9)] == ["1x1", "2x1", "2x2", "3x2", "4x2", "3x3"]
