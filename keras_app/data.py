"""Input pipelines (tf.data), sharded by rank: Fashion-MNIST IDX files, ImageNet TFRecord shards, TFDS
``imagenet2012``.

Each rank reads a disjoint 1/N of the training split and yields per-rank batches of
``global_batch // world_size`` images, shape ``[b, S, S, C]`` float32 (normalised to zero mean, unit
variance per channel), with int32 labels of shape ``[b]``. The validation split is sharded the same way
(every example is seen by exactly one rank; the per-rank means are averaged by MetricAverageCallback).

One-time TFDS preparation (needs ``ILSVRC2012_img_train.tar`` and ``ILSVRC2012_img_val.tar``)::

    python -m keras_app.data prepare-tfds --data-dir DATA_DIR --manual-dir MANUAL_DIR
"""
from __future__ import annotations

import argparse
import glob
import gzip
import os
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from keras_app.config import DataConfig

__all__ = ["Split", "read_idx", "load_fashion_mnist", "train_dataset", "val_dataset", "num_examples",
           "pipeline_options", "prepare_imagenet_tfds"]

FASHION_MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                       "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530            # over the 60k training images, [0, 1]
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Split:
    """Where this rank reads from: ``rank`` of ``size`` ranks."""
    rank: int = 0
    size: int = 1


def read_idx(path: str) -> np.ndarray:
    """Read an IDX file (``.gz`` or not) into a numpy array of its stored dtype (uint8 for MNIST-style).

    Raises ValueError when the magic number is not an IDX one."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in dtypes:
        raise ValueError(f"{path} is not an IDX file (magic bytes {data[:4]!r})")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=dtypes[data[2]], offset=4 + 4 * ndim).reshape(dims)


def _find(data_dir: str, stem: str) -> str:
    for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise FileNotFoundError(
        f"Fashion-MNIST file {stem}[.gz] not found in {data_dir!r}: install Debian's package with "
        f"`apt-get install dataset-fashion-mnist` (files in /usr/share/datasets/fashion-mnist) or pass "
        f"--data-dir DIR holding the four IDX files")


def load_fashion_mnist(data_dir: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``uint8 [n, 28, 28]`` and labels ``uint8 [n]`` of split ``"train"`` (60k) or ``"test"`` (10k).

    Raises FileNotFoundError naming the path and the apt package when a file is missing."""
    images, labels = (read_idx(_find(data_dir, s)) for s in FASHION_MNIST_FILES[split])
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{data_dir}: {images.shape[0]} images but {labels.shape[0]} labels in {split}")
    return images, labels


# ---------------------------------------------------------------------------------------------- images
def _fashion_preprocess(cfg: DataConfig, images, train: bool):
    """uint8 [b, 28, 28] -> float32 [b, S, S, C]: normalise, pad to 32x32 (then resize if S != 32)."""
    x = (tf.cast(images, tf.float32)[..., None] / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    x = tf.pad(x, [[0, 0], [2, 2], [2, 2], [0, 0]])
    if cfg.image_size != 32:
        x = tf.image.resize(x, [cfg.image_size, cfg.image_size])
    if train and cfg.augment == "flip_crop":
        x = tf.image.resize_with_crop_or_pad(x, cfg.image_size + 8, cfg.image_size + 8)
        x = tf.image.random_crop(x, tf.stack([tf.shape(x)[0], cfg.image_size, cfg.image_size, 1]))
    if train and cfg.augment in ("flip", "flip_crop", "inception"):
        x = tf.image.random_flip_left_right(x)
    if cfg.channels == 3:
        x = tf.tile(x, [1, 1, 1, 3])
    return x


def _decode_imagenet(cfg: DataConfig, encoded, train: bool):
    """JPEG bytes -> float32 [S, S, C]. Train (augment="inception"): random-resized crop (8-100 % area,
    3/4-4/3 aspect) + flip; else central crop of 87.5 % and resize. Normalised with ImageNet mean/std."""
    size = cfg.image_size
    if train and cfg.augment == "inception":
        shape = tf.image.extract_jpeg_shape(encoded)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([0, 0, 4]), min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
        image = tf.image.decode_and_crop_jpeg(encoded, window, channels=cfg.channels)
        image = tf.image.resize(image, [size, size])
    else:
        image = tf.image.decode_jpeg(encoded, channels=cfg.channels)
        image = tf.image.central_crop(tf.cast(image, tf.float32), 0.875)
        image = tf.image.resize(image, [size, size])
    if train and cfg.augment in ("flip", "flip_crop", "inception"):
        image = tf.image.random_flip_left_right(image)
    mean = tf.constant(IMAGENET_MEAN[:cfg.channels] if cfg.channels == 3 else (0.449,))
    std = tf.constant(IMAGENET_STD[:cfg.channels] if cfg.channels == 3 else (0.226,))
    return (tf.cast(image, tf.float32) / 255.0 - mean) / std


# -------------------------------------------------------------------------------------- record sources
def _tfrecord_files(cfg: DataConfig, train: bool) -> list[str]:
    pattern = os.path.join(cfg.data_dir, "train-*" if train else "validation-*")
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(
            f"no ImageNet TFRecord shards match {pattern!r}: point --data-dir at the folder of "
            f"train-00000-of-01024 ... validation-00127-of-00128 (the tensorflow/models "
            f"build_imagenet_data.py layout)")
    return files


def _parse_tfrecord(cfg: DataConfig):
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, spec)
        return ex["image/encoded"], tf.cast(ex["image/class/label"] - cfg.label_offset, tf.int32)
    return parse


