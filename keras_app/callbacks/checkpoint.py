"""Rank 0's per-epoch checkpoint (keras_app.checkpoint.CheckpointStore) with the run's records."""
from __future__ import annotations

import keras

__all__ = ["CheckpointCallback"]


class CheckpointCallback(keras.callbacks.Callback):
    """At every epoch end, save checkpoint ``epoch + 1`` atomically with ``{"epochs": recorder.epochs,
    "lr_steps": lr_callback.history}`` as its state (what a resumed run needs for summary.json and plots).
    Add it on rank 0 only, after MetricAverageCallback and the recorder."""

    def __init__(self, store, recorder, lr_callback):
        super().__init__()
        self.store, self.recorder, self.lr_callback = store, recorder, lr_callback

    def on_epoch_end(self, epoch, logs=None):
        self.store.save(epoch + 1, self.model, self.model.optimizer,
                        {"epochs": self.recorder.epochs,
                         "lr_steps": [list(s) for s in self.lr_callback.history]})
