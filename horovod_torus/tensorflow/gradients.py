"""Gradient reduction shared by DistributedOptimizer and DistributedGradientTape.

One :class:`GradientReducer` per optimizer/tape. Per step, :meth:`GradientReducer.__call__`:

1. keeps ``None`` gradients (frozen or unused variables) as ``None``, untouched and unreduced;
2. converts ``tf.IndexedSlices`` to dense tensors when ``sparse_as_dense``; otherwise reduces them on the
   sparse path: an all-gather of values and indices over all ranks (the represented dense tensors are
   summed, as Horovod does), scaled like the dense path;
3. reduces ALL the dense gradients in ONE call of the strategy (``"torus"`` by default, which fuses them
   into one buffer per dtype), or one call per group when ``groups`` asks for explicit groups;
4. leaves gradients of variables registered as local (``register_local_var``) unreduced, divided by N
   when ``scale_local_gradients`` (Horovod's behaviour, horovod PR #3695).

``op=Average`` with ``gradient_predivide_factor`` f scales by 1/f before the sum and by f/N after it.
"""
from __future__ import annotations

import contextlib

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY, resolve_strategy

__all__ = ["GradientReducer", "check_process_set", "normalize_groups"]


def check_process_set(process_set) -> None:
    """Raise ValueError unless ``process_set`` is Horovod's global set (the torus spans all ranks)."""
    if process_set is not _hvd.global_process_set and \
            getattr(process_set, "process_set_id", None) != 0:
        raise ValueError(
            f"process_set={process_set!r}: horovod_torus reduces over all ranks (the torus grid is the "
            f"global set); pass process_set=hvd.global_process_set, or use horovod.tensorflow directly "
            f"for a subset of ranks")


def normalize_groups(groups, num_groups=0):
    """Horovod's ``groups``/``num_groups`` rules: None, an int > 0, or a list of lists of variables."""
    if num_groups:
        if groups is not None:
            raise ValueError(f"pass groups={groups!r} or num_groups={num_groups!r}, not both")
        groups = num_groups
    if groups is None:
        return None
    if isinstance(groups, bool) or not (isinstance(groups, list) or
                                        (isinstance(groups, int) and groups > 0)):
        raise ValueError(f"groups={groups!r} must be None, an integer > 0 or a list of lists of "
                         f"variables")
    return groups


def _split_list(items, n):
    """Horovod's split: n contiguous chunks whose sizes differ by at most one."""
    d, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + d + (1 if i < r else 0)
        out.append(items[start:stop])
        start = stop
    return [c for c in out if c]


