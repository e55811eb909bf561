"""ResNet-50 from ``keras.applications`` (random initialisation), sized by the config."""
from __future__ import annotations

import keras

from keras_app.config import DataConfig, ModelConfig

__all__ = ["build_model", "build_resnet50", "build_tiny"]


def build_resnet50(data: DataConfig, model: ModelConfig, seed: int | None = None) -> keras.Model:
    """``keras.applications.ResNet50(weights=None)`` on ``[S, S, C]`` inputs, ``num_classes`` logits.

    The output layer has no softmax (it gives float32 logits ``[b, num_classes]``, also under a
    mixed-precision policy): pair it with a loss built with ``from_logits=True``. Every BatchNormalization layer gets ``momentum =
    model.bn_momentum``: Keras' default 0.99 averages over ~100 steps, so after a few hundred steps the
    moving statistics still lag the weights and inference-mode accuracy sits near chance (measured: 0.10
    in inference mode against 0.61 with batch statistics after a third of a Fashion-MNIST epoch; 0.66 for
    both with 0.9). 25,583,592 trainable parameters at 1,000 classes and 3 channels.
    """
    if seed is not None:
        keras.utils.set_random_seed(seed)
    base = keras.applications.ResNet50(
        include_top=False, weights=None, input_shape=(data.image_size, data.image_size, data.channels),
        pooling="avg")
    for layer in base.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = model.bn_momentum
    # Keras' include_top head (avg_pool + Dense "predictions"), in float32 under every policy: the
    # mixed-precision guide's rule for the last layer (float16 logits overflow and break the loss and
    # top-k metrics).
    logits = keras.layers.Dense(data.num_classes, dtype="float32", name="predictions")(base.output)
    return keras.Model(base.input, logits, name="resnet50")


def build_tiny(data: DataConfig, model: ModelConfig, seed: int | None = None) -> keras.Model:
    """Two strided convolutions with BatchNormalization, global average pooling and the float32 logits
    layer: the app's code path in seconds (tests, a first try of a cluster), not a model to train."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    x = inputs = keras.Input((data.image_size, data.image_size, data.channels))
    for i, filters in enumerate((16, 32)):   # explicit names: the checkpoints name variables by path
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False, name=f"conv{i}")(x)
        x = keras.layers.BatchNormalization(momentum=model.bn_momentum, name=f"bn{i}")(x)
        x = keras.layers.Activation("relu", name=f"relu{i}")(x)
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    logits = keras.layers.Dense(data.num_classes, dtype="float32", name="predictions")(x)
    return keras.Model(inputs, logits, name="tiny")


def build_model(data: DataConfig, model: ModelConfig, seed: int | None = None) -> keras.Model:
    """``model.arch``: ``resnet50`` (:func:`build_resnet50`) or ``tiny`` (:func:`build_tiny`)."""
    return {"resnet50": build_resnet50, "tiny": build_tiny}[model.arch](data, model, seed=seed)
