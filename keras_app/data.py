"""Input pipelines (tf.data), sharded by rank: Fashion-MNIST IDX files, ImageNet TFRecord shards, TFDS
``imagenet2012``.

Each rank reads a disjoint 1/N of the training split and yields per-rank batches of
``global_batch // world_size`` images, shape ``[b, S, S, C]`` float32 (normalised to zero mean, unit
variance per channel), with int32 labels of shape ``[b]``. The validation split is sharded the same way
(every example is seen by exactly one rank; :mod:`keras_app.evaluate` sums the shards' losses and hits
with one all-reduce, so the metrics are exact whatever the shard sizes).

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

from horovod_torus import __version__
from horovod_torus.atomic import copy_file_atomic, write_text_atomic
from horovod_torus.launch import LaunchContext
from keras_app.config import DataConfig

__all__ = ["Split", "read_idx", "load_fashion_mnist", "train_dataset", "val_dataset", "num_examples",
           "pipeline_options", "prepare_imagenet_tfds", "file_plan", "record_owner", "FilePlan",
           "stage_tfrecords"]

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
def _fashion_preprocess(cfg: DataConfig, images, train: bool, seed=None):
    """uint8 [b, 28, 28] -> float32 [b, S, S, C]: normalise, pad to 32x32 (then resize if S != 32).
    Training augmentation is stateless, drawn from ``seed`` (int64 [2])."""
    x = (tf.cast(images, tf.float32)[..., None] / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD
    x = tf.pad(x, [[0, 0], [2, 2], [2, 2], [0, 0]])
    if cfg.image_size != 32:
        x = tf.image.resize(x, [cfg.image_size, cfg.image_size])
    if train and cfg.augment == "flip_crop":
        x = tf.image.resize_with_crop_or_pad(x, cfg.image_size + 8, cfg.image_size + 8)
        x = tf.image.stateless_random_crop(x, tf.stack([tf.shape(x)[0], cfg.image_size, cfg.image_size, 1]),
                                           seed=_sub_seed(seed, 1))
    if train and cfg.augment in ("flip", "flip_crop", "inception"):
        x = tf.image.stateless_random_flip_left_right(x, seed=_sub_seed(seed, 2))
    if cfg.channels == 3:
        x = tf.tile(x, [1, 1, 1, 3])
    return x


def _sub_seed(seed, k: int):
    """A distinct stateless seed per augmentation op (k) from one element seed."""
    return tf.stack([seed[0] + k, seed[1]])


def _decode_imagenet(cfg: DataConfig, encoded, train: bool, seed=None):
    """JPEG bytes -> float32 [S, S, C]. Train (augment="inception"): random-resized crop (8-100 % area,
    3/4-4/3 aspect) + flip, stateless from ``seed`` (int64 [2]); else central crop of 87.5 % and resize.
    Normalised with ImageNet mean/std."""
    size = cfg.image_size
    if train and cfg.augment == "inception":
        shape = tf.image.extract_jpeg_shape(encoded)
        begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape, tf.zeros([0, 0, 4]), seed=_sub_seed(seed, 1), min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
        image = tf.image.decode_and_crop_jpeg(encoded, window, channels=cfg.channels)
        image = tf.image.resize(image, [size, size])
    else:
        image = tf.image.decode_jpeg(encoded, channels=cfg.channels)
        image = tf.image.central_crop(tf.cast(image, tf.float32), 0.875)
        image = tf.image.resize(image, [size, size])
    if train and cfg.augment in ("flip", "flip_crop", "inception"):
        image = tf.image.stateless_random_flip_left_right(image, seed=_sub_seed(seed, 2))
    mean = tf.constant(IMAGENET_MEAN[:cfg.channels] if cfg.channels == 3 else (0.449,))
    std = tf.constant(IMAGENET_STD[:cfg.channels] if cfg.channels == 3 else (0.226,))
    return (tf.cast(image, tf.float32) / 255.0 - mean) / std


# -------------------------------------------------------------------------------------- record sources
#: Written by ``stage`` into a node-local copy that holds only the shards this node's ranks read: the
#: names of ALL shards of the source, so every rank computes the same file_plan.
MANIFEST = "shards.txt"


def tfrecord_files(cfg: DataConfig, train: bool) -> list[str]:
    """All ImageNet TFRecord shards of the split, sorted (from the MANIFEST of a staged copy when there is
    one): paths under ``cfg.data_dir``.

    Raises:
        FileNotFoundError: no shard matches (the message names the pattern and the expected layout).
    """
    prefix = "train-" if train else "validation-"
    manifest = os.path.join(cfg.data_dir, MANIFEST)
    if os.path.exists(manifest):
        with open(manifest) as fh:
            return sorted(os.path.join(cfg.data_dir, n) for n in fh.read().split() if n.startswith(prefix))
    pattern = os.path.join(cfg.data_dir, prefix + "*")
    files = sorted(f for f in glob.glob(pattern) if not f.endswith(".tmp"))
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


#: Resolution of a record's position inside its file (see :func:`file_plan`): 2**20 positions.
POSITIONS = 1 << 20
#: Odd multiplier of the Weyl sequence ``(i * WEYL) mod POSITIONS`` (golden ratio * 2**20): consecutive
#: records of a file land far apart, so any sub-range of positions gets its share of the records.
WEYL = 648_055


@dataclass(frozen=True)
class FilePlan:
    """Which files rank ``rank`` opens, and (when ranks share files) which of their records it keeps.

    ``whole``: the rank reads every record of each file in ``files``. Otherwise record ``i`` of file ``f``
    has the position ``q = (i * WEYL) mod POSITIONS`` and belongs to rank
    ``((f * POSITIONS + q) * size) // (num_files * POSITIONS)``: the files laid end to end are cut into
    ``size`` equal spans, one per rank, so every record has exactly one owner and each rank gets
    ``num_files / size`` files' worth of records (to within the sequence's discrepancy).
    """
    rank: int
    size: int
    num_files: int
    files: tuple[int, ...]
    whole: bool


def file_plan(num_files: int, rank: int, size: int) -> FilePlan:
    """Sharding of ``num_files`` record files over ``size`` ranks, for ``rank``.

    - ``num_files >= size``: whole files, round-robin (rank r reads files r, r + size, ...); no file is
      opened by two ranks.
    - ``size > num_files``: rank r owns the span ``[r * F / N, (r + 1) * F / N)`` of the F files laid end to
      end and opens only the files that span touches: at most ``ceil(F / N) + 1`` (i.e. 2) files, each
      shared by about ``N / F`` ranks that split its records (see :class:`FilePlan`).

    Raises ValueError for ``num_files < 1`` or a rank outside ``[0, size)``."""
    if num_files < 1:
        raise ValueError(f"no files to shard (num_files={num_files})")
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in [0, {size})")
    if num_files >= size:
        return FilePlan(rank, size, num_files, tuple(range(rank, num_files, size)), True)
    first = rank * num_files // size                      # floor(r F / N)
    last = -(-(rank + 1) * num_files // size) - 1          # ceil((r + 1) F / N) - 1
    return FilePlan(rank, size, num_files, tuple(range(first, min(last, num_files - 1) + 1)), False)


def record_owner(file_index, record_index, num_files: int, size: int):
    """The rank that keeps record ``record_index`` of file ``file_index`` when ranks share files (int64
    tensors or numpy integers; exact integer arithmetic)."""
    q = (record_index * WEYL) % POSITIONS
    return ((file_index * POSITIONS + q) * size) // (num_files * POSITIONS)


def _tfrecord_source(cfg: DataConfig, split: Split, train: bool) -> tuple[list[str], FilePlan]:
    files = tfrecord_files(cfg, train)
    return files, file_plan(len(files), split.rank, split.size)


def _read_tfrecords(cfg: DataConfig, files: list[str], plan: FilePlan, order=None) -> tf.data.Dataset:
    """Serialized records of this rank: whole files (in ``order``, a tensor of indices into plan.files, when
    given) or its share of the shared files."""
    mine = tf.constant([files[f] for f in plan.files])
    if plan.whole:
        names = tf.data.Dataset.from_tensor_slices(mine if order is None else tf.gather(mine, order))
        return names.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(plan.files)),
                                num_parallel_calls=_parallel(cfg), deterministic=True)
    parts = []
    for f in plan.files:
        ds = tf.data.TFRecordDataset(files[f]).enumerate()
        ds = ds.filter(lambda i, _r, f=f: tf.equal(record_owner(tf.constant(f, tf.int64), i, plan.num_files,
                                                                plan.size), plan.rank))
        parts.append(ds.map(lambda _i, r: r))
    out = parts[0]
    for p in parts[1:]:
        out = out.concatenate(p)
    return out


def _tfds_split(cfg: DataConfig, split: Split, train: bool) -> str:
    """This rank's contiguous slice of the TFDS split (``tfds.even_splits``): sizes differ by at most one
    record, and TFDS opens only the files overlapping the slice (at most ceil(files / ranks) + 1)."""
    import tensorflow_datasets as tfds
    return tfds.even_splits("train" if train else "validation", n=split.size, drop_remainder=False)[split.rank]


def _encoded_records(cfg: DataConfig, split: Split, train: bool) -> tf.data.Dataset:
    """(jpeg bytes, int32 label) pairs of this rank's shard, in a fixed order (see :func:`file_plan`)."""
    if cfg.dataset == "imagenet_tfrecord":
        files, plan = _tfrecord_source(cfg, split, train)
        return _read_tfrecords(cfg, files, plan).map(_parse_tfrecord(cfg), num_parallel_calls=_parallel(cfg))
    import tensorflow_datasets as tfds
    builder = _tfds_builder(cfg)
    ds = builder.as_dataset(split=_tfds_split(cfg, split, train),
                            decoders={"image": tfds.decode.SkipDecoding()}, shuffle_files=False)
    return ds.map(lambda ex: (ex["image"], tf.cast(ex["label"], tf.int32)))


