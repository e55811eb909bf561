"""Exact validation on uneven shards: sums of (loss, hits, examples) added over ranks, then divided once."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_app.evaluate import combine, shard_sums


def _one_hot_model():
    """A 'model' whose input is the predicted class: logits 5 at that class, 0 elsewhere."""
    return lambda c, training=False: tf.one_hot(c, 10) * 5.0


def test_ten_images_on_four_ranks_exact_top1():
    predicted = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0])
    labels = np.array([1, 0, 0, 4, 0, 0, 0, 0, 9, 9])             # 3 of 10 right: top-1 0.30
    model = _one_hot_model()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    shards = [slice(r, None, 4) for r in range(4)]                  # sizes 3, 3, 2, 2
    sums = [shard_sums(model, tf.data.Dataset.from_tensor_slices((predicted[s], labels[s])).batch(2), loss)
            for s in shards]
    assert [int(s[3]) for s in sums] == [3, 3, 2, 2]
    per_rank = [s[1] / s[3] for s in sums]
    assert np.mean(per_rank) == pytest.approx(0.2917, abs=1e-4)    # equal-weight average of rank means
    metrics = combine(np.sum(sums, axis=0))
    assert metrics["val_top1"] == pytest.approx(0.30, abs=1e-12) and metrics["val_examples"] == 10
    exact_loss = float(np.mean(loss(labels, tf.one_hot(predicted, 10) * 5.0, sample_weight=None).numpy()))
    assert metrics["val_loss"] == pytest.approx(exact_loss, rel=1e-6)
    assert metrics["val_top5"] >= metrics["val_top1"]


def test_empty_validation_is_an_error():
    with pytest.raises(ValueError, match="validation split is empty"):
        combine(np.zeros(4))
