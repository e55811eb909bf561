"""``load_model``: a saved Keras 3 model back with a ``DistributedOptimizer`` that keeps the optimizer state.

Horovod's ``horovod.tensorflow.keras.load_model`` maps the optimizer class names to wrapping factories
during deserialization (Keras 2). Keras 3 restores the optimizer state (iterations, moments, learning
rate) into the optimizer it deserializes; wrapping that optimizer afterwards with
:func:`DistributedOptimizer` builds a NEW optimizer from its config, without that state (iterations
back to 0, moments zero). :func:`load_model` therefore loads the model with plain Keras, wraps its
optimizer, compiles the model again with the wrapper and the saved loss and metrics, and loads the
file's variables again through Keras into the model with the wrapper, which also takes the wrapper's
own variables (gradient accumulators, :mod:`horovod_torus.tensorflow.keras.optimizer_state`).
"""
from __future__ import annotations

import warnings
import zipfile

import keras

from horovod_torus.strategies.registry import DEFAULT_STRATEGY
from horovod_torus.tensorflow.keras.optimizer import Compression, DistributedOptimizer
from horovod_torus.tensorflow.keras.optimizer_state import INNER_OPTIMIZER, saved_backward_passes

__all__ = ["load_model"]


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none, *,
               safe_mode=True, strategy=DEFAULT_STRATEGY, **distributed_optimizer_kwargs):
    """Load a ``.keras`` model saved with (or without) a DistributedOptimizer, ready to train on.

    Same leading parameters as ``horovod.tensorflow.keras.load_model`` (0.28.1; ``legacy_opts`` is Keras
    2 only and not accepted). The model's optimizer is wrapped in a :func:`DistributedOptimizer` that
    carries the saved optimizer state: ``iterations``, the learning rate, momenta / Adam moments, a
    LossScaleOptimizer's loss scale and, for ``backward_passes_per_step`` > 1, the gradient accumulators
    and the pass count (every optimizer variable, exactly). ``backward_passes_per_step`` is the one the
    file was saved with unless given. The accumulators are those of the rank that saved: loaded on several
    ranks mid-window (a step count not a multiple of k) every rank gets that rank's partial sum, and a
    ``PartialSumWarning`` says so (save after a multiple of k steps for an exact resume). The model is compiled again with the saved loss, metrics and
    options and that optimizer, with ``jit_compile=False`` (XLA cannot compile Horovod's collectives).

    Args:
        filepath: path of a ``.keras`` file written by ``model.save``.
        custom_optimizers: optional list of optimizer classes (not in ``keras.optimizers``) the model may
            use; they are looked up by class name.
        custom_objects: optional ``{name: class or function}`` for other custom layers, losses, metrics.
        compression: ``hvd.Compression.none`` or ``.fp16``, passed to DistributedOptimizer.
        safe_mode: passed to ``keras.models.load_model``.
        strategy: keyword-only; the all-reduce strategy of the wrapped optimizer (``"torus"``).
        **distributed_optimizer_kwargs: other keyword arguments of :func:`DistributedOptimizer`
            (``backward_passes_per_step``, ``op``, ``groups``, ``gradient_predivide_factor``, ...).

    Returns:
        The ``keras.Model``, compiled with a DistributedOptimizer (same class name as the saved
        optimizer); saved as ``LossScaleOptimizer(DistributedOptimizer(opt, k))`` with k > 1, in that
        form. A model saved without an optimizer (not compiled) is returned as loaded.

    Raises:
        ValueError: the file cannot be loaded (from Keras); the saved optimizer variables do not fit the
            wrapper (counts or shapes: another model or optimizer); or the saved gradient accumulators hold
            a partial sum and ``backward_passes_per_step`` differs from the saved one. The message names
            the counts or values and the fix; no state is dropped silently.
        TypeError, ValueError: from :func:`DistributedOptimizer` for bad keyword arguments.

    Example::

        import horovod_torus.tensorflow.keras as hvd
        hvd.init()
        model = hvd.load_model("checkpoint-4.keras")       # iterations and moments as saved
        model.fit(dataset, initial_epoch=4, epochs=10,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    """
    objects = {cls.__name__: cls for cls in custom_optimizers or []}
    objects.update(custom_objects or {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.models.load_model(filepath, custom_objects=objects, compile=True, safe_mode=safe_mode)
    loaded = getattr(model, "optimizer", None)
    keras_archive = zipfile.is_zipfile(filepath)
    reload = keras_archive and loaded is not None and loaded.built
    for w in caught:                    # an optimizer Keras skipped is loaded (or refused) again below
        if not (reload and str(w.message).startswith("Skipping variable loading for optimizer")):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if loaded is None:
        return model
    dist = _distributed(loaded, filepath, compression=compression, strategy=strategy,
                        **distributed_optimizer_kwargs)
    with keras.saving.custom_object_scope(objects):
        config = keras.saving.deserialize_keras_object(model.get_compile_config())
    config.update(optimizer=dist, jit_compile=False)
    model.compile(**config)
    if loaded.built:
        dist.build(model.trainable_variables)
        if reload:
            model.load_weights(filepath)        # Keras' own loading, into the wrapper's save layout
        else:
            _copy_state(loaded, dist, filepath)
    return model


def _distributed(loaded, filepath, **kwargs):
    """The loaded optimizer wrapped in the form it was saved in, to take the file's variables with Keras'
    own loading: ``LossScaleOptimizer(DistributedOptimizer(inner, k))`` when the file holds the wrapper's
    state inside a LossScaleOptimizer (``optimizer/inner_optimizer/_hvd_state``: that form with k > 1, its
    loss scale and dynamic growth steps as loaded), else ``DistributedOptimizer(loaded, k)`` (a
    LossScaleOptimizer saved around a wrapper with k = 1 writes what this form reads). ``k`` is
    ``backward_passes_per_step`` from ``kwargs``, or the file's."""
    inner = saved_backward_passes(filepath, INNER_OPTIMIZER)
    if inner and isinstance(loaded, keras.optimizers.LossScaleOptimizer):
        kwargs.setdefault("backward_passes_per_step", inner)
        return keras.optimizers.LossScaleOptimizer(
            DistributedOptimizer(loaded.inner_optimizer, **kwargs), initial_scale=loaded.initial_scale,
            dynamic_growth_steps=loaded.dynamic_growth_steps, name=loaded.name)
    kwargs.setdefault("backward_passes_per_step", saved_backward_passes(filepath) or 1)
    return DistributedOptimizer(loaded, **kwargs)


def _copy_state(source, target, filepath) -> None:
    """Assign every variable of the loaded optimizer to the wrapper's variable of the same path/shape."""
    src, dst = list(source.variables), list(target.variables)
    if len(dst) < len(src):
        raise ValueError(f"load_model({filepath!r}): the saved optimizer has {len(src)} variables, the "
                         f"DistributedOptimizer {len(dst)}: it cannot take the saved state")
    for s, d in zip(src, dst):
        if s.path.split("/")[-1] != d.path.split("/")[-1] or tuple(s.shape) != tuple(d.shape):
            raise ValueError(f"load_model({filepath!r}): saved optimizer variable {s.path} "
                             f"{tuple(s.shape)} does not match {d.path} {tuple(d.shape)}")
        d.assign(s)