def _tfds_builder(cfg: DataConfig):
    import tensorflow_datasets as tfds
    builder = tfds.builder("imagenet2012", data_dir=cfg.data_dir)
    if not builder.is_prepared():
        raise FileNotFoundError(
            f"TFDS imagenet2012 is not prepared under {cfg.data_dir!r}: run once `python -m keras_app.data "
            f"prepare-tfds --data-dir {cfg.data_dir} --manual-dir DIR` with ILSVRC2012_img_train.tar and "
            f"ILSVRC2012_img_val.tar in DIR")
    return builder


def prepare_imagenet_tfds(data_dir: str, manual_dir: str) -> None:
    """One-time TFDS preparation of imagenet2012 from ``manual_dir`` (no download). Run on one process."""
    import tensorflow_datasets as tfds
    for name in ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"):
        if not os.path.exists(os.path.join(manual_dir, name)):
            raise FileNotFoundError(f"{os.path.join(manual_dir, name)} not found: TFDS imagenet2012 "
                                    f"needs it in --manual-dir (register at https://image-net.org)")
    builder = tfds.builder("imagenet2012", data_dir=data_dir)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))


def _encoded_records(cfg: DataConfig, split: Split, train: bool) -> tf.data.Dataset:
    """(jpeg bytes, int32 label) pairs of this rank's shard."""
    if cfg.dataset == "imagenet_tfrecord":
        files = _tfrecord_files(cfg, train)
        if len(files) >= split.size:
            ds = tf.data.Dataset.from_tensor_slices(files[split.rank::split.size])
            ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=_parallel(cfg))
        else:
            ds = tf.data.TFRecordDataset(files).shard(split.size, split.rank)
        return ds.map(_parse_tfrecord(cfg), num_parallel_calls=_parallel(cfg))
    import tensorflow_datasets as tfds
    builder = _tfds_builder(cfg)
    ds = builder.as_dataset(split="train" if train else "validation",
                            decoders={"image": tfds.decode.SkipDecoding()}, shuffle_files=False)
    return ds.shard(split.size, split.rank).map(lambda ex: (ex["image"], tf.cast(ex["label"], tf.int32)))


def num_examples(cfg: DataConfig, train: bool) -> int:
    """Examples in the split (whole world), capped by ``train_examples`` / ``val_examples`` when > 0."""
    cap = cfg.train_examples if train else cfg.val_examples
    if cfg.dataset == "fashion_mnist":
        n = len(load_fashion_mnist(cfg.data_dir, "train" if train else "test")[1])
    elif cfg.dataset == "imagenet_tfds":
        n = _tfds_builder(cfg).info.splits["train" if train else "validation"].num_examples
    elif cap:
        return cap
    else:  # counting TFRecords costs one pass over the files; presets set train_examples to skip it
        n = sum(1 for _ in tf.data.TFRecordDataset(_tfrecord_files(cfg, train)))
    return min(n, cap) if cap else n