class GradientReducer:
    """All-reduces one step's gradients through a strategy (see the module docstring for the steps).

    Args:
        strategy: a registered strategy name (``"torus"``, ``"ring"``, ...) or a strategy callable.
        op: ``hvd.Average`` or ``hvd.Sum`` (``"ring"`` also takes Horovod's other ops for dense tensors).
        compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16`` (dense gradients only).
        sparse_as_dense: densify ``tf.IndexedSlices`` before reducing them.
        gradient_predivide_factor: f > 0; only with ``op=Average``.
        groups: None (one strategy call per step), an int k > 0 (k calls over contiguous chunks) or a list
            of lists of variables (one call per list, one per remaining gradient).
        device_dense, device_sparse: ``tf.device`` strings for the two paths ('' = TensorFlow's choice).
        scale_local_gradients: divide gradients of local variables by N.
        name: name scope of the ops.
        num_groups: Horovod's deprecated alias of ``groups``.
        process_set: only ``hvd.global_process_set``.

    Raises:
        ValueError: an unknown strategy name, an op/predivide combination Horovod also rejects, bad groups.
        TypeError: a strategy callable with the wrong parameters.
    """

    def __init__(self, strategy=DEFAULT_STRATEGY, op=_hvd.Average, compression=_hvd.Compression.none,
                 sparse_as_dense=False, gradient_predivide_factor=1.0, groups=None, device_dense="",
                 device_sparse="", scale_local_gradients=True, name="DistributedGradients", *,
                 num_groups=0, process_set=_hvd.global_process_set):
        check_process_set(process_set)
        self.strategy = resolve_strategy(strategy)
        self.strategy_name = strategy if isinstance(strategy, str) else getattr(strategy, "__name__",
                                                                                repr(strategy))
        if op is None:
            op = _hvd.Average
        if op == _hvd.Adasum:
            raise ValueError("op=Adasum is not supported by horovod_torus: use op=hvd.Average or hvd.Sum")
        if not gradient_predivide_factor or gradient_predivide_factor <= 0:
            raise ValueError(f"gradient_predivide_factor={gradient_predivide_factor!r} must be > 0")
        if gradient_predivide_factor != 1.0 and op != _hvd.Average:
            raise ValueError(f"gradient_predivide_factor={gradient_predivide_factor} is supported only "
                             f"with op=Average (Horovod's rule)")
        self.op = op
        self.compression = compression
        self.sparse_as_dense = bool(sparse_as_dense)
        self.prescale = 1.0 / gradient_predivide_factor if op == _hvd.Average else 1.0
        self.postscale = gradient_predivide_factor if op == _hvd.Average else 1.0
        self.groups = normalize_groups(groups, num_groups)
        self.device_dense, self.device_sparse = device_dense, device_sparse
        self.scale_local_gradients = scale_local_gradients
        self.name = name
        self._local = {}  # id(variable) -> variable

    def register_local_var(self, var) -> None:
        """Mark ``var`` as local to this rank: its gradient is never reduced."""
        self._local[id(var)] = var

    @property
    def has_local_vars(self) -> bool:
        return bool(self._local)

    def __call__(self, grads, variables=None):
        """Reduce ``grads`` (a list; entries may be None or tf.IndexedSlices) for ``variables``.

        Returns a list of the same length: None stays None, IndexedSlices stay IndexedSlices (unless
        ``sparse_as_dense``), dense tensors keep shape and dtype.
        """
        grads = list(grads)
        variables = list(variables) if variables is not None else [None] * len(grads)
        if len(variables) != len(grads):
            raise ValueError(f"got {len(grads)} gradients for {len(variables)} variables")
        out = list(grads)
        dense, sparse = [], []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                continue
            if v is not None and id(v) in self._local:
                if self.scale_local_gradients:
                    out[i] = _scale(g, 1.0 / _hvd.size())
                continue
            if isinstance(g, tf.IndexedSlices):
                if self.sparse_as_dense:
                    out[i] = g = tf.convert_to_tensor(g)
                else:
                    sparse.append(i)
                    continue
            dense.append(i)
        with tf.name_scope(self.name + "_Allreduce"):
            with _device(self.device_dense):
                for idx in self._split(dense, variables):
                    reduced = self.strategy([out[i] for i in idx], self.op, None, self.compression,
                                            self.prescale, self.postscale)
                    if len(reduced) != len(idx):
                        raise RuntimeError(f"strategy {self.strategy_name!r} returned {len(reduced)} "
                                           f"tensors for {len(idx)} inputs")
                    for i, r in zip(idx, reduced):
                        out[i] = r
            with _device(self.device_sparse):
                for i in sparse:
                    out[i] = self._reduce_sparse(out[i])
        return out

    def _split(self, dense, variables):
        if not dense:
            return []
        if self.groups is None:
            return [dense]
        if isinstance(self.groups, int):
            return _split_list(dense, self.groups)
        pos = {id(variables[i]): i for i in dense}
        chunks = []
        for group in self.groups:
            chunk = [pos.pop(id(v)) for v in group if id(v) in pos]
            if chunk:
                chunks.append(sorted(chunk))
        chunks.extend([i] for i in sorted(pos.values()))
        return chunks

    def _reduce_sparse(self, g):
        if self.op not in (_hvd.Average, _hvd.Sum):
            raise ValueError(f"op={self.op!r} is not supported for tf.IndexedSlices gradients; use "
                             f"op=Average or Sum, or sparse_as_dense=True")
        values = g.values * tf.cast(self.prescale, g.values.dtype) if self.prescale != 1.0 else g.values
        values = _hvd.allgather(values)
        indices = _hvd.allgather(g.indices)
        post = self.postscale / _hvd.size() if self.op == _hvd.Average else self.postscale
        if post != 1.0:
            values = values * tf.cast(post, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=g.dense_shape)


def _scale(g, factor):
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * tf.cast(factor, g.values.dtype), g.indices, g.dense_shape)
    return g * tf.cast(factor, g.dtype)


def _device(name):
    return tf.device(name) if name else contextlib.nullcontext()
