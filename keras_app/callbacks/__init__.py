"""Callbacks of the app: batch-size control and per-step learning-rate warm-up (importable by users)."""
from keras_app.callbacks.batch_size import BatchSizeControl  # noqa: F401
from keras_app.callbacks.lr_warmup import LearningRateWarmup  # noqa: F401
from keras_app.callbacks.checkpoint import CheckpointCallback  # noqa: F401
