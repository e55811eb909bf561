"""keras_app.train on every rank of a real launch: a short Fashion-MNIST run of ResNet-50 through the torus
in which the loss falls and the trainable weights end bitwise identical on every rank; a resumed run (of
the tiny model: what is under test is the restored state, and ResNet-50 would trace again for minutes)
repeats the uninterrupted run's steps and learning rates exactly; bad input fails on every rank before any
collective."""
import os
import shutil
import zlib

import numpy as np
import pytest
import tensorflow as tf

from keras_app.config import parse_args
from keras_app.schedules import learning_rate

# 512 images, 4 epochs: 8 steps per epoch at global batch 64, then 4 per epoch at 128 (from epoch 2);
# Adam warmed up over half an epoch. ResNet-50's loss first rises from its random start (~4.5, large
# logits) for a few steps, then falls: 24 steps take it clearly below the first epoch's mean.
SCHEDULE = [(0, 64, 8), (1, 64, 8), (2, 128, 4), (3, 128, 4)]            # (epoch, global batch, steps)
LR = dict(base_lr=0.001, base_batch=64, warmup_epochs=0.5, total_epochs=4, decay="cosine")
BASE = ["--train-examples", "512", "--val-examples", "64", "--batch-schedule", "0:64,2:128", "--epochs", "4",
        "--optimizer", "adam", "--base-lr", "0.001", "--base-batch", "64", "--warmup-epochs", "0.5",
        "--decay", "cosine", "--val-every-epochs", "4", "--augment", "none", "--verbose", "0",
        "--label-smoothing", "0.1"]
TINY = BASE + ["--arch", "tiny", "--val-every-epochs", "2"]


def _outdir(name):
    root = os.environ.get("PAR_LOGDIR")
    assert root, "run through tests/parallel/run_all.sh (PAR_LOGDIR names a folder shared by the ranks)"
    return os.path.join(root, name)


def _barrier(hvd):
    hvd.allreduce(tf.constant(0.0), name="app_test_barrier")


@pytest.fixture(scope="module")
def full_run(hvd):
    from keras_app import train
    out = _outdir("app_full")
    cfg = parse_args(BASE + ["--output-dir", out])
    result = train.train(cfg)
    crc = 0
    for w in result.model.trainable_weights:          # BN moving statistics are per rank, as in Horovod
        crc = zlib.crc32(np.asarray(w).tobytes(), crc)
    crcs = hvd.allgather(tf.constant([crc], tf.int64), name="app_test_crc").numpy()
    _barrier(hvd)       # rank 0 has written checkpoints and summary
    return out, result.summary, crcs


def test_loss_falls_and_weights_identical(hvd, full_run):
    out, summary, crcs = full_run
    assert len(set(crcs.tolist())) == 1, f"trainable weights differ across ranks: {crcs}"
    if hvd.rank() == 0:
        ep = summary["epochs"]
        assert [e["epoch"] for e in ep] == [1, 2, 3, 4] and [e["global_batch"] for e in ep] == [64, 64, 128, 128]
        assert ep[-1]["train_loss"] < ep[0]["train_loss"]
        assert summary["world_size"] == hvd.size() and summary["strategy"] == "torus"
        assert summary["grid"] == os.environ["HOROVOD_TORUS_GRID"]
        assert 0.0 <= summary["final"]["val_top1"] <= 1.0 and summary["final"]["val_top5"] >= summary["final"]["val_top1"]
        for f in ("summary.json", "config.json", "training.png"):
            assert os.path.getsize(os.path.join(out, f)) > 0
        assert os.listdir(os.path.join(out, "tensorboard"))
        # the per-step rates equal the pure schedule, across the batch change
        steps = summary["steps"]
        assert [s[0] for s in steps] == list(range(24))
        assert [s[3] for s in steps] == [b for _, b, n in SCHEDULE for _ in range(n)]
        expect = [learning_rate(e + k / n, b, **LR) for e, b, n in SCHEDULE for k in range(n)]
        np.testing.assert_allclose([s[2] for s in steps], expect, rtol=1e-12)


def test_resume_repeats_the_same_rates(hvd):
    from keras_app import train
    out = _outdir("app_tiny")
    summary = train.train(parse_args(TINY + ["--output-dir", out])).summary
    _barrier(hvd)       # rank 0 has written the checkpoints
    resumed = _outdir("app_resumed")
    if hvd.rank() == 0:      # a run that stopped after epoch 3: only its checkpoint of epoch 3 exists
        shutil.rmtree(resumed, ignore_errors=True)
        os.makedirs(os.path.join(resumed, "checkpoints"))
        shutil.copytree(os.path.join(out, "checkpoints", "ckpt-0003"),
                        os.path.join(resumed, "checkpoints", "ckpt-0003"))
    _barrier(hvd)
    again = train.train(parse_args(TINY + ["--output-dir", resumed, "--resume"])).summary
    _barrier(hvd)
    if hvd.rank() == 0:
        assert [e["epoch"] for e in again["epochs"]] == [1, 2, 3, 4]
        assert again["epochs"][:3] == summary["epochs"][:3]              # restored records
        assert again["steps"] == summary["steps"]                        # same steps, same exact rates
        assert sorted(os.listdir(os.path.join(resumed, "checkpoints"))) == ["ckpt-0003", "ckpt-0004"]


def test_bad_input_fails_on_every_rank(hvd):
    from keras_app import train
    errors = []
    for argv, words in [(["--batch-schedule", f"0:{4 * hvd.size() + 1}"], "not divisible by the world size"),
                        (["--data-dir", "/nonexistent/fmnist"], "apt-get install dataset-fashion-mnist")]:
        try:
            train.train(parse_args(BASE + argv + ["--output-dir", _outdir("app_bad")]))
            errors.append(None)
        except (ValueError, FileNotFoundError) as err:
            errors.append(str(err))
        assert errors[-1] is not None and words in errors[-1]
    _barrier(hvd)            # every rank got here: nobody is stuck in a collective
