"""Keras 3 ResNet-50 training app on horovod_torus: batch-size control, LR warm-up, label smoothing.

Modules: config (dataclasses, presets, CLI), data (tf.data pipelines), model (ResNet-50), losses,
schedules (pure functions), callbacks, checkpoint, report (summary.json, plots), train (the CLI).
"""
import horovod_torus  # noqa: F401,E402  (before TensorFlow: the project's TensorFlow defaults, horovod_torus.tf_defaults)
