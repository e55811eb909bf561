"""Elastic training on the torus: Horovod's elastic engine, a Keras 3 state, a torus rebuilt at every reset.

Under ``horovodrun --gloo --min-np A --max-np B --host-discovery-script S``::

    import horovod_torus.tensorflow.keras as hvd
    from horovod_torus.tensorflow.keras import elastic

    hvd.init()                                   # the default grid of each world (or grid=rule)
    model.compile(optimizer=hvd.DistributedOptimizer(opt), ...)
    state = elastic.KerasState(model, epoch=0, batch=0)

    @elastic.run
    def train(state):
        ...                                      # fit from (state.epoch, state.batch); state.commit() often

    train(state)

What differs from ``horovod.tensorflow.elastic`` (horovod/tensorflow/elastic.py, Horovod 0.28.1):

* :func:`run` turns every error that means "a rank is gone" into ``HorovodInternalError`` (a reset), from
  any Horovod op (Horovod's own wrapper knows only HorovodAllreduce/Allgather/Broadcast and *returns None*
  for every other ``tf.errors.UnknownError``, e.g. one from ``HorovodAlltoall``, which the elastic torus
  uses), and re-raises everything else: a :class:`horovod_torus.stall.TorusStallError` (a skipped call,
  which a reset would not cure) and any other exception end the job.
* :func:`reset` (Horovod's is ``shutdown(); init()``) re-initialises through
  :func:`horovod_torus.tensorflow.runtime.init` with the arguments of the first ``init``: the grid
  re-planned for the new world (the default grid, or the user's rule ``grid=lambda size, local_size:``),
  the same agreement check as at ``init``, a new :class:`TorusAllreduce`. Surviving processes keep their
  PIDs: nothing is relaunched.
* :class:`KerasState` holds a Keras 3 model's and optimizer's variables (every ``optimizer.variables``:
  iterations, slots, a DistributedOptimizer's gradient accumulators) and any Python values (epoch, batch,
  schedule position); Horovod's ``TensorFlowKerasState`` is Keras 2 code.

The torus of an elastic job runs on Horovod's global process set (why:
:mod:`horovod_torus.tensorflow.elastic_transport`). Only ``horovodrun --gloo`` can grow or shrink a job:
:func:`run` raises ValueError under any other launcher.
"""
from __future__ import annotations

import functools
import hashlib
import time

import horovod.tensorflow as _hvd
import keras
import numpy as np
import tensorflow as tf
from horovod.common.elastic import ObjectState, run_fn
from horovod.tensorflow.elastic import TensorFlowState
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from horovod_torus.launch import LaunchContext
from horovod_torus.stall import TorusStallError
from horovod_torus.tensorflow import runtime
from horovod_torus.tensorflow.variables import broadcast_variables

__all__ = ["run", "reset", "KerasState", "CommitEvery", "is_rank_lost", "check_elastic_launch",
           "last_world_change", "RANK_LOST_MARKERS", "TensorFlowKerasState", "TensorFlowState", "ObjectState"]

#: Substrings of the messages of errors that mean a rank is gone: Horovod's status after its background
#: loop failed (horovod/common/common.h SHUT_DOWN_ERROR), and Gloo's transport errors: a peer's socket
#: closed, or a receive/send that waited ``HOROVOD_GLOO_TIMEOUT_SECONDS`` for a peer that left
#: (gloo/transport/tcp/unbound_buffer.cc "Timed out waiting ...ms for recv operation to complete", pair.cc
#: "Application timeout caused pair closure": what a rank whose partner went into its own reset sees).
RANK_LOST_MARKERS = ("Horovod has been shut down", "Connection reset by peer", "Connection closed by peer",
                     "has been removed from elastic job", "Application timeout caused pair closure",
                     "for recv operation to complete", "for send operation to complete")

_last_change: dict = {}


def is_rank_lost(exc: BaseException) -> bool:
    """True for an error that means a rank is gone (reset and continue), False for every other error.

    ``HorovodInternalError``, or an exception whose message (or a cause's) holds one of
    :data:`RANK_LOST_MARKERS`; never a :class:`TorusStallError` (a skipped call, not a dead rank)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, TorusStallError):
            return False
        if isinstance(exc, HorovodInternalError):
            return True
        message = exc.message if isinstance(exc, tf.errors.OpError) else str(exc)
        if any(m in (message or "") for m in RANK_LOST_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def check_elastic_launch(environ=None) -> None:
    """Raise ValueError unless this process was started by an elastic ``horovodrun --gloo``."""
    context = LaunchContext.from_environ(environ)
    if not context.elastic:
        raise ValueError(
            f"horovod_torus elastic training needs an elastic horovodrun launch (horovodrun --gloo --min-np A "
            f"--max-np B --host-discovery-script S ...), but this process was started by {context.launcher!r}: "
            f"under mpirun (and horovodrun --mpi) Horovod's reset cannot grow or shrink the job")


def last_world_change() -> dict:
    """The last reset seen by this process: ``time`` (Unix seconds), ``old_size``, ``old_grid``,
    ``new_size``, ``new_grid`` (grids as ``"XxY"``); empty before the first reset."""
    return dict(_last_change)


def reset() -> None:
    """Horovod's reset for the torus: shut Horovod down (no closing wait: a rank may be gone) and run
    :func:`horovod_torus.tensorflow.runtime.init` again with the first call's arguments."""
    old_size, old_grid = _hvd.size(), str(runtime.grid()) if runtime.current_torus() else None
    runtime.shutdown_without_wait()
    runtime.reinit()
    _last_change.clear()
    _last_change.update(time=time.time(), old_size=old_size, old_grid=old_grid, new_size=_hvd.size(),
                        new_grid=str(runtime.grid()))


