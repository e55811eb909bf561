"""Batch-size control (Mikami et al. arXiv 1811.05233 s.3.1): the global batch follows an epoch schedule."""
from __future__ import annotations

import keras

from keras_app.schedules import BatchStage, batch_stages, global_batch_at, parse_batch_schedule

__all__ = ["BatchSizeControl"]


class BatchSizeControl(keras.callbacks.Callback):
    """Keeps the run on its batch-size schedule and writes ``global_batch`` into the epoch logs.

    Keras cannot change the batch of a running ``fit``; the trainer therefore calls ``fit`` once per
    stage (:meth:`stages`), rebuilding the input pipeline with :attr:`stage.global_batch` and passing
    ``initial_epoch=stage.start_epoch, epochs=stage.end_epoch``, and tells this callback the batch the
    pipeline yields (:meth:`set_pipeline_batch`). At each epoch begin the callback checks that the
    pipeline's batch is the scheduled one and raises RuntimeError otherwise (a wrong batch would silently
    break the linear scaling of the learning rate).

    Args:
        schedule: ``"0:256,2:512"`` or ``((0, 256), (2, 512))``: from epoch 0 the global batch is 256,
            from epoch 2 it is 512 (images per step, summed over all ranks).
    """

    def __init__(self, schedule):
        super().__init__()
        self.schedule = parse_batch_schedule(schedule) if isinstance(schedule, str) else tuple(schedule)
        self.pipeline_batch: int | None = None

    def stages(self, epochs: int) -> list[BatchStage]:
        return batch_stages(self.schedule, epochs)

    def global_batch(self, epoch: int) -> int:
        return global_batch_at(self.schedule, epoch)

    def set_pipeline_batch(self, global_batch: int) -> None:
        self.pipeline_batch = global_batch

    def on_epoch_begin(self, epoch, logs=None):
        expected = self.global_batch(epoch)
        if self.pipeline_batch != expected:
            raise RuntimeError(
                f"epoch {epoch}: the input pipeline yields global batch {self.pipeline_batch} but the batch "
                f"schedule {self.schedule} asks for {expected}: call fit once per stage of stages() and "
                f"set_pipeline_batch() after rebuilding the pipeline")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["global_batch"] = self.global_batch(epoch)
