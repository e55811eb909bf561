"""Saving and loading a ``DistributedOptimizer``'s variables in Keras 3 files (``.keras``, ``.weights.h5``).

Keras 3 saves an optimizer's ``variables`` positionally under ``<path>/vars`` and loads them only when
the counts match (otherwise it warns and loads nothing). The wrapper therefore writes there exactly what
the wrapped optimizer class writes (``iterations``, learning rate, slots, a LossScaleOptimizer's loss
scale), and its own variables (the gradient accumulators and the pass count of
``backward_passes_per_step`` > 1) in a group of their own, ``<path>/_hvd_state/vars``, through
:class:`WrapperState`, the child object Keras' saving visits. A plain ``keras.models.load_model`` then
restores iterations and slots into the unwrapped optimizer and ignores that group.

Loading into a wrapper that is not built yet (``model.load_weights`` before the first step) keeps the
values and assigns them when ``build`` creates the variables, where Keras would drop them (a
LossScaleOptimizer's inner optimizer, plain Keras, still warns that it skips its group: its values are
also in the wrapper's).
"""
from __future__ import annotations

import warnings
import weakref
import zipfile

import numpy as np
import tensorflow as tf
from keras.src.saving.keras_saveable import KerasSaveable   # not exported; the base _walk_saveable visits

__all__ = ["INNER_OPTIMIZER", "PartialSumWarning", "STATE_ATTR", "WrapperState", "saved_backward_passes"]

STATE_ATTR = "_hvd_state"               # the optimizer attribute (and h5 group) of the wrapper's variables
_PASSES_KEY = "backward_passes_per_step"
INNER_OPTIMIZER = "optimizer/inner_optimizer"   # a LossScaleOptimizer's inner optimizer in a .keras file


def _read(store) -> dict:
    return {k: store[k] for k in store.keys()}


class WrapperState(KerasSaveable):
    """The variables a DistributedOptimizer adds, as the child object Keras visits at ``optimizer._hvd_state``,
    and the loading of both groups (the wrapped class' and this one).

    Saved entries of this group: ``"0"`` .. ``"m-1"``: the wrapper's variables in order (one accumulator
    per trainable variable, of its shape and dtype, then the int64 scalar count of ``apply`` calls), and
    ``"backward_passes_per_step"`` (int64 scalar). Nothing is written when the wrapper has no variables
    (``backward_passes_per_step=1``). The optimizer is held by a weak reference: a strong one would be a
    child that Keras' loading walks into again.
    """

    def __init__(self, optimizer):
        self._optimizer = weakref.ref(optimizer)
        self._pending = {}

    def _obj_type(self):
        return "Optimizer"

    def __repr__(self):
        return f"<DistributedOptimizer state of optimizer {getattr(self._optimizer(), 'name', None)!r}>"

    def save_own_variables(self, store):
        opt = self._optimizer()
        own = opt._hvd_own_variables()
        for i, v in enumerate(own):
            store[str(i)] = v.numpy()
        if own:
            store[_PASSES_KEY] = np.int64(opt._hvd_passes)

    def save_wrapped(self, store):
        """Write the wrapped class' variables, ``"0"``.. in its order (what that class itself writes)."""
        for i, v in enumerate(self._optimizer()._hvd_wrapped_variables()):
            store[str(i)] = v.numpy()

    def load_own_variables(self, store):
        self._take("own", _read(store))

    def load_wrapped(self, store):
        self._take("wrapped", _read(store))

    def _take(self, kind, values):
        if self._optimizer().built:
            self._assign(kind, values)
        else:
            self._pending[kind] = values

    def assign_pending(self):
        """Assign what was loaded before ``build`` (called at the end of the wrapper's ``build``)."""
        pending, self._pending = self._pending, {}
        with tf.init_scope():
            for kind in ("wrapped", "own"):
                if kind in pending:
                    self._assign(kind, pending[kind])

    def _assign(self, kind, values):
        if kind == "wrapped":
            self._assign_wrapped([values[str(i)] for i in range(len(values))])
        elif values:
            self._assign_own(int(values.pop(_PASSES_KEY)), [values[str(i)] for i in range(len(values))])

    def _assign_wrapped(self, saved):
        """Also reads files written before the wrapper's variables were saved apart: all of the wrapped
        class' ``variables`` positionally, the wrapper's among them."""
        opt = self._optimizer()
        ours = opt._hvd_wrapped_variables()
        if len(saved) != len(ours) and opt._hvd_own_variables() and len(saved) == len(opt._hvd_base_variables()):
            ours = opt._hvd_base_variables()
        if len(saved) != len(ours):
            raise ValueError(
                f"optimizer {opt.name!r} ({type(opt).__name__}, DistributedOptimizer): the saved optimizer has "
                f"{len(saved)} variables, this one {len(ours)}: its state would be dropped. Load the file into "
                f"a model compiled with the optimizer class and trainable variables it was saved with "
                f"(horovod_torus.tensorflow.keras.load_model(path) does)")
        for i, (v, a) in enumerate(zip(ours, saved)):
            if tuple(v.shape) != a.shape:
                raise ValueError(f"optimizer {opt.name!r}: saved variable {i} has shape {a.shape}, {v.path} "
                                 f"{tuple(v.shape)}: saved for another model")
            v.assign(a)

    def _assign_own(self, passes, saved):
        """Same k and shapes: assigned. Another k with no partial sum saved (every accumulator zero, count
        a multiple of the saved k): the accumulators are zeroed and the count restarts at 0."""
        opt = self._optimizer()
        ours = opt._hvd_own_variables()
        if passes == opt._hvd_passes and [a.shape for a in saved] == [tuple(v.shape) for v in ours]:
            for v, a in zip(ours, saved):
                v.assign(a)
            _warn_partial_sum(opt.name, int(saved[-1]) % passes, passes)
            return
        summed = int(saved[-1]) % passes
        if summed == 0 and not any(np.any(a) for a in saved[:-1]):
            for v in ours:
                v.assign(np.zeros(v.shape, v.dtype))
            return
        if passes == opt._hvd_passes:
            raise ValueError(f"optimizer {opt.name!r}: the saved gradient accumulators have shapes "
                             f"{[a.shape for a in saved[:-1]]}, this DistributedOptimizer's "
                             f"{[tuple(v.shape) for v in ours[:-1]]}: saved for another model")
        raise ValueError(
            f"optimizer {opt.name!r}: the saved state holds the gradient sum of {summed} of the {passes} "
            f"passes of backward_passes_per_step={passes}, this DistributedOptimizer has "
            f"backward_passes_per_step={opt._hvd_passes}: loading would drop that sum. Load with "
            f"backward_passes_per_step={passes} (horovod_torus.tensorflow.keras.load_model(path) takes it "
            f"from the file; DistributedOptimizer(..., backward_passes_per_step={passes}) before "
            f"model.load_weights), or save after a multiple of {passes} steps")


