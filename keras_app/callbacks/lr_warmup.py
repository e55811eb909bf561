"""Per-step learning rate from a pure schedule function (warm-up, linear scaling, decay)."""
from __future__ import annotations

import functools

import keras

from keras_app.schedules import global_batch_at, learning_rate

__all__ = ["LearningRateWarmup"]


class LearningRateWarmup(keras.callbacks.Callback):
    """Sets ``optimizer.learning_rate`` before every step to ``lr_fn(epoch + step / steps_per_epoch,
    global_batch)`` and writes the last value as ``learning_rate`` into the epoch logs.

    The value depends only on (epoch, step in epoch, global batch), all of which Keras passes again after
    a resume (``initial_epoch``), so a resumed run gets exactly the learning rates of an uninterrupted
    one. ``steps_per_epoch`` is the ``steps_per_epoch`` given to ``fit`` (``self.params["steps"]``).
    ``history`` keeps ``(optimizer step, fractional epoch, learning rate, global batch)`` for every step
    of this process, for plots.

    Args:
        lr_fn: ``(epoch: float, global_batch: int) -> float``, e.g. :meth:`from_config`.
        batch_schedule: ``((epoch, global_batch), ...)`` giving the global batch of each epoch.
    """

    def __init__(self, lr_fn, batch_schedule):
        super().__init__()
        self.lr_fn, self.batch_schedule = lr_fn, tuple(batch_schedule)
        self.history: list[tuple[int, float, float, int]] = []
        self._epoch, self._lr = 0, None

    @classmethod
    def from_config(cls, optim, epochs: int, batch_schedule):
        """Warm-up over ``optim.warmup_epochs`` then ``optim.decay`` to epoch ``epochs`` (schedules.learning_rate)."""
        fn = functools.partial(learning_rate, base_lr=optim.base_lr, base_batch=optim.base_batch,
                               warmup_epochs=optim.warmup_epochs, total_epochs=epochs, decay=optim.decay,
                               final_lr_fraction=optim.final_lr_fraction,
                               warmup_start_fraction=optim.warmup_start_fraction)
        return cls(fn, batch_schedule)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        steps = self.params.get("steps")
        if not steps:
            raise ValueError("LearningRateWarmup needs fit(..., steps_per_epoch=N)")
        gb = global_batch_at(self.batch_schedule, self._epoch)
        epoch = self._epoch + batch / steps
        self._lr = float(self.lr_fn(epoch, gb))
        self.model.optimizer.learning_rate = self._lr
        self.history.append((int(self.model.optimizer.iterations.numpy()), epoch, self._lr, gb))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._lr is not None:
            logs["learning_rate"] = self._lr
