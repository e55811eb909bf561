"""ResNet-50 from ``keras.applications`` (random initialisation), sized by the config."""
from __future__ import annotations

import keras

from keras_app.config import DataConfig, ModelConfig

__all__ = ["build_resnet50"]


def build_resnet50(data: DataConfig, model: ModelConfig, seed: int | None = None) -> keras.Model:
    """``keras.applications.ResNet50(weights=None)`` on ``[S, S, C]`` inputs, ``num_classes`` logits.

    The output layer has no softmax (it gives logits): pair it with a
    loss built with ``from_logits=True``. Every BatchNormalization layer gets ``momentum =
    model.bn_momentum``: Keras' default 0.99 averages over ~100 steps, so after a few hundred steps the
    moving statistics still lag the weights and inference-mode accuracy sits near chance (measured: 0.10
    in inference mode against 0.61 with batch statistics after a third of a Fashion-MNIST epoch; 0.66 for
    both with 0.9). 25,583,592 trainable parameters at 1,000 classes and 3 channels.
    """
    if seed is not None:
        keras.utils.set_random_seed(seed)
    net = keras.applications.ResNet50(
        include_top=True, weights=None, input_shape=(data.image_size, data.image_size, data.channels),
        classes=data.num_classes, classifier_activation=None)
    for layer in net.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = model.bn_momentum
    return net