class PartialSumWarning(UserWarning):
    """A loaded gradient-accumulation partial sum is one rank's, now on every rank."""


def _warn_partial_sum(name: str, summed: int, passes: int) -> None:
    """Warn when a partial gradient sum (``summed`` of ``passes`` passes) was loaded on more than one rank:
    the file holds the saving rank's accumulators, and every rank now has them in place of its own."""
    import horovod.tensorflow as hvd

    if summed and hvd.is_initialized() and hvd.size() > 1:
        warnings.warn(f"optimizer {name!r}: loaded the gradient sum of {summed} of the {passes} passes of "
                      f"backward_passes_per_step={passes} that the saving rank had accumulated; every rank now "
                      f"holds that rank's sum in place of its own, so the next update is not exactly the one an "
                      f"uninterrupted run makes. For an exact resume on {hvd.size()} ranks, save after a multiple "
                      f"of {passes} steps", PartialSumWarning, stacklevel=2)


def saved_backward_passes(filepath, optimizer: str = "optimizer") -> int | None:
    """``backward_passes_per_step`` recorded for an optimizer in a ``.keras`` file, or None (saved without
    accumulation, without a DistributedOptimizer, or not a ``.keras`` zip archive). ``optimizer``: its
    path in the file's weights, ``"optimizer"`` for the model's, :data:`INNER_OPTIMIZER` for the
    DistributedOptimizer inside a LossScaleOptimizer."""
    import h5py

    if not zipfile.is_zipfile(filepath):
        return None
    with zipfile.ZipFile(filepath) as archive:
        if "model.weights.h5" not in archive.namelist():
            return None
        with archive.open("model.weights.h5") as fh, h5py.File(fh, "r") as h5:
            entry = h5.get(f"{optimizer}/{STATE_ATTR}/vars/{_PASSES_KEY}")
            return None if entry is None else int(entry[()])
