"""examples/keras_fashion_mnist.py (Horovod's Keras example, import line swapped) under a real launch."""
import os
import pathlib
import shutil
import tempfile

import numpy as np
import keras
import tensorflow as tf
import horovod.tensorflow as flat_hvd

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "keras_fashion_mnist.py"


def test_example_uses_only_names_that_horovod_keras_also_has():
    """Swapping the import line back must find every hvd.X the script uses in Horovod's module too."""
    import re
    import horovod.tensorflow.keras as stock
    import horovod_torus.tensorflow.keras as ours
    text = EXAMPLE.read_text()
    assert text.count("import horovod_torus.tensorflow.keras as hvd\n") == 1
    used = sorted(set(re.findall(r"\bhvd\.([A-Za-z_][\w.]*[A-Za-z_\d])", text)))
    assert {"init", "DistributedOptimizer", "callbacks.BroadcastGlobalVariablesCallback"} <= set(used)
    for dotted in used:
        for module in (stock, ours):
            obj = module
            for part in dotted.split("."):
                obj = getattr(obj, part)      # AttributeError names the missing one


def test_example_trains_and_rank0_checkpoints(hvd, world):
    import importlib.util
    size, rank = world
    spec = importlib.util.spec_from_file_location("keras_fashion_mnist", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    ckpt = os.path.join(tempfile.gettempdir(), f"hvd-torus-example-{os.getppid()}")
    os.makedirs(ckpt, exist_ok=True)
    model, history = example.main(["--epochs", "2", "--steps-per-epoch", str(4 * size),
                                   "--batch-size", "32", "--checkpoint-dir", ckpt])
    flat = tf.concat([tf.reshape(w, [-1]) for w in model.get_weights()], 0)
    gathered = flat_hvd.allgather(flat[tf.newaxis]).numpy()
    losses = flat_hvd.allgather(tf.constant([history.history["loss"]], tf.float64)).numpy()
    lrs = history.history["lr"]
    seeds = np.concatenate([np.asarray(layer.seed_generator.state).ravel() for layer in model.layers
                            if isinstance(layer, keras.layers.Dropout)])
    seeds = flat_hvd.allgather(tf.constant(seeds[np.newaxis], tf.int64)).numpy()
    for r in range(size):
        np.testing.assert_array_equal(gathered[r], gathered[0])   # same weights on every rank
        np.testing.assert_array_equal(losses[r], losses[0])       # metrics averaged on every rank
    assert len(history.history["loss"]) == 2 and np.all(np.isfinite(losses))
    # the broadcast callback leaves each rank's Dropout random state its own: different masks per rank
    assert seeds.shape == (size, 4) and len({tuple(row) for row in seeds.tolist()}) == size, seeds
    # warm-up over 3 epochs from 0.001 toward 0.001 * size, 4 steps per epoch
    np.testing.assert_allclose(lrs[0], 0.001 * size / size * (1 * (size - 1) / 3 + 1), rtol=1e-6)
    if rank == 0:
        path = os.path.join(ckpt, "checkpoint-2.keras")
        restored = keras.models.load_model(path)           # plain Keras: no horovod_torus needed
        assert type(restored.optimizer).__name__ == "Adam"
        for a, b in zip(restored.get_weights(), model.get_weights()):
            np.testing.assert_array_equal(a, b)
        shutil.rmtree(ckpt)
