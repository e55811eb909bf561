"""keras_app.train on every rank of a real launch, with mixed_float16 on CPU: the optimizer fit uses is
DistributedOptimizer(LossScaleOptimizer(...)) (compile does not re-wrap it), the logits are float32, and a
run stopped after epoch 2 and resumed from its checkpoint ends with exactly the weights, optimizer state
(loss scale included) and epoch records of the uninterrupted run: same restore, same data order (the
resumed epoch continues mid-stage), same augmentation. The tiny model keeps it to seconds (float16
convolutions on CPU are slow)."""
import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_app.config import parse_args

ARGS = ["--train-examples", "96", "--val-examples", "40", "--batch-schedule", "0:32", "--epochs", "3",
        "--optimizer", "sgd", "--base-lr", "0.05", "--base-batch", "32", "--warmup-epochs", "1",
        "--mixed-precision", "mixed_float16", "--arch", "tiny", "--augment", "flip", "--verbose", "0", "--pipeline-threads", "1"]


@pytest.fixture
def float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _barrier(hvd):
    import tensorflow as tf
    hvd.allreduce(tf.constant(0.0), name="resume_mixed_barrier")


def _state(result):
    opt = result.model.optimizer
    return [np.asarray(w) for w in result.model.weights], {f"{i}:{v.path.split('/', 1)[1]}": np.asarray(v)
                                              for i, v in enumerate(opt.variables)}


def test_mixed_float16_stop_and_resume_equals_uninterrupted(hvd, float32_after):
    """Both runs first (collectives on every rank), then the checks. BatchNormalization's moving statistics
    are per rank (as in Horovod) between validations; each validation evaluates rank 0's (broadcast), the
    ones a checkpoint holds, so every weight matches on every rank."""
    from keras_app import train
    from keras_app.checkpoint import optimizer_variable_names
    root = os.environ["PAR_LOGDIR"]            # shared by the ranks (rank 0 writes the checkpoints)
    full_dir, resumed_dir = os.path.join(root, "mixed_full"), os.path.join(root, "mixed_resumed")
    full = train.train(parse_args(ARGS + ["--output-dir", full_dir]))
    _barrier(hvd)
    if hvd.rank() == 0:      # stop after epoch 2: only that checkpoint exists; resume it
        shutil.rmtree(resumed_dir, ignore_errors=True)
        os.makedirs(os.path.join(resumed_dir, "checkpoints"))
        shutil.copytree(os.path.join(full_dir, "checkpoints", "ckpt-0002"),
                        os.path.join(resumed_dir, "checkpoints", "ckpt-0002"))
    _barrier(hvd)
    again = train.train(parse_args(ARGS + ["--output-dir", resumed_dir, "--resume"]))
    _barrier(hvd)

    opt = full.model.optimizer
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)            # compile kept ours: no re-wrap
    assert not isinstance(opt.inner_optimizer, keras.optimizers.LossScaleOptimizer)
    assert type(opt).__mro__[1].__name__ == "_DistributedOptimizerMixin"   # the distributed optimizer
    assert full.model.layers[-1].dtype_policy.name == "float32" and full.model.output.dtype == "float32"
    assert full.model.layers[1].compute_dtype == "float16"
    assert "optimizer/dynamic_scale" in optimizer_variable_names(opt)
    steps = int(opt.iterations.numpy())       # 9 steps; steps with a non-finite gradient are skipped
    assert 1 <= steps <= 9 and float(opt.dynamic_scale.numpy()) == 2.0 ** 15 / 2 ** (9 - steps)
    ckpt = os.path.join(full_dir, "checkpoints", "ckpt-0002")
    with open(os.path.join(ckpt, "state.json")) as fh:
        names = json.load(fh)["optimizer_variables"]
    with np.load(os.path.join(ckpt, "optimizer.npz")) as npz:
        saved = dict(zip(names, (npz[k] for k in sorted(npz.files))))
    assert int(saved["inner_optimizer/iteration"]) < steps       # epoch 3 applied updates after the stop
    w_full, o_full = _state(full)
    w_again, o_again = _state(again)
    assert len(w_full) == len(w_again) > 0
    for a, b in zip(w_full, w_again):
        np.testing.assert_array_equal(a, b)
    assert o_full.keys() == o_again.keys()
    for k in o_full:
        np.testing.assert_array_equal(o_full[k], o_again[k], err_msg=k)
    if hvd.rank() != 0:
        return
    assert again.summary["epochs"] == [{**e, **{t: again.summary["epochs"][i][t] for t in
                                                  ("images_per_sec", "train_seconds", "epoch_seconds")}}
                                       for i, e in enumerate(full.summary["epochs"])]
    final = full.summary["epochs"][-1]
    assert np.isfinite(final["val_loss"]) and 0.0 <= final["val_top1"] <= final["val_top5"] <= 1.0
