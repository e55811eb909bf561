"""The app's command line as a new user meets it: ``--help`` (a help text per flag that is not the flag's
name, the registered strategies, the preset's values as the defaults), the quick preset and ``make smoke``'s
check (keras_app.expect), configuration errors (printed once, by rank 0, without a traceback, with the fix;
every rank exits 2; one real 3-rank mpirun launch), and the batch schedule rounded down to the rank count
when the user did not choose it."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from horovod_torus.launchers import launcher_command
from horovod_torus.strategies import available_strategies
from horovod_torus.topology import TorusTopology
from keras_app import train
from keras_app.config import PRESETS, build_parser, parse_args, parse_command_line
from keras_app.schedules import round_batch_schedule

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FLAG_HELP = re.compile(r"^  (--[a-z-]+)(?: (\S+))?\s*(.*)$")


def _help_texts(text):
    out, flag = {}, None
    for line in text.splitlines():
        m = FLAG_HELP.match(line)
        if m and not line.startswith("   "):
            flag = m.group(1)
            out[flag] = m.group(3)
        elif flag and line.startswith(" " * 10):
            out[flag] = (out[flag] + " " + line.strip()).strip()
        else:
            flag = None
    return out


@pytest.fixture
def help_of(capsys):
    def run(*argv):
        with pytest.raises(SystemExit) as done:
            parse_args([*argv, "--help"])
        assert done.value.code == 0
        return _help_texts(capsys.readouterr().out)
    return run


def test_every_flag_has_a_help_text_that_is_not_its_name(help_of):
    texts = help_of()
    fields = [d for d in (a.dest for a in build_parser()._actions) if "." in d]
    assert len(fields) > 30
    for dest in fields:
        section, name = dest.split(".")
        flag = "--" + name.replace("_", "-")
        text = texts[flag]
        assert dest not in text and not text.startswith((name, flag)) and len(text) > 20, (flag, text)
        assert "(default: " in text, flag
    assert texts["--grid"].startswith("the torus grid, X*Y = the rank count")
    assert "TRAIN.GRID" not in build_parser().format_help()


def test_strategy_help_lists_the_registered_strategies(help_of):
    text = help_of()["--strategy"]
    assert available_strategies() and all(name in text for name in available_strategies())
    assert "ring (deprecated: horovod)" in text and "--strategy-module" in text


def test_preset_help_shows_the_preset_values(help_of):
    plain, demo = help_of(), help_of("--preset", "fashion_mnist_demo")
    assert plain["--optimizer"].endswith("(default: 'sgd')")
    assert demo["--optimizer"].endswith("(default: 'adam')")
    assert demo["--batch-schedule"].endswith("(default: '0:256,1:512')")
    assert demo["--epochs"].endswith(f"(default: {PRESETS['fashion_mnist_demo']['train']['epochs']})")
    abci = help_of("--preset=imagenet_abci", "--epochs", "5")
    assert abci["--dataset"].endswith("(default: 'imagenet_tfrecord')") and abci["--epochs"].endswith("(default: 90)")


def test_quick_preset_validates():
    cfg = parse_args(["--preset", "fashion_mnist_quick"])
    for size in (1, 2, 4):
        cfg.validate(size)
    assert cfg.model.arch == "tiny" and cfg.data.val_examples == 0 and cfg.train.output_dir == "runs/smoke"


@pytest.mark.parametrize("np_,expect", [(1, "0:256,1:512"), (2, "0:256,1:512"), (3, "0:255,1:510"),
                                        (6, "0:252,1:510"), (7, "0:252,1:511"), (300, "0:300,1:300")])
def test_round_batch_schedule(np_, expect):
    assert round_batch_schedule("0:256,1:512", np_) == expect
    assert all(int(b.split(":")[1]) % np_ == 0 for b in expect.split(","))


def test_configure_rounds_only_a_schedule_the_user_did_not_give(monkeypatch):
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    cfg, notes = train.configure(["--preset", "fashion_mnist_demo"], 6)
    assert cfg.train.batch_schedule == "0:252,1:510"
    assert notes == ["keras_app: batch schedule 0:256,1:512 rounded down to multiples of 6 ranks: 0:252,1:510 "
                     "(--batch-schedule sets it)"]
    assert train.configure(["--preset", "fashion_mnist_demo"], 4)[1] == []
    with pytest.raises(ValueError, match=r"global batch 256 .* not divisible by the world size 6: use a multiple "
                                         r"of 6, e.g. --batch-schedule 0:252,1:510 \(each global batch rounded"):
        train.configure(["--preset", "fashion_mnist_demo", "--batch-schedule", "0:256,1:512"], 6)
    assert parse_command_line(["--batch-schedule", "0:64", "--epochs", "1"])[1] == {"train.batch_schedule",
                                                                                  "train.epochs"}


def test_grid_errors_name_the_flag_in_the_app_and_the_argument_in_the_library(monkeypatch):
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    with pytest.raises(ValueError) as app:
        train.configure(["--grid", "2x2", "--batch-schedule", "0:255"], 3)
    assert str(app.value) == ("torus grid 2x2 has 2x2=4 ranks but the world size is 3: choose X and Y with X*Y=3 "
                              "(1x3, 3x1; e.g. --grid 3x1), or launch 4 ranks")
    with pytest.raises(ValueError) as lib:
        TorusTopology.parse("3x3").check_size(4)
    assert 'e.g. hvd.init(grid="2x2") or HOROVOD_TORUS_GRID=2x2' in str(lib.value) and "--grid" not in str(lib.value)
    assert "(1x4, 2x2, 4x1;" in str(lib.value)
    monkeypatch.setenv("HOROVOD_TORUS_GRID", "3x3")
    with pytest.raises(ValueError, match=r"HOROVOD_TORUS_GRID='3x3': torus grid 3x3 has 3x3=9 ranks"):
        train.configure(["--batch-schedule", "0:256"], 4)


@pytest.mark.parametrize("rank", [0, 1])
def test_main_prints_a_config_error_once_on_rank_0(monkeypatch, capsys, rank):
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(rank))
    monkeypatch.setattr("time.sleep", lambda s: None)
    assert train.main(["--arch", "tiny", "--batch-schedule", "0:256"]) == train.CONFIG_ERROR == 2
    out, err = capsys.readouterr()
    assert out == ""
    if rank:
        assert err == ""
    else:
        assert err == ("keras_app: configuration error: global batch 256 (batch schedule '0:256', epoch 0) is not "
                       "divisible by the world size 3: use a multiple of 3, e.g. --batch-schedule 0:255 (each "
                       "global batch rounded down to a multiple of 3)\n")
    # a --strategy-module that cannot be imported is a configuration error too (was a traceback per rank)
    assert train.main(["--arch", "tiny", "--batch-schedule", "0:255", "--strategy-module", "no_such_mod"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("" if rank else err) and "Traceback" not in err
    assert rank or err.startswith("keras_app: configuration error: ") and "'no_such_mod' cannot be imported" in err


@pytest.mark.skipif(not shutil.which("mpirun"), reason="needs Open MPI's mpirun (make setup installs it)")
def test_three_rank_launch_prints_the_error_once_without_a_traceback(tmp_path):
    program = [sys.executable, "-m", "keras_app.train", "--arch", "tiny", "--batch-schedule", "0:256",
               "--output-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("HOROVOD_TORUS_GRID", None)
    out = subprocess.run(["nice", *launcher_command("mpirun", 3, program, local=True)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("keras_app: configuration error: global batch 256") == 1, out.stderr
    assert "e.g. --batch-schedule 0:255" in out.stderr and "Traceback" not in out.stderr + out.stdout
    assert not (tmp_path / "run").exists()


def _summary(top1, classes=10):
    return {"final": {"val_top1": top1, "val_top5": None, "train_seconds": 30.0},
            "config": {"data": {"num_classes": classes}}}


def test_expect_states_the_top1_and_the_time_against_the_thresholds(tmp_path, capsys):
    from keras_app.expect import main, verdict
    assert verdict(_summary(0.7201), name="make smoke", min_top1=0.5, seconds=41, target_seconds=60) == (
        True, "make smoke: val top-1 0.7201 >= 0.50 expected (chance 0.10): OK; 41 s wall (within the 60 s target)")
    assert verdict(_summary(0.12), name="smoke", min_top1=0.5, seconds=75, target_seconds=60) == (
        False, "smoke: val top-1 0.1200 below 0.50 expected (chance 0.10): FAILED; 75 s wall (over the 60 s target)")
    assert verdict(_summary(None), name="r", min_top1=0.5)[0] is False
    with_host = {**_summary(0.86), "host": {"cpu_model": "AMD EPYC", "cpu_count": 2, "onednn": False}}
    assert verdict(with_host, name="make demo", min_top1=0.85, seconds=1100, target_seconds=1200)[1].endswith(
        "1100 s wall (within the 1200 s target); 2 CPUs, AMD EPYC, oneDNN off")
    with_host["host"]["allocator"] = "tcmalloc"
    assert verdict(with_host, name="make demo", min_top1=0.85)[1].endswith("oneDNN off, malloc tcmalloc")
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(0.3)))
    assert main([str(path), "--min-top1", "0.25"]) == 0
    assert main([str(path), "--min-top1", "0.5", "--seconds", "50"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "run: val top-1 0.3000 below 0.50 expected (chance 0.10): FAILED; 50 s wall"
    assert main([str(tmp_path / "missing.json"), "--min-top1", "0.5"]) == 2
    assert "did the run finish?" in capsys.readouterr().err


def _cli(tmp_path, *extra):
    return ["--preset", "fashion_mnist_smoke", "--arch", "tiny", "--epochs", "1", "--batch-schedule", "0:64",
            "--output-dir", str(tmp_path / "out"), *extra]


def test_inputs_train_would_meet_late_are_configuration_errors(monkeypatch, tmp_path):
    """Found before Horovod starts, on every rank alike (rank 0 failing alone in train() left the others in
    the first broadcast)."""
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    (tmp_path / "afile").write_text("x")
    cases = [(("--output-dir", str(tmp_path / "afile")), r"--output-dir '.*afile' is a file: pass a folder"),
             (("--output-dir", str(tmp_path / "afile" / "sub")), r"cannot be made: .*afile is a file"),
             (("--data-dir", str(tmp_path / "none")), r"Fashion-MNIST file .* not found in .*apt-get install "
                                                      r"dataset-fashion-mnist"),
             (("--output-dir", str(tmp_path / ("a" * 300))), r"cannot be made \(File name too long\): pass a folder"),
             (("--config", str(tmp_path / "none.json")), r"--config '.*none.json': No such file or directory"),
             (("--config", str(tmp_path / "afile")), r"--config '.*afile' is not JSON"),
             (("--base-lr", "-1"), r"base_lr=-1.0 must be > 0"),
             (("--base-lr", "nan"), r"base_lr=nan must be > 0"),
             (("--train-examples", "-5"), r"train_examples=-5 must be >= 0"),
             (("--warmup-epochs", "-1"), r"warmup_epochs=-1.0 must be >= 0"),
             (("--batch-schedule", "0:4096", "--train-examples", "1024"),
              r"an epoch of 1024 examples is smaller than the global batch 4096"),
             # values that trained on with a negative or infinite rate, or failed later on every rank
             (("--base-batch", "-256"), r"base_batch=-256 must be >= 1 \(the global batch of --base-lr\)"),
             (("--base-batch", "0"), r"base_batch=0 must be >= 1"),
             (("--final-lr-fraction", "-1"), r"final_lr_fraction=-1.0 must be in \[0.0, 1.0\]"),
             (("--warmup-start-fraction", "2"), r"warmup_start_fraction=2.0 must be in \[0.0, 1.0\]"),
             (("--weight-decay", "-1"), r"weight_decay=-1.0 must be in"),
             (("--base-lr", "inf"), r"base_lr=inf must be in \[0.0, 1000000.0\]"),
             (("--keep-checkpoints", "0"), r"keep_checkpoints=0 must be >= 1"),
             (("--seed", "-1"), r"seed=-1 must be in \[0, 4294967295\]"),
             (("--val-every-epochs", "0"), r"val_every_epochs=0 must be >= 1"),
             (("--num-classes", "5"), r"num_classes=5: fashion_mnist has 10 classes.*--num-classes 10"),
             (("--channels", "2"), r"channels=2 must be 1 \(grey\) or 3 \(RGB\)"),
             (("--shuffle-buffer", "0"), r"shuffle_buffer=0 must be >= 1"),
             (("--intra-op-threads", "-1"), r"intra_op_threads=-1 must be >= 0")]
    for extra, match in cases:
        with pytest.raises(ValueError, match=match):
            train.configure(_cli(tmp_path, *extra), 2)
    for name, value in (("HOROVOD_TORUS_MIN_BYTES", "-1"), ("HOROVOD_TORUS_TRANSPORT", "foo"),
                        ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "abc")):   # read by init: checked here too
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=name):
            train.configure(_cli(tmp_path), 2)
        monkeypatch.delenv(name)
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"expected a JSON object of sections \(data, model, optim, train\)"):
        train.configure(_cli(tmp_path, "--config", str(tmp_path / "list.json")), 2)
    made = tmp_path / "new" / "out"   # a folder that can be made is made by the check, on every rank
    train.configure(_cli(tmp_path, "--output-dir", str(made)), 2)
    assert made.is_dir()
    # refused for its data: no folder made; a leading ~ (left by the shell after =) is the home folder
    with pytest.raises(ValueError, match="not found"):
        train.configure(_cli(tmp_path, "--data-dir", str(tmp_path / "none"), "--output-dir",
                             str(tmp_path / "never")), 2)
    assert not (tmp_path / "never").exists()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg, _ = train.configure(_cli(tmp_path, "--output-dir=~/runs/x"), 2)
    assert cfg.train.output_dir == str(tmp_path / "home" / "runs" / "x") and (tmp_path / "home" / "runs" / "x").is_dir()


def test_a_damaged_checkpoint_to_resume_from_is_a_configuration_error(monkeypatch, tmp_path):
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    ckpt = tmp_path / "out" / "checkpoints" / "ckpt-0001"
    ckpt.mkdir(parents=True)
    (ckpt / "model.weights.h5").write_bytes(b"truncated")
    (ckpt / "state.json").write_text(json.dumps({"epoch": 1, "state": {}, "sha256": {"model.weights.h5": "0" * 64}}))
    with pytest.raises(ValueError, match=r"checkpoint .*ckpt-0001 is damaged \(model.weights.h5 does not match its "
                                         r"SHA-256 in state.json\); delete .*ckpt-0001 \(or start without --resume\)"):
        train.configure(_cli(tmp_path, "--resume", "true"), 2)
    (ckpt / "state.json").write_text("{trunc")
    with pytest.raises(ValueError, match=r"ckpt-0001 is damaged"):
        train.configure(_cli(tmp_path, "--resume", "true"), 2)
    assert train.configure(_cli(tmp_path), 2)[1] == []   # without --resume the old checkpoint is not read


def test_a_warm_up_longer_than_the_run_and_an_unreached_batch_step_are_noted(monkeypatch, tmp_path):
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    notes = train.configure(_cli(tmp_path, "--warmup-epochs", "5", "--batch-schedule", "0:64,5:128"), 2)[1]
    assert notes == ["keras_app: note: warmup_epochs=5 is longer than the run (1 epochs): the learning rate does "
                     "not reach its peak",
                     "keras_app: note: batch schedule '0:64,5:128' changes the batch at epoch(s) [5], which this "
                     "run of 1 epochs does not reach"]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_usage_error_prints_on_rank_0_only_and_every_rank_exits_2(monkeypatch, capsys, rank):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(rank))
    monkeypatch.setattr("time.sleep", lambda s: None)
    with pytest.raises(SystemExit) as exit_:
        train.main(["--verbose", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert ("argument --verbose: invalid choice: 3" in err) if rank == 0 else err == ""


def test_resuming_checkpoints_of_another_model_is_a_configuration_error(monkeypatch, tmp_path):
    """The run's config.json says what wrote the checkpoints: another --arch / --mixed-precision / ... is named
    before Horovod starts (it failed in the restore, with a traceback on every rank)."""
    import hashlib

    from keras_app.config import save_config
    monkeypatch.delenv("HOROVOD_TORUS_GRID", raising=False)
    ckpt = tmp_path / "out" / "checkpoints" / "ckpt-0001"
    ckpt.mkdir(parents=True)
    (ckpt / "model.weights.h5").write_bytes(b"weights")
    (ckpt / "state.json").write_text(json.dumps({"epoch": 1, "state": {}, "sha256": {
        "model.weights.h5": hashlib.sha256(b"weights").hexdigest()}}))
    cfg, _ = train.configure(_cli(tmp_path), 2)
    save_config(cfg, str(tmp_path / "out" / "config.json"))          # what train() writes at its start
    assert train.configure(_cli(tmp_path, "--resume", "true"), 2)[0].train.resume
    with pytest.raises(ValueError, match=r"--resume: the checkpoints in .* were written with arch='tiny' .*this "
                                         r"run has arch='resnet50': pass --arch 'tiny' to resume them, or another "
                                         r"--output-dir"):
        train.configure(_cli(tmp_path, "--resume", "true", "--arch", "resnet50"), 2)
    with pytest.raises(ValueError, match=r"mixed_precision='' .*mixed_precision='mixed_bfloat16'"):
        train.configure(_cli(tmp_path, "--resume", "true", "--mixed-precision", "mixed_bfloat16"), 2)
    (tmp_path / "out" / "config.json").write_text("{trunc")                # unreadable: nothing to compare
    assert train.configure(_cli(tmp_path, "--resume", "true", "--arch", "resnet50"), 2)[0].model.arch == "resnet50"