def num_examples(cfg: DataConfig, train: bool) -> int:
    """Examples in the split (whole world), capped by ``train_examples`` / ``val_examples`` when > 0.
    Counted once per process for the same dataset, folder and cap (the start-up check and ``train`` both ask;
    Fashion-MNIST's count loads its IDX files, TFRecords' reads every shard)."""
    cap = cfg.train_examples if train else cfg.val_examples
    key = (cfg.dataset, os.path.abspath(cfg.data_dir), cap, train)
    if key not in _COUNTS:
        _COUNTS[key] = _count(cfg, cap, train)
    return _COUNTS[key]


_COUNTS: dict = {}  # (dataset, data folder, cap, train) -> num_examples


def _count(cfg: DataConfig, cap: int, train: bool) -> int:
    if cfg.dataset == "fashion_mnist":
        n = len(load_fashion_mnist(cfg.data_dir, "train" if train else "test")[1])
    elif cfg.dataset == "imagenet_tfds":
        n = _tfds_builder(cfg).info.splits["train" if train else "validation"].num_examples
    elif cap:
        return cap
    else:  # counting TFRecords costs one pass over the files; presets set train_examples to skip it
        n = sum(1 for _ in tf.data.TFRecordDataset(tfrecord_files(cfg, train)))
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


def _epoch_seed(seed: int, split: Split, epoch):
    """Stateless seed (int64 [2]) of one rank's epoch: the same on a resumed run."""
    return tf.stack([tf.constant(seed * 100_003 + split.rank, tf.int64), tf.cast(epoch, tf.int64)])


