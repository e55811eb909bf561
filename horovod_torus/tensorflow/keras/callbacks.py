"""Horovod's Keras callbacks, working on Keras 3.

Differences from ``horovod.tensorflow.keras.callbacks`` (0.28.1), which target Keras 2: the learning rate
is read and set through ``optimizer.learning_rate`` (Keras 3 removed ``.lr``); variables are broadcast
with :func:`horovod_torus.tensorflow.broadcast_variables` (Keras 3 variables are not ``tf.Variable``),
at ``on_train_begin`` when the model is built, together with the optimizer state (built there if Keras
has not built it yet); metrics are averaged in ONE grouped all-reduce through a strategy.
"""
from __future__ import annotations

import math
import warnings
import zlib

import horovod.tensorflow as _hvd
import keras
import numpy as np
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY, resolve_strategy
from horovod_torus.tensorflow.keras.optimizer import rank_local_variables
from horovod_torus.tensorflow.keras.schedules import schedule_lr, warmup_multiplier
from horovod_torus.tensorflow.reductions import allreduce, grouped_allreduce
from horovod_torus.tensorflow.variables import broadcast_variables

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback", "StopTogetherCallback"]


def _require_init(cls_name: str) -> None:
    if not _hvd.is_initialized():
        raise RuntimeError(f"{cls_name} was created before Horovod was initialised: call hvd.init() "
                           f"(import horovod_torus.tensorflow.keras as hvd) first")


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the model's weights and the optimizer's state from ``root_rank`` once, before training.

    What is sent: ``model.weights`` (trainable and non-trainable weights, e.g. batch-norm statistics) and
    ``optimizer.variables``. What is NOT sent: the random state of the model's layers (the Keras
    ``SeedGenerator`` state of Dropout, RandomFlip, GaussianNoise..., which ``model.variables`` also
    lists) and metric state: each rank keeps its own, so the ranks draw different dropout masks and
    augmentations, as data parallelism needs. That random state comes from each rank's own seed: seed
    every rank differently (``keras.utils.set_random_seed(seed + hvd.rank())``; the weights still start
    equal, from the broadcast), or leave Keras unseeded (random per process).

    At ``on_train_begin`` (model built: the usual case in Keras 3, whose ``fit`` builds model and
    optimizer first) or else after the first batch (a subclassed model built by its first call, as
    Horovod does). The optimizer is built first if needed, so its lazily created slots (momentum, Adam
    moments, iterations, learning rate) are sent too: a rank-0 checkpoint restore reaches every rank.

    Args:
        root_rank: rank whose values every rank receives.
        device: ``tf.device`` of the broadcast ('' = TensorFlow's choice).
        local_variables: variables that are not broadcast (each rank keeps its own).

    Raises:
        RuntimeError: created before ``hvd.init()``. ValueError: root_rank outside [0, size).
    """

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        _require_init(type(self).__name__)
        if isinstance(root_rank, bool) or not isinstance(root_rank, int) or \
                not 0 <= root_rank < _hvd.size():
            raise ValueError(f"root_rank={root_rank!r} must be an int in [0, {_hvd.size()})")
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local = {}
        for v in local_variables or []:
            self.register_local_var(v)

    def register_local_var(self, var):
        """Exclude ``var`` from the broadcast."""
        self._local[id(var)] = var

    def _broadcast(self):
        model = self.model
        opt = getattr(model, "optimizer", None)
        if opt is not None and not opt.built:
            opt.build(model.trainable_variables)
        variables = [v for v in model.weights if id(v) not in self._local]   # no seeds, no metrics
        if opt is not None:   # not the gradient accumulators: each rank's own partial sum (a later fit's callback)
            local = self._local.keys() | {id(v) for v in rank_local_variables(opt)}
            variables += [v for v in opt.variables if id(v) not in local]
        with tf.device(self.device):
            broadcast_variables(variables, root_rank=self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and self.model.built:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Average every metric in the epoch's logs over all ranks (in place, before later callbacks).

    Put it before the callbacks that read metrics (checkpoint, early stopping, CSV logger). All metrics
    travel as float64 in ONE grouped all-reduce through ``strategy`` (keyword-only; ``"torus"``); a
    scalar comes back as a Python float, an array metric (e.g. per-class F1) as a numpy array.
    The ranks first check (one small all-gather) that they hold the same metric names, and raise
    ValueError on every rank if not, instead of hanging.
    """

    def __init__(self, device='', *, strategy=DEFAULT_STRATEGY):
        super().__init__()
        _require_init(type(self).__name__)
        resolve_strategy(strategy)
        self.device = device
        self.strategy = strategy

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        names = sorted(logs)
        digest = zlib.crc32("\n".join(names).encode()) | (len(names) << 32)
        gathered = _hvd.allgather(tf.constant([digest], tf.int64), name="MetricAverageCallback_names")
        if len(set(gathered.numpy().tolist())) != 1:
            raise ValueError(f"MetricAverageCallback: ranks log different metrics at epoch {epoch} "
                             f"(this rank: {names}); every rank must compile the same metrics")
        if not names:
            return
        values = [tf.constant(np.asarray(logs[k], np.float64)) for k in names]
        with tf.device(self.device):
            averaged = grouped_allreduce(values, op=_hvd.Average, strategy=self.strategy)
        for k, v in zip(names, averaged):
            logs[k] = float(v.numpy()) if v.shape.rank == 0 else v.numpy()


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set ``optimizer.learning_rate = initial_lr * multiplier(epoch)`` inside [start_epoch, end_epoch).

    Same parameters as Horovod's. ``multiplier``: a float m (factor ``m ** (epoch - start_epoch)``) or a
    function of the epoch (fractional when ``staircase=False``, changed every batch). The rate depends
    only on the epoch and batch numbers Keras passes, so ``fit(initial_epoch=k)`` resumes on the right
    value. At each epoch end the rate is written to ``logs["lr"]`` (Horovod's key) and
    ``logs["learning_rate"]`` (Keras 3's).

    ``momentum_correction`` is not applied on Keras 3: the optimizers' momentum is a Python float that is
    compiled into the train step, so changing it between batches has no effect; a warning says so when
    the optimizer has a non-zero momentum.

    Raises:
        RuntimeError: created before ``hvd.init()``. ValueError: ``initial_lr`` is None, or
        steps_per_epoch cannot be found. TypeError: the optimizer's learning rate is a schedule.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        _require_init(type(self).__name__)
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required (the target learning rate, e.g. "
                             "0.1 * hvd.size())")
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None

    def _optimizer(self):
        opt = self.model.optimizer
        if isinstance(getattr(opt, "_learning_rate", None),
                      keras.optimizers.schedules.LearningRateSchedule) or \
                isinstance(getattr(getattr(opt, "inner_optimizer", None), "_learning_rate", None),
                           keras.optimizers.schedules.LearningRateSchedule):
            raise TypeError(f"{type(self).__name__} sets optimizer.learning_rate, but optimizer "
                            f"{opt.name!r} was built with a LearningRateSchedule; pass a float "
                            f"learning rate")
        return opt

    def on_train_begin(self, logs=None):
        opt = self._optimizer()
        if self.momentum_correction and float(getattr(opt, "momentum", 0.0) or 0.0) != 0.0:
            warnings.warn(f"{type(self).__name__}: momentum_correction is not applied on Keras 3 (the "
                          f"momentum is compiled into the train step); pass momentum_correction=False "
                          f"to silence this", stacklevel=2)
        if not self.staircase and not self.steps_per_epoch:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(f"{type(self).__name__} could not find the number of steps per epoch "
                                 f"(fit got a dataset of unknown length): pass steps_per_epoch=")
            self.steps_per_epoch = steps

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def _lr_for(self, epoch, batch):
        return schedule_lr(self.initial_lr, self.multiplier, epoch, batch, start_epoch=self.start_epoch,
                           end_epoch=self.end_epoch, staircase=self.staircase,
                           steps_per_epoch=self.steps_per_epoch)

    def on_train_batch_begin(self, batch, logs=None):
        lr = self._lr_for(self.current_epoch, batch)
        if lr is not None:
            self.model.optimizer.learning_rate = lr

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            logs["lr"] = logs["learning_rate"] = lr


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Gradual warm-up (Goyal et al. 2017) from ``initial_lr / size`` to ``initial_lr`` over
    ``warmup_epochs`` epochs, changed every batch (see :func:`schedules.warmup_multiplier` for the exact
    formula, Horovod's). ``initial_lr`` is the target rate, already scaled by the number of ranks.
    Same parameters as Horovod's; resume-safe (``fit(initial_epoch=k)`` continues the ramp at epoch k).
    ``warmup_epochs`` may be fractional (e.g. 0.5): the rate reaches exactly ``initial_lr`` on the last
    batch before that fractional epoch and is not changed afterwards (it never overshoots the target).
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        super().__init__(initial_lr, self._multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        if warmup_epochs <= 0:
            raise ValueError(f"warmup_epochs={warmup_epochs!r} must be > 0")
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def _multiplier(self, epoch):
        return warmup_multiplier(epoch, _hvd.size(), self.warmup_epochs, self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == math.ceil(self.end_epoch) - 1 and self.verbose > 0 and _hvd.rank() == 0:
            lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {lr:g}.")


class StopTogetherCallback(keras.callbacks.Callback):
    """Stop every rank at the same step when any rank stops: a rank-dependent early stop never leaves the
    other ranks waiting in the next all-reduce.

    Keras decides to stop on each rank alone: ``TerminateOnNaN`` when that rank's loss is not finite,
    ``EarlyStopping`` on that rank's metric, any callback that sets ``model.stop_training``. A rank that
    leaves ``fit`` while the others start the next step leaves them blocked in the next gradient
    all-reduce. This callback all-reduces the decision: at every batch end and every epoch end, one small
    all-reduce (float32, one element per rank, op Sum, ``strategy`` "ring" = Horovod's own all-reduce)
    tells every rank which ranks set ``model.stop_training`` and which saw a non-finite ``logs["loss"]``;
    if any did, every rank sets ``model.stop_training`` and leaves ``fit`` after the same batch (Keras
    then still runs that epoch's validation and ``on_epoch_end`` on every rank, in step).

    Put it LAST in the callback list, after every callback that may set ``model.stop_training``: Keras
    calls callbacks in list order and checks ``stop_training`` right after the batch-end callbacks, so a
    stop requested by a callback placed after this one would not be shared. Create it on every rank.

    Args:
        on_nan: what a non-finite (NaN or infinite) ``logs["loss"]`` on any rank does after a batch:
            ``"stop"`` (default): every rank stops after this batch (``TerminateOnNaN`` on all ranks);
            ``"raise"``: every rank raises FloatingPointError at this batch end, so the epoch-end callbacks
            (e.g. a checkpoint of NaN weights) do not run; ``None``: the loss is not examined.
        strategy: keyword-only; the all-reduce strategy of the vote (``"ring"``).
        verbose: 1: rank 0 prints which ranks stopped the run, and when.

    Attributes:
        stopped: None, or ``{"epoch", "batch" (None at an epoch end), "stop_ranks", "nan_ranks"}`` of the
            step at which every rank stopped (the same on every rank).

    Raises:
        RuntimeError: created before ``hvd.init()``. ValueError: a bad ``on_nan``.
        FloatingPointError: ``on_nan="raise"`` and a rank's loss was not finite (on every rank).

    Cost: one all-reduce of ``4 * size`` bytes per batch (a latency-bound message next to the step's
    gradient all-reduce).
    """

    async_safe = False          # its all-reduce must run in step with the training loop

    def __init__(self, on_nan="stop", *, strategy="ring", verbose=0):
        super().__init__()
        _require_init(type(self).__name__)
        if on_nan not in ("stop", "raise", None):
            raise ValueError(f"on_nan={on_nan!r} must be 'stop', 'raise' or None")
        resolve_strategy(strategy)
        self.on_nan, self.strategy, self.verbose = on_nan, strategy, verbose
        self.stopped = None
        self._epoch = 0

    def on_train_begin(self, logs=None):
        self.stopped = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _vote(self, logs, batch):
        """All-reduce this rank's (stop, non-finite loss) flags; apply the common decision."""
        if self.stopped is not None:        # already decided, identically on every rank: no vote needed
            self.model.stop_training = True
            return
        stop = bool(self.model.stop_training)
        nan = False
        if self.on_nan is not None and logs is not None and logs.get("loss") is not None:
            nan = not bool(np.all(np.isfinite(np.asarray(logs["loss"], np.float64))))
        flags = np.zeros([_hvd.size()], np.float32)
        flags[_hvd.rank()] = 1.0 * stop + 2.0 * nan
        codes = allreduce(tf.constant(flags), op=_hvd.Sum, strategy=self.strategy).numpy().astype(int)
        if not codes.any():
            return
        where = f"epoch {self._epoch}" + ("" if batch is None else f" batch {batch}")
        self.stopped = {"epoch": self._epoch, "batch": batch,
                        "stop_ranks": [int(r) for r in np.flatnonzero(codes & 1)],
                        "nan_ranks": [int(r) for r in np.flatnonzero(codes & 2)]}
        self.model.stop_training = True
        if self.stopped["nan_ranks"] and self.on_nan == "raise":
            raise FloatingPointError(f"non-finite loss on rank(s) {self.stopped['nan_ranks']} at {where}: "
                                     f"training stopped on every rank")
        if self.verbose and _hvd.rank() == 0:
            print(f"\nStopTogetherCallback: {where}: every rank stops (stop requested by rank(s) "
                  f"{self.stopped['stop_ranks']}, non-finite loss on rank(s) {self.stopped['nan_ranks']})",
                  flush=True)

    def on_train_batch_end(self, batch, logs=None):
        self._vote(logs, batch)

    def on_epoch_end(self, epoch, logs=None):
        self._vote(None, None)
