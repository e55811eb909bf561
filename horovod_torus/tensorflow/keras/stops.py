"""Which callback stopped ``fit``: the one documented hook this package puts on Keras.

A rank whose ``fit`` ends early because a callback set ``model.stop_training`` (``TerminateOnNaN``,
``EarlyStopping``, any callback) on that rank only leaves the other ranks waiting in the next gradient
all-reduce; the torus then ends the run on every rank with :class:`horovod_torus.stall.TorusStallError`,
and the rank that left exits with status 1 saying which callback stopped it. To know that callback,
importing ``horovod_torus.tensorflow.keras`` gives ``keras.Model`` one property, ``stop_training``, that
stores the value as before (in the instance, under ``_torus_stop_training``) and, when it is set to True,
records the class of the object whose method set it (:func:`horovod_torus.stall.note_stop`). Nothing else
of Keras is changed; :func:`uninstall` removes it.
"""
from __future__ import annotations

import sys

import keras

from horovod_torus.stall import note_stop

__all__ = ["install", "uninstall", "describe_setter"]

_KEY = "_torus_stop_training"


def describe_setter(frame, model) -> str:
    """``"keras.callbacks.TerminateOnNaN (in on_batch_end)"``: the first caller outside Keras' attribute
    machinery whose ``self`` is not ``model`` (a callback), else the function that set it."""
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and owner is not model:
            cls = type(owner)
            public = getattr(keras.callbacks, cls.__name__, None) is cls
            name = f"keras.callbacks.{cls.__name__}" if public else f"{cls.__module__}.{cls.__qualname__}"
            return f"{name} set model.stop_training (in {frame.f_code.co_name})"
        if owner is None:
            return f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno}) set model.stop_training"
        frame = frame.f_back
    return "model.stop_training was set"


def _get(self):
    return self.__dict__.get(_KEY, False)


def _set(self, value):
    if value and not self.__dict__.get(_KEY, False):
        note_stop(f"{describe_setter(sys._getframe(1), self)} on model {getattr(self, 'name', '?')!r}")
    self.__dict__[_KEY] = value


def install() -> None:
    """Give ``keras.Model`` the recording ``stop_training`` property (idempotent)."""
    if not isinstance(keras.Model.__dict__.get("stop_training"), property):
        keras.Model.stop_training = property(_get, _set, doc="Keras' stop flag; horovod_torus records who set it.")


def uninstall() -> None:
    """Remove the property (instances keep their value under ``_torus_stop_training``)."""
    if isinstance(keras.Model.__dict__.get("stop_training"), property):
        del keras.Model.stop_training
