# Copyright 2019 Uber Technologies, Inc. All Rights Reserved.
# Modifications copyright 2026 the horovod-torus authors (the import line, Fashion-MNIST from local IDX
# files, the Keras 3 edits marked below; see NOTICE).
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
# compliance with the License. You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software distributed under the License is
# distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and limitations under the License.
"""Horovod's Keras example (horovod/examples/tensorflow2/tensorflow2_keras_mnist.py), on Keras 3.

The only change a Horovod user makes is the import line below (``horovod.tensorflow.keras`` ->
``horovod_torus.tensorflow.keras``): the gradients then go through the 2D torus. The two Keras-3 edits
that any Horovod 0.28.1 script needs anyway are marked "Keras 3" (no ``experimental_run_tf_function``,
and ``.keras`` checkpoint files).

Run (4 ranks on a 2x2 torus):
    HOROVOD_TORUS_GRID=2x2 horovodrun --gloo -np 4 -H localhost:4 python examples/keras_fashion_mnist.py
"""
import argparse
import gzip
import os

import numpy as np
# horovod_torus before TensorFlow: its import turns TensorFlow's oneDNN kernels on by default (tf_defaults)
import horovod_torus.tensorflow.keras as hvd
import tensorflow as tf

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    """One IDX file (gzip): images uint8 [n, 28, 28] or labels uint8 [n]."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=24)
    p.add_argument("--steps-per-epoch", type=int, default=500, help="global steps, divided by size")
    p.add_argument("--batch-size", type=int, default=128, help="per-rank batch")
    p.add_argument("--checkpoint-dir", default=".")
    p.add_argument("--data-dir", default=DATA_DIR)
    args = p.parse_args(argv)

    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    images = load_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"))
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(labels, tf.int64)))
    dataset = dataset.repeat().shuffle(10000, seed=hvd.rank()).batch(args.batch_size)

    mnist_model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(32, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.001 * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(
        opt, backward_passes_per_step=1, average_aggregated_gradients=True)

    # Keras 3: compile() no longer takes experimental_run_tf_function.
    mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                        optimizer=opt,
                        metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),

        # Horovod: average metrics among workers at the end of every epoch.
        #
        # Note: This callback must be in the list before the ReduceLROnPlateau,
        # TensorBoard or other metrics-based callbacks.
        hvd.callbacks.MetricAverageCallback(),

        # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final
        # accuracy. Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during
        # the first three epochs. See https://arxiv.org/abs/1706.02677 for details.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        # Keras 3: checkpoint files end in .keras (or .weights.h5).
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(
            os.path.join(args.checkpoint_dir, 'checkpoint-{epoch}.keras')))

    # Horovod: write logs on worker 0.
    verbose = 1 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    history = mnist_model.fit(dataset, steps_per_epoch=args.steps_per_epoch // hvd.size(),
                              callbacks=callbacks, epochs=args.epochs, verbose=verbose)
    return mnist_model, history


if __name__ == "__main__":
    main()