def _element_seed(epoch_seed, index):
    """Seed of element ``index`` of an epoch (augmentation): a pure function of (seed, rank, epoch, index)."""
    return tf.stack([epoch_seed[0], epoch_seed[1] * (1 << 32) + tf.cast(index, tf.int64)])


def _epochs(first_epoch: int, one_epoch) -> tf.data.Dataset:
    """``one_epoch(epoch)`` for epoch = first_epoch, first_epoch + 1, ... (endless)."""
    return tf.data.Dataset.range(first_epoch, 1 << 40).flat_map(one_epoch)


def train_dataset(cfg: DataConfig, global_batch: int, split: Split, seed: int, *,
                  steps_per_epoch: int | None = None, first_epoch: int = 0) -> tf.data.Dataset:
    """Endless, shuffled, augmented per-rank batches of ``global_batch // split.size`` (drop remainder),
    epoch after epoch from ``first_epoch``.

    Each epoch's order and augmentation are a pure function of (seed, rank, epoch): epoch e shuffles this
    rank's shard with seed (seed, rank, e) and augments element i with the stateless seed (seed, rank,
    e, i). So a run resumed at epoch k (``first_epoch=k``) sees exactly the batches the uninterrupted run
    saw from epoch k on. ``steps_per_epoch`` (the value given to ``fit``): an epoch is that many batches
    (the shard repeats when it is shorter); None: an epoch is one pass over the shard.

    Raises ValueError when global_batch is not divisible by the world size."""
    per_rank = _per_rank(global_batch, split)
    take = steps_per_epoch * per_rank if steps_per_epoch else None
    if cfg.dataset == "fashion_mnist":
        images, labels = load_fashion_mnist(cfg.data_dir, "train")
        n = cfg.train_examples or len(labels)
        shard = tf.data.Dataset.from_tensor_slices((images[:n][split.rank::split.size],
                                                   labels[:n][split.rank::split.size].astype(np.int32)))
        buffer = min(cfg.shuffle_buffer, n)

        def one_epoch(epoch):
            es = _epoch_seed(seed, split, epoch)
            ds = shard.shuffle(buffer, seed=es[0] * 7919 + es[1], reshuffle_each_iteration=False)
            if take:
                ds = ds.repeat().take(take)
            return ds.batch(per_rank, drop_remainder=True).enumerate().map(
                lambda i, b: (_element_seed(es, i), b[0], b[1]))

        ds = _epochs(first_epoch, one_epoch).map(
            lambda s, x, y: (_fashion_preprocess(cfg, x, True, s), y), num_parallel_calls=_parallel(cfg))
        return _finish(cfg, ds)
    if cfg.dataset == "imagenet_tfrecord":
        files, plan = _tfrecord_source(cfg, split, train=True)
        parse = _parse_tfrecord(cfg)

        def records(es):   # whole files: a new file order every epoch; shared files: a fixed order
            order = (tf.random.experimental.stateless_shuffle(tf.range(len(plan.files)), seed=es)
                     if plan.whole else None)
            return _read_tfrecords(cfg, files, plan, order).map(parse, num_parallel_calls=_parallel(cfg))
    else:
        fixed = _encoded_records(cfg, split, train=True)

        def records(es):
            return fixed
    cap = cfg.train_examples // split.size if cfg.train_examples else None

    def one_epoch(epoch):
        es = _epoch_seed(seed, split, epoch)
        ds = records(es)
        if cap:
            ds = ds.take(cap)
        ds = ds.shuffle(cfg.shuffle_buffer, seed=es[0] * 7919 + es[1], reshuffle_each_iteration=False)
        if take:
            ds = ds.repeat().take(take)
        return ds.enumerate().map(lambda i, r: (_element_seed(es, i), r[0], r[1]))

    ds = _epochs(first_epoch, one_epoch).map(lambda s, e, y: (_decode_imagenet(cfg, e, True, s), y),
                                             num_parallel_calls=_parallel(cfg))
    return _finish(cfg, ds.batch(per_rank, drop_remainder=True))


