"""``DistributedOptimizer`` for Keras 3: reduces each step's gradients through a strategy, then applies them.

Keras 3 routes every update through ``Optimizer.apply(grads, trainable_variables)`` (``apply_gradients``
and ``model.fit``'s train step both end there), so that is the one method overridden. As in Horovod, the
wrapped optimizer becomes an instance of a dynamically created subclass of its own class, with the same
class name and module, so a saved model loads back without horovod_torus.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import keras
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY
from horovod_torus.tensorflow.gradients import GradientReducer
from horovod_torus.tensorflow.keras.optimizer_state import WrapperState

__all__ = ["DistributedOptimizer", "is_distributed_optimizer", "rank_local_variables"]

Average, Compression = _hvd.Average, _hvd.Compression


class _DistributedOptimizerMixin:
    """Methods added in front of the wrapped optimizer's class (see :func:`DistributedOptimizer`)."""

    _hvd_reducer: GradientReducer
    _hvd_passes: int = 1
    _hvd_average_aggregated: bool = False

    def register_local_var(self, var):
        """Registers a variable as local to this rank: its gradient is not all-reduced."""
        self._hvd_reducer.register_local_var(var)

    def build(self, variables):
        """The wrapped optimizer's ``build``, then, for backward_passes_per_step > 1, one zero accumulator
        per variable (its shape and dtype) and an int64 scalar count of ``apply`` calls; then the values a
        load before ``build`` kept (:class:`~horovod_torus.tensorflow.keras.optimizer_state.WrapperState`)."""
        super().build(variables)
        if self._hvd_passes > 1:
            self._hvd_accumulators = [
                self.add_variable_from_reference(v, name="hvd_accumulated_gradient")
                for v in self._trainable_variables]
            self._hvd_counter = self.add_variable(shape=(), dtype="int64", initializer="zeros",
                                                  name="hvd_backward_passes")
        self._hvd_state.assign_pending()

    @property
    def _agg_helper(self):
        """Horovod's name for its gradient-aggregation helper, whose ``counter`` scripts and Horovod's own
        tests read (``opt._agg_helper.counter.numpy()``): here a view whose ``counter`` is the backward passes
        since the last all-reduce, ``count % backward_passes_per_step`` (int64 scalar tensor, Horovod's
        value); None when backward_passes_per_step is 1, as in Horovod. Raises AttributeError naming the fix
        before the optimizer is built (its count does not exist yet)."""
        return _AggregationView(self) if self._hvd_passes > 1 else None

    def _hvd_own_variables(self) -> list:
        """The variables the wrapper adds: the accumulators, then the count (none when k == 1)."""
        if not hasattr(self, "_hvd_counter"):
            return []
        return list(self._hvd_accumulators) + [self._hvd_counter]

    def _hvd_base_variables(self) -> list:
        """The wrapped class' ``variables`` (the wrapper's own among them, where ``build`` added them)."""
        return list(super().variables)

    def _hvd_wrapped_variables(self) -> list:
        """The wrapped class' ``variables``, in its order, without the wrapper's own."""
        own = {id(v) for v in self._hvd_own_variables()}
        return [v for v in self._hvd_base_variables() if id(v) not in own]

    @property
    def variables(self):
        """The wrapped optimizer's variables in its own order, then the wrapper's (see ``build``)."""
        return self._hvd_wrapped_variables() + self._hvd_own_variables()

    def save_own_variables(self, store):
        """Writes what the wrapped optimizer class writes, so that a plain Keras load restores iterations
        and slots; the wrapper's own variables go to the child group ``_hvd_state``."""
        self._hvd_state.save_wrapped(store)

    def load_own_variables(self, store):
        """Assigns what :meth:`save_own_variables` wrote (kept until ``build`` when not built yet).

        Raises:
            ValueError: the saved count or shapes do not fit (another optimizer or model); the message
                names both counts and the fix (Keras would warn and drop the state).
        """
        self._hvd_state.load_wrapped(store)

    def apply(self, grads, trainable_variables=None):
        _refuse_xla()
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
            if not self.built:
                with keras.name_scope(self.name, caller=self):
                    self.build(trainable_variables)
                self.built = True
            variables = trainable_variables
        elif self.built:
            variables = list(self._trainable_variables)
        else:
            raise ValueError("call optimizer.build(trainable_variables) or pass trainable_variables "
                             "to apply() before the first step")
        if self._hvd_passes == 1:
            return super().apply(self._hvd_reducer(grads, variables), trainable_variables)
        return self._hvd_apply_accumulated(grads, variables, trainable_variables)

    def _hvd_apply_accumulated(self, grads, variables, trainable_variables):
        """backward_passes_per_step > 1: sum locally, all-reduce and apply on every k-th call."""
        accs = [self._hvd_accumulators[self._get_variable_index(v)] for v in variables]
        for g, acc in zip(grads, accs):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g, dtype=acc.dtype))
        count = self._hvd_counter.assign_add(1)
        passes = self._hvd_passes

        def update():
            scale = 1.0 / passes if self._hvd_average_aggregated else 1.0
            summed = [None if g is None else tf.convert_to_tensor(acc) * scale
                      for g, acc in zip(grads, accs)]
            super(_DistributedOptimizerMixin, self).apply(self._hvd_reducer(summed, variables),
                                                          trainable_variables)
            for g, acc in zip(grads, accs):
                if g is not None:
                    acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def skip():
            self.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(tf.equal(tf.math.floormod(count, passes), 0), update, skip)


