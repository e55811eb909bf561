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


@pytest.mark.parametrize("files, ranks", [(1024, 2176), (1024, 2177), (128, 2176), (3, 7), (2, 3), (1, 4),
                                          (5, 5), (1024, 256), (10, 3)])
def test_file_plan_bounds_and_owners(files, ranks):
    """No rank opens more than ceil(files / ranks) + 1 files; when ranks share files every record's owner
    opens that file (none lost), each record has one owner (none doubled), and the shares are even."""
    plans = [data.file_plan(files, r, ranks) for r in range(ranks)]
    bound = -(-files // ranks) + 1
    assert max(len(p.files) for p in plans) <= bound
    if files >= ranks:        # whole files, each opened by one rank only
        assert all(p.whole for p in plans)
        assert sorted(f for p in plans for f in p.files) == list(range(files))
        return
    records = 1251                                       # an ImageNet train shard
    owners = data.record_owner(np.arange(files)[:, None], np.arange(records)[None, :], files, ranks)
    for f in range(files):
        for r in np.unique(owners[f]):
            assert f in plans[r].files, (f, r)
    counts = np.bincount(owners.ravel(), minlength=ranks)
    mean = files * records / ranks
    assert counts.sum() == files * records and counts.min() >= 0.9 * mean - 2 and counts.max() <= 1.1 * mean + 2


def test_tfrecords_more_ranks_than_files_each_record_once(tmp_path):
    """3 validation files of 20 records on 7 ranks: every rank opens at most 2 files and reads exactly the
    records record_owner gives it; together the ranks read every record once."""
    x, y = fmnist_rgb("test", 60)
    write_tfrecords(str(tmp_path), "validation", x, y, shards=3)
    cfg = DataConfig(dataset="imagenet_tfrecord", data_dir=str(tmp_path), channels=3, num_classes=10)
    files = data.tfrecord_files(cfg, train=False)
    by_file = [[r.numpy() for r in tf.data.TFRecordDataset(f)] for f in files]
    seen = []
    for rank in range(7):
        plan = data.file_plan(3, rank, 7)
        assert len(plan.files) <= 2 and not plan.whole
        got = [r.numpy() for r in data._read_tfrecords(cfg, files, plan)]
        expect = [rec for f in plan.files for i, rec in enumerate(by_file[f])
                  if data.record_owner(f, i, 3, 7) == rank]
        assert got == expect and 0 < len(got)
        seen += got
    assert sorted(seen) == sorted(rec for recs in by_file for rec in recs)     # none lost, none doubled
    labels = np.concatenate([b[1].numpy() for r in range(7) for b in data.val_dataset(cfg, 4, data.Split(r, 7))])
    np.testing.assert_array_equal(np.sort(labels), np.sort(y))


@pytest.mark.parametrize("dataset", ["fashion_mnist", "imagenet_tfrecord"])
def test_resumed_epoch_continues_the_data_order(tmp_path, dataset):
    """Batches from epoch 1 on are the same whether the pipeline started at epoch 0 or at 1 (a resume),
    augmentation included; epochs differ from each other."""
    if dataset == "fashion_mnist":
        cfg = DataConfig(train_examples=48, augment="flip_crop", shuffle_buffer=48)
    else:
        tr_x, tr_y = fmnist_rgb("train", 48)
        write_tfrecords(str(tmp_path), "train", tr_x, tr_y, shards=2)
        cfg = DataConfig(dataset="imagenet_tfrecord", data_dir=str(tmp_path), channels=3, augment="inception",
                         shuffle_buffer=48)
    def batches(first, n):
        ds = data.train_dataset(cfg, 8, data.Split(1, 2), seed=5, steps_per_epoch=3, first_epoch=first)
        return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]
    full, resumed = batches(0, 9), batches(1, 6)
    for (xa, ya), (xb, yb) in zip(full[3:], resumed):
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa, xb)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(full[:3], full[3:6]))


def test_stage_copies_only_the_nodes_shards(tmp_path):
    """`python -m keras_app.data stage`: each node gets the shards its ranks read plus the manifest of all
    shards, and every rank reads from its node's copy exactly what it reads from the shared folder."""
    src = tmp_path / "shared"
    x, y = fmnist_rgb("train", 40)
    write_tfrecords(str(src), "train", x, y, shards=8)
    write_tfrecords(str(src), "validation", x[:12], y[:12], shards=2)
    nodes, per_node = 2, 3                       # 6 ranks: 8 train files (whole), 2 val files (shared)
    for node in range(nodes):
        dest = tmp_path / f"node{node}"
        data.main(["stage", "--data-dir", str(src), "--dest", str(dest), "--world-size", "6",
                   "--ranks-per-node", str(per_node), "--node", str(node)])
        staged = sorted(f for f in os.listdir(dest) if f != data.MANIFEST)
        ranks = range(node * per_node, (node + 1) * per_node)
        want = sorted({f"train-{f:05d}-of-00008" for r in ranks for f in data.file_plan(8, r, 6).files} |
                      {f"validation-{f:05d}-of-00002" for r in ranks for f in data.file_plan(2, r, 6).files})
        assert staged == want and len(staged) < 10
        for r in ranks:
            for train in (True, False):
                shared = DataConfig(dataset="imagenet_tfrecord", data_dir=str(src))
                local = DataConfig(dataset="imagenet_tfrecord", data_dir=str(dest))
                assert len(data.tfrecord_files(local, train)) == len(data.tfrecord_files(shared, train))
                a = [e.numpy() for e, _ in data._encoded_records(shared, data.Split(r, 6), train)]
                b = [e.numpy() for e, _ in data._encoded_records(local, data.Split(r, 6), train)]
                assert a == b and a