def run(func):
    """Decorator: run ``func(state, ...)`` elastically (Horovod's ``run_fn`` with :func:`reset`).

    On a lost rank (:func:`is_rank_lost`) the state is restored to its last commit, the torus rebuilt for
    the new world, the state synchronised from rank 0 and ``func`` called again; on a host change announced
    at a commit (``HostsUpdatedInterrupt``) the same without the restore. Every other exception propagates.

    Raises:
        ValueError: at the call, when the job is not an elastic ``horovodrun --gloo`` launch.
    """
    def guarded(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (HorovodInternalError, HostsUpdatedInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 (classified, then re-raised or turned into a reset)
            if is_rank_lost(exc):
                raise HorovodInternalError(exc) from exc
            raise

    runner = run_fn(guarded, reset)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        check_elastic_launch()
        return runner(state, *args, **kwargs)
    return wrapper


class KerasState(ObjectState):
    """The state of a Keras 3 model and its optimizer, with Python values, for :func:`run`.

    Args:
        model: a built Keras 3 model.
        optimizer: its optimizer (None: ``model.optimizer``); built here if it is not yet, so that every
            rank, new ones included, has the same variables to synchronise.
        **kwargs: Python values kept with the variables (e.g. ``epoch=0, batch=0``): attributes of the
            state, committed, restored and synchronised with them.

    ``commit()`` copies every variable of ``model.variables + optimizer.variables`` to host memory (numpy)
    and checks for host changes (raising ``HostsUpdatedInterrupt`` on every rank together); ``restore()``
    assigns the last commit back; ``sync()`` broadcasts rank 0's variables and values and commits them.

    Raises:
        ValueError: the model is not built.
    """

    def __init__(self, model, optimizer=None, **kwargs):
        if not model.built:
            raise ValueError(f"KerasState: model {model.name!r} is not built: build it (model.build(shape), "
                             f"or call it on a batch) before making the state")
        self.model = model
        self.optimizer = optimizer or model.optimizer
        if self.optimizer is None:
            raise ValueError("KerasState: the model has no optimizer: compile it first or pass optimizer=")
        if not self.optimizer.built:
            self.optimizer.build(model.trainable_variables)
        self._saved_values = [v.numpy() for v in self.variables()]
        super().__init__(bcast_object=_hvd.broadcast_object, get_rank=_hvd.rank, **kwargs)

    def variables(self) -> list:
        """The variables kept: ``model.variables`` then ``optimizer.variables``, in a fixed order."""
        return list(self.model.variables) + list(self.optimizer.variables)

    def reset(self):
        """After Horovod's reset, before the sync: drop the model's compiled step functions, which hold the
        old torus (its grid and world size); Keras builds new ones for the new torus at the next ``fit``."""
        for name in ("train_function", "test_function", "predict_function"):
            if hasattr(self.model, name):
                setattr(self.model, name, None)

    def save(self):
        self._saved_values = [v.numpy() for v in self.variables()]
        super().save()

    def restore(self):
        for v, value in zip(self.variables(), self._saved_values):
            v.assign(value)
        super().restore()

    def sync(self):
        if _hvd.size() > 1:
            broadcast_variables(self.variables(), 0)
        self._saved_values = [v.numpy() for v in self.variables()]
        super().sync()

    def digest(self) -> str:
        """SHA-256 (hex) of the current bytes of ``model.trainable_variables + optimizer.variables``: equal on
        every rank exactly when the ranks hold identical weights and optimizer state. Non-trainable model
        variables (batch-normalisation moving statistics) are left out: each rank updates them from its own
        samples (as under Horovod); :meth:`sync` gives every rank rank 0's."""
        h = hashlib.sha256()
        for v in list(self.model.trainable_variables) + list(self.optimizer.variables):
            h.update(np.ascontiguousarray(v.numpy()).tobytes())
        return h.hexdigest()


class TensorFlowKerasState(KerasState):
    """:class:`KerasState` under the name and signature of ``horovod.tensorflow.elastic.TensorFlowKerasState``
    (``model, optimizer=None, backend=None, **kwargs``), so that a script written for Horovod runs with the
    import swapped: ``backend`` (Keras 2's session backend) is accepted and not used (Keras 3 has none).
    Horovod's own class is Keras 2 code.

    ``TensorFlowState`` (variables and Python values, no Keras) and ``ObjectState`` (Python values only) are
    Horovod's own classes (``horovod.tensorflow.elastic``, ``horovod.common.elastic``), re-exported here: they
    use nothing Keras 2 has and Keras 3 lacks."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(model, optimizer, **kwargs)


class CommitEvery(keras.callbacks.Callback):
    """Advance ``state.batch`` after every training batch and ``state.commit()`` every ``every`` batches.

    Args:
        state: a :class:`KerasState` with an integer attribute ``batch`` (batches done in this epoch).
        every: batches between commits (>= 1).

    Raises:
        ValueError: ``every`` < 1, or the state has no ``batch`` attribute.
    """

    def __init__(self, state, every: int):
        super().__init__()
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"CommitEvery(every={every!r}): commit every N >= 1 batches")
        if not hasattr(state, "batch"):
            raise ValueError("CommitEvery: the state has no 'batch' value: make it with KerasState(..., batch=0)")
        self.state, self.every = state, every

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch += 1
        if self.state.batch % self.every == 0:
            self.state.commit()
