"""Input pipelines: Fashion-MNIST (shapes, sharding, the missing-dataset error) and the ImageNet readers
(TFRecord shards, TFDS imagenet2012 from manual_dir) on miniature datasets in the real formats."""
import os

import numpy as np
import pytest
import tensorflow as tf

from app_miniature import FMNIST, fmnist_rgb, write_imagenet_tars, write_tfrecords
from keras_app import data
from keras_app.config import DataConfig


def test_missing_dataset_names_path_and_package(tmp_path):
    cfg = DataConfig(data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        data.num_examples(cfg, train=True)
    assert str(tmp_path) in str(err.value) and "apt-get install dataset-fashion-mnist" in str(err.value)
    with pytest.raises(FileNotFoundError, match="no ImageNet TFRecord shards match"):
        data.num_examples(DataConfig(dataset="imagenet_tfrecord", data_dir=str(tmp_path)), train=True)


def test_fashion_mnist_shards():
    cfg = DataConfig(train_examples=64, val_examples=10)
    images, labels = data.load_fashion_mnist(FMNIST, "train")
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    x, y = next(iter(data.train_dataset(cfg, 16, data.Split(1, 2), seed=0)))
    assert x.shape == (8, 32, 32, 1) and x.dtype == tf.float32 and y.dtype == tf.int32
    assert set(y.numpy()) <= set(labels[:64][1::2])
    seen = [np.concatenate([b[1].numpy() for b in data.val_dataset(cfg, 4, data.Split(r, 2))]) for r in (0, 1)]
    test_labels = data.load_fashion_mnist(FMNIST, "test")[1]
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.sort(test_labels[:10]))
    with pytest.raises(ValueError, match="global batch 18 is not divisible by the world size 4"):
        data.train_dataset(cfg, 18, data.Split(0, 4), seed=0)


def test_pipeline_threads_fixed_pool_same_batches():
    """pipeline_threads=N: a private pool of N threads and no autotuning, on the train and val pipelines;
    the batches are the same as with AUTOTUNE (only the threading changes)."""
    auto, fixed = DataConfig(train_examples=64, val_examples=10), DataConfig(train_examples=64, val_examples=10,
                                                                             pipeline_threads=2)
    opts = data.pipeline_options(fixed)
    assert opts.threading.private_threadpool_size == 2 and opts.autotune.enabled is False
    assert opts.threading.max_intra_op_parallelism == 1
    assert data.pipeline_options(auto).threading.private_threadpool_size is None
    for make in (lambda c: data.train_dataset(c, 16, data.Split(0, 2), seed=3),
                 lambda c: data.val_dataset(c, 4, data.Split(1, 2))):
        ds = make(fixed)
        assert ds.options().threading.private_threadpool_size == 2 and ds.options().autotune.enabled is False
        for a, b in zip(ds.take(3), make(auto).take(3)):
            np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())
            np.testing.assert_allclose(a[0].numpy()[..., 0].sum(axis=(1, 2)), b[0].numpy()[..., 0].sum(axis=(1, 2)),
                                       rtol=1e-5)


def _check_val(cfg, images, labels, n_ranks):
    """Every rank's validation shard together = the whole split, labels exact, pixels close to the
    originals (JPEG is lossy; compared after the same central crop + resize)."""
    got_x, got_y = [], []
    for r in range(n_ranks):
        for x, y in data.val_dataset(cfg, 8, data.Split(r, n_ranks)):
            got_x.append(x.numpy())
            got_y.append(y.numpy())
    got_x, got_y = np.concatenate(got_x), np.concatenate(got_y)
    assert got_x.shape == (len(labels), 32, 32, 3)
    np.testing.assert_array_equal(np.sort(got_y), np.sort(labels))
    ref = tf.image.resize(tf.image.central_crop(tf.cast(images, tf.float32), 0.875), [32, 32]).numpy()
    pixels = got_x * np.array(data.IMAGENET_STD) + np.array(data.IMAGENET_MEAN)
    # match each decoded image to its original through the label-sorted order being ambiguous: use the
    # nearest original and require it to be close
    errs = [np.abs(ref / 255.0 - p).mean(axis=(1, 2, 3)).min() for p in pixels]
    assert max(errs) < 0.02


def test_imagenet_tfrecord_reader(tmp_path):
    tr_x, tr_y = fmnist_rgb("train", 24)
    va_x, va_y = fmnist_rgb("test", 12)
    write_tfrecords(str(tmp_path), "train", tr_x, tr_y, shards=3)
    write_tfrecords(str(tmp_path), "validation", va_x, va_y, shards=2)
    cfg = DataConfig(dataset="imagenet_tfrecord", data_dir=str(tmp_path), channels=3, num_classes=10,
                     augment="inception", shuffle_buffer=64)
    assert data.num_examples(cfg, train=True) == 24 and data.num_examples(cfg, train=False) == 12
    x, y = next(iter(data.train_dataset(cfg, 8, data.Split(0, 2), seed=0)))
    assert x.shape == (4, 32, 32, 3) and y.dtype == tf.int32
    assert set(y.numpy()) <= set(tr_y)                 # label_offset 1 removed
    _check_val(cfg, va_x, va_y, 2)                      # 2 files, 2 ranks: one file each
    _check_val(cfg, va_x, va_y, 3)                      # 3 ranks > 2 files: records sharded


def test_imagenet_tfds_manual_dir(tmp_path):
    import tensorflow_datasets as tfds
    synsets = [s.strip() for s in open(tfds.core.tfds_path(
        "datasets/imagenet2012/labels.txt")).read().split()][:3]
    manual, data_dir = str(tmp_path / "manual"), str(tmp_path / "tfds")
    write_imagenet_tars(manual, synsets, per_class=4, n_val=6)
    cfg = DataConfig(dataset="imagenet_tfds", data_dir=data_dir, channels=3, num_classes=1000, augment="none")
    with pytest.raises(FileNotFoundError, match="not prepared under"):
        data.num_examples(cfg, train=True)
    data.main(["prepare-tfds", "--data-dir", data_dir, "--manual-dir", manual])
    assert data.num_examples(cfg, train=True) == 12 and data.num_examples(cfg, train=False) == 6
    ys = np.concatenate([y.numpy() for r in (0, 1) for _, y in data.val_dataset(cfg, 4, data.Split(r, 2))])
    all_synsets = open(tfds.core.tfds_path("datasets/imagenet2012/labels.txt")).read().split()
    val_synsets = open(tfds.core.tfds_path("datasets/imagenet2012/validation_labels.txt")).read().split()[:6]
    np.testing.assert_array_equal(np.sort(ys), np.sort([all_synsets.index(s) for s in val_synsets]))
    x, y = next(iter(data.train_dataset(cfg, 12, data.Split(0, 1), seed=0)))
    assert x.shape == (12, 32, 32, 3) and sorted(y.numpy().tolist()) == [0] * 4 + [1] * 4 + [2] * 4
