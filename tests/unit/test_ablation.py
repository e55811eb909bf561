"""The ablation driver (tools.ablation): arms, validation, and a real two-arm run on a tiny subset
(one rank under mpirun, the tiny model, a few steps) whose outputs must have the documented schema."""
import json
import os
import shutil
import sys

import pytest

from tools import ablation
from tools.ablation import AblationSettings, arms, growth_schedule


def test_growth_schedule_doubles_to_the_final_batch():
    assert growth_schedule(256, 2048, 4) == [(0, 512), (1, 1024), (2, 2048)]
    assert growth_schedule(256, 2048, 2) == [(0, 1024), (1, 2048)]
    assert growth_schedule(1024, 2048, 5) == [(0, 1024), (1, 2048)]  # never below the small batch
    assert growth_schedule(32, 64, 3) == [(0, 32), (1, 64)]


def test_arms_share_the_budget_and_differ_in_one_thing_each():
    s = AblationSettings()
    a = arms(s)
    assert [a[n].batch_schedule for n in "ABCD"] == ["0:256", "0:1024", "0:512,1:1024", "0:512,1:1024"]
    big = arms(AblationSettings(epochs=4, final_batch=2048))
    assert big["C"].batch_schedule == "0:512,1:1024,2:2048"
    assert [a[n].label_smoothing for n in "ABCD"] == [0.0, 0.0, 0.0, 0.1]
    cmd = ablation.command(a["D"], 7, s, "out/D-s7")
    i = cmd.index("--label-smoothing")
    assert cmd[i + 1] == "0.1" and cmd[cmd.index("--seed") + 1] == "7"
    assert cmd[cmd.index("--train-examples") + 1] == "8192" and cmd[2] == "4"
    assert cmd[cmd.index("--val-examples") + 1] == "2000"


@pytest.mark.parametrize("change, names, match", [
    ({}, ["E"], "one of A, B, C, D"),
    ({"np": 3}, ["A"], "not divisible by np=3"),
    ({"epochs": 1}, ["A"], "at least 2 epochs"),
    ({"final_batch": 128}, ["A"], "smaller than small_batch"),
    ({"extra": ("--val-examples", "5")}, ["A"], "--val-examples is set by the driver"),
    ({"train_examples": 1000}, ["A"], "smaller than final_batch"),
    ({"seeds": ()}, ["A"], "seeds is empty"),
    ({"extra": ("--arch", "tiny", "--seed", "3")}, ["A"], "--seed is set by the driver"),
])
def test_bad_settings_name_the_value(change, names, match):
    with pytest.raises(ValueError, match=match):
        AblationSettings(**change).validate(names)


def test_bad_cli_input_exits_before_any_launch(tmp_path):
    with pytest.raises(SystemExit, match="not divisible by np=3"):
        ablation.main(["--np", "3", "--json", str(tmp_path / "a.json")])
    assert not (tmp_path / "a.json").exists()


def test_aggregate_and_table_from_records():
    s = AblationSettings()
    table = {n: a for n, a in arms(s).items() if n in "AB"}
    summary = {"epochs": [{"epoch": 1, "steps": 10, "global_batch": 256, "train_seconds": 20.0,
                           "learning_rate": 1e-3, "train_loss": 1.0, "train_top1": 0.6, "val_loss": 0.9, "val_top1": 0.7,
                           "val_top5": 0.95, "images_per_sec": 128.0},
                          {"epoch": 2, "steps": 10, "global_batch": 256, "train_seconds": 20.0,
                           "learning_rate": 5e-4, "train_loss": 0.8, "train_top1": 0.7, "val_loss": 0.8, "val_top1": 0.65,
                           "val_top5": 0.97, "images_per_sec": 128.0}], "config": {"x": 1}}
    runs = [ablation.run_record(table["A"], 1, summary, 0, 50.0),
            ablation.run_record(table["A"], 2, {**summary, "epochs": summary["epochs"][:1]}, 0, 30.0),
            ablation.run_record(table["B"], 1, None, 1, 5.0)]
    assert runs[0]["curve"][1]["images_seen"] == 5120 and runs[0]["curve"][1]["train_top1"] == 0.7
    assert runs[0]["final"] == {"val_top1": 0.65, "val_top5": 0.97}
    assert runs[0]["best"] == {"val_top1": 0.7, "val_top5": 0.97}
    assert runs[0]["images_per_sec"] == pytest.approx(5120 / 40.0)
    agg = ablation.aggregate(runs, table)
    assert agg["A"]["final_val_top1"] == {"mean": pytest.approx(0.675), "min": 0.65, "max": 0.7, "n": 2}
    assert agg["B"]["seeds"] == [] and agg["B"]["failed_seeds"] == [1] and agg["B"]["final_val_top1"] is None
    text = ablation.markdown_table({"arms": agg})
    assert "0.6750 [0.6500-0.7000]" in text and "(1 failed)" in text


@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun (make setup installs it)")
def test_two_arm_run_writes_the_documented_outputs(tmp_path):
    data = "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(data):
        pytest.skip("Fashion-MNIST not installed (make setup installs dataset-fashion-mnist)")
    out_json, out_png = tmp_path / "ablation.json", tmp_path / "ablation.png"
    argv = ["--arms", "A,D", "--seeds", "3", "--np", "1", "--epochs", "2", "--train-examples", "128",
            "--small-batch", "32", "--final-batch", "64", "--out", str(tmp_path / "runs"), "--json", str(out_json),
            "--val-examples", "64", "--plot", str(out_png), "--reuse", "--", "--arch", "tiny"]
    rc = ablation.main(argv)
    assert rc == 0
    doc = json.loads(out_json.read_text())
    assert out_png.stat().st_size > 1000
    assert [(r["arm"], r["seed"], r["status"]) for r in doc["runs"]] == [("A", 3, "ok"), ("D", 3, "ok")]
    a, d = doc["runs"]
    assert a["batch_schedule"] == "0:32" and d["batch_schedule"] == "0:32,1:64"
    assert d["label_smoothing"] == 0.1 and d["config"]["optim"]["label_smoothing"] == 0.1
    assert a["config"]["train"]["seed"] == 3 and a["config"]["model"]["arch"] == "tiny"
    assert [c["images_seen"] for c in a["curve"]] == [128, 256]
    assert [c["global_batch"] for c in d["curve"]] == [32, 64]
    for r in doc["runs"]:
        assert 0.0 <= r["final"]["val_top1"] <= r["best"]["val_top1"] <= 1.0
        assert r["images_per_sec"] > 0 and r["wall_seconds"] > 0
    assert set(doc["arms"]) == {"A", "D"}
    assert doc["arms"]["D"]["final_val_top1"]["mean"] == d["final"]["val_top1"]
    assert doc["settings"]["images_per_run"] == 256
    # the machine facts come from the first run's summary.json (CPU model, oneDNN state, allocator)
    host = json.loads((tmp_path / "runs" / "A-s3" / "summary.json").read_text())["host"]
    assert doc["host"]["cpu_model"] == host["cpu_model"] and doc["host"]["onednn"] == host["onednn"]
    assert doc["host"]["allocator"] == host["allocator"] and doc["host"]["cpus"] == os.cpu_count()
    # --reuse keeps finished runs: same records, no second launch
    assert ablation.main(argv) == 0
    again = json.loads(out_json.read_text())
    assert [r["wall_seconds"] for r in again["runs"]] == [r["wall_seconds"] for r in doc["runs"]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