def val_dataset(cfg: DataConfig, batch: int, split: Split) -> tf.data.Dataset:
    """One pass over this rank's shard of the validation split, batches of ``batch`` (last one short).
    The shards are disjoint and together hold the whole split, possibly of different sizes: weight
    per-rank results by their example counts (keras_app.evaluate does). ``val_examples`` > 0 caps the
    split: Fashion-MNIST to exactly its first N images; the ImageNet readers each shard to ceil(N / ranks)
    records (about N in all; use 0 for exact whole-split metrics)."""
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


def stage_tfrecords(data_dir: str, dest: str, world_size: int, ranks) -> list[str]:
    """Copy into ``dest`` the TFRecord shards (train and validation) that ``ranks`` of a ``world_size``-rank
    job read (see :func:`file_plan`), and write ``dest/shards.txt`` naming every shard of ``data_dir``.
    Run once per node with that node's ranks; files already there with the same size are kept. Every copy
    and the manifest are written atomically (:mod:`horovod_torus.atomic`). Returns the copied names.

    Raises FileNotFoundError when ``data_dir`` has no shards."""
    os.makedirs(dest, exist_ok=True)
    names, copied = [], []
    for train in (True, False):
        files = tfrecord_files(DataConfig(dataset="imagenet_tfrecord", data_dir=data_dir), train)
        names += [os.path.basename(f) for f in files]
        needed = sorted({f for r in ranks for f in file_plan(len(files), r, world_size).files})
        for f in needed:
            src, dst = files[f], os.path.join(dest, os.path.basename(files[f]))
            if os.path.exists(dst) and os.path.getsize(dst) == os.path.getsize(src):
                continue
            copy_file_atomic(src, dst)
            copied.append(os.path.basename(dst))
    write_text_atomic(os.path.join(dest, MANIFEST), "\n".join(names) + "\n")
    return copied


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m keras_app.data")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare-tfds", help="prepare TFDS imagenet2012 from manual_dir (one time)")
    prep.add_argument("--data-dir", required=True)
    prep.add_argument("--manual-dir", required=True)
    stage = sub.add_parser(
        "stage", help="copy the TFRecord shards this node's ranks read to node-local storage (one process "
                      "per node: mpirun --map-by ppr:1:node; the node index is the launcher's rank)")
    stage.add_argument("--data-dir", required=True, help="the shared folder of train-*/validation-* shards")
    stage.add_argument("--dest", required=True, help="node-local folder (then --data-dir DEST for training)")
    stage.add_argument("--world-size", type=int, required=True, help="ranks of the training job")
    stage.add_argument("--ranks-per-node", type=int, required=True)
    stage.add_argument("--node", type=int, default=None, help="node index (default: the launcher's rank)")
    args = p.parse_args(argv)
    if args.command == "prepare-tfds":
        prepare_imagenet_tfds(args.data_dir, args.manual_dir)
        return
    node = LaunchContext.from_environ().rank if args.node is None else args.node
    first = node * args.ranks_per_node
    ranks = range(first, min(first + args.ranks_per_node, args.world_size))
    copied = stage_tfrecords(args.data_dir, args.dest, args.world_size, ranks)
    print(f"keras_app.data stage: node {node} (ranks {ranks.start}-{ranks.stop - 1}): {len(copied)} shards "
          f"copied to {args.dest}", flush=True)


if __name__ == "__main__":
    main()
