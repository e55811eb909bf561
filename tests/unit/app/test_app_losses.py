"""The label-smoothed loss equals Keras' categorical cross-entropy on one-hot targets, and the formula."""
import keras
import tensorflow as tf
import numpy as np
import pytest

from keras_app.losses import LabelSmoothedSparseCategoricalCrossentropy, label_smoothed_sparse_categorical_crossentropy


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("from_logits", [True, False])
def test_matches_keras_categorical_crossentropy(eps, from_logits):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(8, 5)).astype(np.float32)
    y_pred = logits if from_logits else np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = rng.integers(0, 5, size=8)
    onehot = np.eye(5, dtype=np.float32)[labels]
    ours = LabelSmoothedSparseCategoricalCrossentropy(eps, from_logits=from_logits)
    ref = keras.losses.CategoricalCrossentropy(label_smoothing=eps, from_logits=from_logits)
    assert float(ours(labels, y_pred)) == pytest.approx(float(ref(onehot, y_pred)), rel=1e-6)
    assert float(ours(labels[:, None], y_pred)) == pytest.approx(float(ref(onehot, y_pred)), rel=1e-6)
    # the formula: -sum_k q_k log softmax_k, q = (1 - eps) onehot + eps / K
    q = (1 - eps) * onehot + eps / 5
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_example = -(q * logp).sum(-1)
    np.testing.assert_allclose(label_smoothed_sparse_categorical_crossentropy(labels, y_pred, eps, from_logits),
                               per_example, rtol=1e-5)
    assert float(ours(labels, y_pred)) == pytest.approx(per_example.mean(), rel=1e-5)


def test_uniform_logits_and_bad_eps():
    assert float(LabelSmoothedSparseCategoricalCrossentropy(0.1, from_logits=True)(
        np.array([2]), np.zeros((1, 3), np.float32))) == pytest.approx(np.log(3))
    with pytest.raises(ValueError, match="label_smoothing=1.0 must be in"):
        LabelSmoothedSparseCategoricalCrossentropy(1.0)


def test_serialises():
    loss = LabelSmoothedSparseCategoricalCrossentropy(0.2, from_logits=True)
    back = keras.losses.deserialize(keras.losses.serialize(loss))
    assert (back.label_smoothing, back.from_logits) == (0.2, True)


@pytest.mark.parametrize("bad", [4096, -1, 10])
def test_label_out_of_range_raises_eagerly_naming_value_and_class_count(bad):
    loss = LabelSmoothedSparseCategoricalCrossentropy(0.1, from_logits=True)
    logits = np.zeros((3, 10), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        loss(np.array([1, bad, 2]), logits)
    assert f"label [{bad}] is outside [0, num_classes)" in str(err.value)
    assert "num_classes = 10" in str(err.value)
    assert float(loss(np.array([0, 9, 2]), logits)) == pytest.approx(np.log(10))   # edges are valid


def test_label_out_of_range_raises_in_tf_function_and_fit():
    loss = LabelSmoothedSparseCategoricalCrossentropy(0.1, from_logits=True)
    traced = tf.function(lambda y, p: loss(y, p))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label \[4096\] is outside"):
        traced(tf.constant([[4096], [3]]), tf.zeros((2, 10)))
    assert float(traced(tf.constant([[9], [3]]), tf.zeros((2, 10)))) == pytest.approx(np.log(10))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss=loss, jit_compile=False)
    x = np.ones((8, 4), np.float32)
    model.fit(x, np.arange(8) % 10, batch_size=4, epochs=1, verbose=0)     # in range: trains
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label \[-1\] .*num_classes = 10"):
        model.fit(x, np.array([0, 1, 2, 3, 4, 5, 6, -1]), batch_size=4, epochs=1, verbose=0)
