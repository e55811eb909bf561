"""A user-registered strategy runs through the benchmark (--strategies NAME) and the training app
(--strategy NAME), both loading it with --strategy-module."""
import json
import os

import numpy as np
import tensorflow as tf


def test_benchmark_runs_a_user_strategy(hvd, world, tmp_path):
    from horovod_torus.bench.__main__ import main
    size, rank = world
    path = tmp_path / "bench.json"
    rc = main(["-b", "4K", "-e", "64K", "-f", "16", "-n", "2", "-w", "1", "--strategy-module",
               "user_strategy", "--strategies", "counted_ring,torus", "--json", str(path)])
    import user_strategy  # tests/parallel is on sys.path (pytest rootdir insertion)
    calls = hvd.allgather(tf.constant([user_strategy.CALLS["n"]])).numpy()
    assert rc == 0
    assert (calls > 0).all() and len(set(calls.tolist())) == 1, calls
    if rank == 0:
        rows = json.loads(path.read_text())["rows"]
        assert [r["strategy"] for r in rows] == ["counted_ring"] * 2 + ["torus"] * 2
        assert all(r["wrong"] == 0 for r in rows)


def test_training_app_runs_a_user_strategy(hvd, world):
    from keras_app import train
    from keras_app.config import parse_args
    size, rank = world
    out = os.path.join(os.environ["PAR_LOGDIR"], "app_user_strategy")
    cfg = parse_args(["--preset", "fashion_mnist_smoke", "--arch", "tiny", "--train-examples", "256",
                      "--val-examples", "64", "--epochs", "1", "--batch-schedule", "0:64", "--verbose", "0",
                      "--strategy", "counted_ring", "--strategy-module", "user_strategy",
                      "--output-dir", out])
    import user_strategy  # tests/parallel is on sys.path (pytest rootdir insertion)
    before = user_strategy.CALLS["n"]
    result = train.train(cfg)
    traced = user_strategy.CALLS["n"] - before   # calls made while tracing the train step and metrics
    weights = np.concatenate([np.ravel(w) for w in result.model.get_weights()])
    gathered = hvd.allgather(tf.constant([traced, float(np.abs(weights).sum())], tf.float64)[None]).numpy()
    assert (gathered[:, 0] > 0).all(), gathered
    assert len(set(gathered[:, 1].tolist())) == 1, "weights differ across ranks"
    if rank == 0:
        assert result.summary["strategy"] == "counted_ring"