def pipeline_options(cfg: DataConfig) -> tf.data.Options:
    """tf.data options of every pipeline: AUTOTUNE when ``cfg.pipeline_threads == 0``; else a private
    pool of that many threads per rank, autotuning off and one intra-op thread per map.

    Several ranks on a few cores (``make demo``: 4 ranks on 2 cores) pay for AUTOTUNE's default pool and
    its tuning thread in every process: measured 1,964 ms per step at global batch 512 with AUTOTUNE against
    1,646 ms with one private thread (4 ranks, 2x2 torus, ResNet-50 32x32, Adam, in a fit() harness; the
    preset comment in keras_app/config.py lists the runs). On a GPU node leave it at 0."""
    options = tf.data.Options()
    if cfg.pipeline_threads:
        options.autotune.enabled = False
        options.threading.private_threadpool_size = cfg.pipeline_threads
        options.threading.max_intra_op_parallelism = 1
    return options


def _parallel(cfg: DataConfig):
    return cfg.pipeline_threads or tf.data.AUTOTUNE


def _finish(cfg: DataConfig, ds: tf.data.Dataset) -> tf.data.Dataset:
    """Prefetch (2 batches with a fixed pool, else AUTOTUNE) and apply pipeline_options."""
    return ds.prefetch(2 if cfg.pipeline_threads else tf.data.AUTOTUNE).with_options(pipeline_options(cfg))


def train_dataset(cfg: DataConfig, global_batch: int, split: Split, seed: int) -> tf.data.Dataset:
    """Endless, shuffled, augmented per-rank batches of ``global_batch // split.size`` (drop remainder).

    Raises ValueError when global_batch is not divisible by the world size."""
    per_rank = _per_rank(global_batch, split)
    if cfg.dataset == "fashion_mnist":
        images, labels = load_fashion_mnist(cfg.data_dir, "train")
        n = cfg.train_examples or len(labels)
        ds = tf.data.Dataset.from_tensor_slices((images[:n][split.rank::split.size],
                                                labels[:n][split.rank::split.size].astype(np.int32)))
        ds = ds.shuffle(min(cfg.shuffle_buffer, n), seed=seed + split.rank).repeat()
        ds = ds.batch(per_rank, drop_remainder=True)
        ds = ds.map(lambda x, y: (_fashion_preprocess(cfg, x, True), y), num_parallel_calls=_parallel(cfg))
        return _finish(cfg, ds)
    ds = _encoded_records(cfg, split, train=True)
    if cfg.train_examples:
        ds = ds.take(cfg.train_examples // split.size)
    ds = ds.shuffle(cfg.shuffle_buffer, seed=seed + split.rank).repeat()
    ds = ds.map(lambda e, y: (_decode_imagenet(cfg, e, True), y), num_parallel_calls=_parallel(cfg))
    return _finish(cfg, ds.batch(per_rank, drop_remainder=True))


def val_dataset(cfg: DataConfig, batch: int, split: Split) -> tf.data.Dataset:
    """One pass over this rank's shard of the validation split, batches of ``batch`` (last one short)."""
    if cfg.dataset == "fashion_mnist":
        images, labels = load_fashion_mnist(cfg.data_dir, "test")
        n = cfg.val_examples or len(labels)
        ds = tf.data.Dataset.from_tensor_slices((images[:n][split.rank::split.size],
                                                labels[:n][split.rank::split.size].astype(np.int32)))
        return _finish(cfg, ds.batch(batch).map(lambda x, y: (_fashion_preprocess(cfg, x, False), y)))
    ds = _encoded_records(cfg, split, train=False)
    if cfg.val_examples:
        ds = ds.take(-(-cfg.val_examples // split.size))
    ds = ds.map(lambda e, y: (_decode_imagenet(cfg, e, False), y), num_parallel_calls=_parallel(cfg))
    return _finish(cfg, ds.batch(batch))


def _per_rank(global_batch: int, split: Split) -> int:
    if global_batch % split.size:
        raise ValueError(f"global batch {global_batch} is not divisible by the world size {split.size}: "
                         f"use a multiple of {split.size}")
    return global_batch // split.size


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m keras_app.data")
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare-tfds", help="prepare TFDS imagenet2012 from manual_dir (one time)")
    prep.add_argument("--data-dir", required=True)
    prep.add_argument("--manual-dir", required=True)
    args = p.parse_args(argv)
    prepare_imagenet_tfds(args.data_dir, args.manual_dir)


if __name__ == "__main__":
    main()
