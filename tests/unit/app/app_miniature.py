"""Miniature ImageNet datasets in the real on-disk formats, built from Fashion-MNIST images as JPEG.

- TFRecord shards in the tensorflow/models ``build_imagenet_data.py`` layout: ``train-0000i-of-0000n``,
  ``validation-...``, features ``image/encoded`` (RGB JPEG), ``image/class/label`` (1-based), ...
- TFDS ``imagenet2012`` manual_dir: ``ILSVRC2012_img_train.tar`` (one ``<synset>.tar`` per class holding
  ``<synset>_<i>.JPEG``) and ``ILSVRC2012_img_val.tar`` (``ILSVRC2012_val_<8 digits>.JPEG``).
"""
import io
import os
import tarfile

import numpy as np
import tensorflow as tf

from keras_app.data import load_fashion_mnist

FMNIST = "/usr/share/datasets/fashion-mnist"


def fmnist_rgb(split, n, offset=0):
    images, labels = load_fashion_mnist(FMNIST, split)
    return np.repeat(images[offset:offset + n, :, :, None], 3, axis=-1), labels[offset:offset + n].astype(int)


def jpeg(image) -> bytes:
    return tf.io.encode_jpeg(tf.constant(image), quality=95).numpy()


def write_tfrecords(directory, prefix, images, labels, shards):
    """Write ``images`` (uint8 [n, h, w, 3]) with 1-based labels ``labels + 1`` into ``shards`` files."""
    os.makedirs(directory, exist_ok=True)
    for s in range(shards):
        path = os.path.join(directory, f"{prefix}-{s:05d}-of-{shards:05d}")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(s, len(images), shards):
                h, wd = images[i].shape[:2]
                feat = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg(images[i])])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[labels[i] + 1])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
                    "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[h])),
                    "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[wd])),
                }
                w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_imagenet_tars(manual_dir, synsets, per_class, n_val):
    """Train tar: ``per_class`` images for each synset (class k gets Fashion-MNIST images of label k);
    val tar: ``n_val`` images named ILSVRC2012_val_00000001.JPEG ... Returns the train labels per synset."""
    os.makedirs(manual_dir, exist_ok=True)
    with tarfile.open(os.path.join(manual_dir, "ILSVRC2012_img_train.tar"), "w") as outer:
        for k, synset in enumerate(synsets):
            images, labels = load_fashion_mnist(FMNIST, "train")
            picks = np.flatnonzero(labels == k)[:per_class]
            inner_bytes = io.BytesIO()
            with tarfile.open(fileobj=inner_bytes, mode="w") as inner:
                for j, i in enumerate(picks):
                    _add(inner, f"{synset}_{j}.JPEG", jpeg(np.repeat(images[i][:, :, None], 3, -1)))
            _add(outer, f"{synset}.tar", inner_bytes.getvalue())
    images, _ = fmnist_rgb("test", n_val)
    with tarfile.open(os.path.join(manual_dir, "ILSVRC2012_img_val.tar"), "w") as tar:
        for i in range(n_val):
            _add(tar, f"ILSVRC2012_val_{i + 1:08d}.JPEG", jpeg(images[i]))
