"""Config: presets + CLI overrides, validation errors that name the value and the fix, the saved config."""
import json

import pytest

from keras_app.config import PRESETS, load_config, parse_args, save_config


def test_preset_then_flags(tmp_path):
    cfg = parse_args(["--preset", "fashion_mnist_demo", "--grid", "2x2", "--batch-schedule", "0:128,1:256",
                      "--base-lr", "0.2", "--nesterov", "false", "--resume"])
    assert cfg.train.grid == "2x2" and cfg.train.batch_schedule == "0:128,1:256" and cfg.train.resume
    assert cfg.optim.base_lr == 0.2 and cfg.optim.nesterov is False
    assert cfg.model.bn_momentum == PRESETS["fashion_mnist_demo"]["model"]["bn_momentum"]
    path = tmp_path / "config.json"
    save_config(cfg, str(path))
    assert json.loads(path.read_text())["optim"]["base_lr"] == 0.2
    assert load_config(str(path)) == cfg
    again = parse_args(["--config", str(path), "--epochs", "7"])
    assert again.train.epochs == 7 and again.optim.base_lr == 0.2


def test_every_preset_validates():
    for name in PRESETS:
        parse_args(["--preset", name]).validate()


def test_batch_not_divisible_by_world_size():
    cfg = parse_args(["--batch-schedule", "0:256,1:510"])
    cfg.validate(2)
    with pytest.raises(ValueError, match=r"global batch 510 .*epoch 1.* not divisible by the world size 4"):
        cfg.validate(4)


def test_bad_values_named():
    from keras_app.config import from_dict
    with pytest.raises(ValueError, match="unknown all-reduce strategy 'tree'"):   # any registered name
        parse_args(["--strategy", "tree"]).validate()
    with pytest.raises(ValueError, match="unknown all-reduce strategy 'tree'"):   # a --config file too
        from_dict({"train": {"strategy": "tree"}}).validate()
    with pytest.raises(ImportError, match="'no_such_strategies_mod' cannot be imported"):
        parse_args(["--strategy-module", "no_such_strategies_mod"]).validate()
    with pytest.raises(ValueError, match="batch schedule '0:256,x'"):
        parse_args(["--batch-schedule", "0:256,x"]).validate()
    with pytest.raises(ValueError, match="image_size=28"):
        parse_args(["--image-size", "28"]).validate()
    with pytest.raises(SystemExit):
        parse_args(["--no-such-flag", "1"])
    with pytest.raises(ValueError, match=r"pipeline_threads=-1 must be >= 0 \(0 = tf.data AUTOTUNE\)"):
        parse_args(["--pipeline-threads", "-1"]).validate()


@pytest.mark.parametrize("value,ok", [("", True), ("auto", True), ("0", True), ("1048576", True),
                                      ("-1", False), ("1M", False)])
def test_min_torus_bytes_is_checked_before_init(value, ok):
    from keras_app.config import AppConfig
    cfg = AppConfig()
    cfg.train.min_torus_bytes = value
    if ok:
        cfg.validate()
    else:
        with pytest.raises(ValueError, match="min_torus_bytes"):
            cfg.validate()


def test_the_demo_runs_the_torus():
    from keras_app.config import PRESETS
    assert PRESETS["fashion_mnist_demo"]["train"]["min_torus_bytes"] == "0"