class _AggregationView:
    """What scripts read of Horovod's ``LocalGradientAggregationHelper``: its ``counter``."""

    __slots__ = ("_opt",)

    def __init__(self, opt):
        self._opt = opt

    @property
    def counter(self) -> tf.Tensor:
        if not hasattr(self._opt, "_hvd_counter"):
            raise AttributeError("the optimizer is not built yet: its backward-pass count exists from the first "
                                 "apply() (or optimizer.build(variables))")
        return tf.math.floormod(self._opt._hvd_counter, self._opt._hvd_passes)


def _refuse_xla() -> None:
    """Horovod's and the torus' collectives have no XLA kernels: fail at trace time, naming the fix."""
    from tensorflow.python.ops import control_flow_util

    if not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise ValueError("DistributedOptimizer cannot run inside an XLA-compiled step (Horovod's collectives "
                         "have no XLA kernels): compile the model with model.compile(..., jit_compile=False) "
                         "(Keras 3's default jit_compile='auto' picks XLA when TensorFlow sees a GPU)")


def is_distributed_optimizer(optimizer) -> bool:
    """True for an optimizer returned by :func:`DistributedOptimizer`."""
    return isinstance(optimizer, _DistributedOptimizerMixin)


def rank_local_variables(optimizer) -> list:
    """The gradient accumulators of ``backward_passes_per_step`` > 1 of the DistributedOptimizer ``optimizer``
    is or wraps (a LossScaleOptimizer's inner one): each rank's own partial sum until the next all-reduce,
    so a broadcast from one rank must leave them alone. ``[]`` for k = 1, another optimizer or None."""
    for opt in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if is_distributed_optimizer(opt) and hasattr(opt, "_hvd_accumulators"):
            return list(opt._hvd_accumulators)
    return []


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=_hvd.global_process_set, scale_local_gradients=True, *,
                         strategy=DEFAULT_STRATEGY, bucket_bytes=None):
    """Wrap a Keras 3 optimizer so that gradients are all-reduced (through the torus by default).

    Same parameters, order and defaults as ``horovod.tensorflow.keras.DistributedOptimizer`` (0.28.1);
    ``strategy`` is the only addition, keyword-only.

    Args:
        optimizer: a ``keras.optimizers.Optimizer`` instance (``LossScaleOptimizer`` included: then the
            scaled gradients are reduced, so a non-finite gradient on any rank makes every rank skip
            the step together). Its state is not copied: wrap it before training.
        name: new ``name`` of the optimizer (None keeps the wrapped optimizer's name).
        device_dense, device_sparse: ``tf.device`` for the dense and the sparse reduction.
        compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16`` (dense gradients travel as
            float16: half the bytes).
        sparse_as_dense: densify ``tf.IndexedSlices`` gradients (Embedding layers) before the reduction;
            otherwise they are all-gathered (values and indices).
        gradient_predivide_factor: f: gradients are scaled by 1/f before the sum and f/N after it
            (op=Average only).
        op: ``hvd.Average`` (default) or ``hvd.Sum``.
        backward_passes_per_step: k >= 1: gradients of k consecutive ``apply`` calls are summed locally
            and all-reduced and applied once, on the k-th call (the other calls only advance
            ``optimizer.iterations``). The accumulators (one per trainable variable, its shape and
            dtype) and the int64 pass count are optimizer variables, listed after the wrapped ones in
            ``variables`` and saved by ``model.save`` / ``save_weights`` apart from them
            (:mod:`horovod_torus.tensorflow.keras.optimizer_state`) and by ``tf.train.Checkpoint``.
        average_aggregated_gradients: divide the k-step sum by k before the reduction.
        num_groups: deprecated alias of ``groups`` (Horovod's).
        groups: None (default: ONE strategy call reduces all of a step's gradients), an int g (g calls
            over contiguous chunks) or a list of lists of variables (one call per list).
        process_set: must be ``hvd.global_process_set`` (the torus spans all ranks).
        scale_local_gradients: divide gradients of variables registered with ``register_local_var`` by N.
        strategy: keyword-only; a registered strategy name (``"torus"``, ``"ring"``, yours) or a strategy
            callable (see :mod:`horovod_torus.strategies`).
        bucket_bytes: keyword-only; None (one call per step) or B: reduce in buckets of >= B bytes in
            reverse layer order, so communication can overlap the backward pass
            (:class:`horovod_torus.tensorflow.gradients.ReductionOptions`).

    Returns:
        An optimizer of a subclass of ``type(optimizer)`` with the same config.

    Raises:
        TypeError: ``optimizer`` is not a Keras 3 optimizer (the message names what was passed).
        ValueError: an unknown strategy, backward_passes_per_step < 1, bad groups, a process set other
            than the global set, gradient_predivide_factor with op != Average, or an optimizer that is
            already distributed.

    Example::

        import keras, horovod_torus.tensorflow.keras as hvd
        hvd.init()
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))   # torus
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        hint = (" (a tf.compat.v1 / Keras 2 optimizer: use a keras.optimizers one)"
                if hasattr(optimizer, "compute_gradients") else "")
        raise TypeError(f"DistributedOptimizer needs a keras.optimizers.Optimizer instance, got "
                        f"{optimizer!r} ({type(optimizer).__name__}){hint}")
    if is_distributed_optimizer(optimizer):
        raise ValueError(f"optimizer {optimizer.name!r} is already a DistributedOptimizer; wrap it once")
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
            or backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r} must be an int >= 1")
    reducer = GradientReducer.from_horovod_args(
        strategy=strategy, op=op, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, groups=groups, num_groups=num_groups,
        device_dense=device_dense, device_sparse=device_sparse, scale_local_gradients=scale_local_gradients,
        process_set=process_set, bucket_bytes=bucket_bytes, name=name or f"Distributed{type(optimizer).__name__}")
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedOptimizerMixin, base),
               {"__module__": base.__module__, "__qualname__": base.__qualname__})
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    dist = cls.from_config(config)
    dist._hvd_reducer = reducer
    dist._hvd_passes = backward_passes_per_step
    dist._hvd_average_aggregated = bool(average_aggregated_gradients)
    dist._hvd_state = WrapperState(dist)     # saved by Keras as the child object <optimizer>/_hvd_state
    return dist
