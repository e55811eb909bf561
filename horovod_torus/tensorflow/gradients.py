"""Gradient reduction shared by DistributedOptimizer and DistributedGradientTape.

One :class:`GradientReducer` per optimizer/tape. Per step, :meth:`GradientReducer.__call__`:

1. keeps ``None`` gradients (frozen or unused variables) as ``None``, untouched and unreduced; which
   gradients are present is part of each call's name, so a gradient that is None on SOME ranks only
   raises ``tf.errors.FailedPreconditionError`` (InvalidArgumentError inside ``tf.function``) on every
   rank with the torus strategies (the name differs), instead of a silently wrong sum;
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
import dataclasses
import zlib

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.scaling import scale
from horovod_torus.strategies.registry import DEFAULT_STRATEGY, check_strategy, resolve_strategy
from horovod_torus.tensorflow.ops import check_op
from horovod_torus.tensorflow.reductions import check_process_set, reduce_sparse
from horovod_torus.tensorflow.runtime import generation

__all__ = ["GradientReducer", "ReductionOptions", "check_process_set", "normalize_groups"]


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


@dataclasses.dataclass(frozen=True)
class ReductionOptions:
    """How :class:`GradientReducer` reduces (Horovod's DistributedOptimizer/Tape parameters).

    Attributes:
        strategy: a registered strategy name (``"torus"``, ``"ring"``, ...) or a strategy callable;
            names are resolved at the first step (after ``init``).
        op: ``hvd.Average`` or ``hvd.Sum`` (``"ring"`` also takes Horovod's other ops for dense tensors).
        compression: ``hvd.Compression.none`` or ``hvd.Compression.fp16`` (dense gradients only).
        sparse_as_dense: densify ``tf.IndexedSlices`` before reducing them.
        gradient_predivide_factor: f > 0; only with ``op=Average``: scale 1/f before the sum, f/N after.
        groups: None (one strategy call per step), an int k > 0 (k calls over contiguous chunks) or a list
            of lists of variables (one call per list, one per remaining gradient).
        device_dense, device_sparse: ``tf.device`` strings for the two paths ('' = TensorFlow's choice).
        scale_local_gradients: divide gradients of local variables by N.
        name: name scope of the ops.
        bucket_bytes: None (default: one call with every gradient) or B > 0: the dense gradients are cut,
            in REVERSE order of the variables (the order backpropagation produces them), into buckets of
            at least B bytes (the last may be smaller), one strategy call each. Inside a compiled train
            step each bucket's all-reduce depends only on its own gradients, so TensorFlow can start it
            while the earlier layers' gradients are still being computed (PyTorch DDP uses 25 MB).

    Raises (at construction):
        ValueError: an op/predivide combination Horovod also rejects, bad groups.
        TypeError: a strategy callable with the wrong parameters.
    """

    strategy: object = DEFAULT_STRATEGY
    op: object = _hvd.Average
    compression: object = _hvd.Compression.none
    sparse_as_dense: bool = False
    gradient_predivide_factor: float = 1.0
    groups: object = None
    device_dense: str = ""
    device_sparse: str = ""
    scale_local_gradients: bool = True
    name: str = "DistributedGradients"
    bucket_bytes: int | None = None

    def __post_init__(self):
        if self.bucket_bytes is not None:
            if isinstance(self.bucket_bytes, bool) or not isinstance(self.bucket_bytes, int) or self.bucket_bytes <= 0:
                raise ValueError(f"bucket_bytes={self.bucket_bytes!r} must be None or an int > 0 (bytes)")
            if self.groups is not None:
                raise ValueError(f"pass groups={self.groups!r} or bucket_bytes={self.bucket_bytes}, not both")
        check_strategy(self.strategy)  # an unknown name or a bad callable fails now, not at the first step
        op = check_op(self.op, horovod_ops=True)
        object.__setattr__(self, "op", op)
        f = self.gradient_predivide_factor
        if not f or f <= 0:
            raise ValueError(f"gradient_predivide_factor={f!r} must be > 0")
        if f != 1.0 and op != _hvd.Average:
            raise ValueError(f"gradient_predivide_factor={f} is supported only with op=Average (Horovod's rule)")
        object.__setattr__(self, "groups", normalize_groups(self.groups))

    @property
    def prescale(self) -> float:
        return 1.0 / self.gradient_predivide_factor if self.op == _hvd.Average else 1.0

    @property
    def postscale(self) -> float:
        return self.gradient_predivide_factor if self.op == _hvd.Average else 1.0

    @property
    def strategy_name(self) -> str:
        s = self.strategy
        return s if isinstance(s, str) else getattr(s, "__name__", repr(s))


class GradientReducer:
    """All-reduces one step's gradients through a strategy (see the module docstring for the steps).

    Args:
        options: the :class:`ReductionOptions`.
    """

    def __init__(self, options: ReductionOptions):
        self.options = options
        self._strategy = None  # resolved at the first step: the torus exists only after init()
        self._generation = None  # the runtime.generation() it was resolved in (an elastic reset makes a new torus)
        self._local = {}  # id(variable) -> variable

    @classmethod
    def from_horovod_args(cls, *, groups, num_groups, process_set, sparse_as_dense, **options) -> "GradientReducer":
        """The reducer of Horovod's DistributedOptimizer/DistributedGradientTape arguments (``num_groups`` is
        Horovod's alias of ``groups``; only the global process set)."""
        check_process_set(process_set)
        return cls(ReductionOptions(groups=normalize_groups(groups, num_groups),
                                    sparse_as_dense=bool(sparse_as_dense), **options))

    @property
    def strategy(self):
        if self._strategy is None or self._generation != generation():
            self._strategy = resolve_strategy(self.options.strategy)
            self._generation = generation()
        return self._strategy

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
        o = self.options
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
                if o.scale_local_gradients:
                    out[i] = _scale(g, 1.0 / _hvd.size())
                continue
            if isinstance(g, tf.IndexedSlices):
                if o.sparse_as_dense:
                    out[i] = g = tf.convert_to_tensor(g)
                else:
                    sparse.append(i)
                    continue
            dense.append(i)
        with tf.name_scope(o.name + "_Allreduce"):
            with _device(o.device_dense):
                for k, idx in enumerate(self._split(dense, variables, out)):
                    reduced = self.strategy([out[i] for i in idx], o.op, _call_name(o.name, k, idx, len(grads)),
                                            o.compression, o.prescale, o.postscale)
                    if len(reduced) != len(idx):
                        raise RuntimeError(f"strategy {o.strategy_name!r} returned {len(reduced)} "
                                           f"tensors for {len(idx)} inputs")
                    for i, r in zip(idx, reduced):
                        out[i] = r
            with _device(o.device_sparse):
                for i in sparse:
                    out[i] = reduce_sparse(out[i], o.op, o.prescale, o.postscale)
        return out

    def _split(self, dense, variables, tensors):
        if not dense:
            return []
        if self.options.bucket_bytes:
            return _buckets(dense, tensors, self.options.bucket_bytes)
        groups = self.options.groups
        if groups is None:
            return [dense]
        if isinstance(groups, int):
            return _split_list(dense, groups)
        pos = {id(variables[i]): i for i in dense}
        chunks = []
        for group in groups:
            chunk = [pos.pop(id(v)) for v in group if id(v) in pos]
            if chunk:
                chunks.append(sorted(chunk))
        chunks.extend([i] for i in sorted(pos.values()))
        return chunks


def _buckets(dense, tensors, bucket_bytes):
    """Indices in reverse order, cut into buckets of >= bucket_bytes (static sizes; unknown count as 0)."""
    buckets, current, size = [], [], 0
    for i in reversed(dense):
        t = tensors[i]
        current.append(i)
        size += (t.shape.num_elements() or 0) * t.dtype.size
        if size >= bucket_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def _call_name(prefix: str, k: int, idx, n: int) -> str:
    """The strategy call's name: which of the n gradients it carries, as a CRC-32. The torus compares names
    across ranks, so gradients that are None on some ranks only (a layer one rank's loss does not use)
    raise on every rank instead of summing one layer's gradient into another's of the same shape."""
    present = bytes(1 if i in set(idx) else 0 for i in range(n))
    return f"{prefix}.{k}.{zlib.crc32(present):08x}"


def _scale(g, factor):
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(scale(g.values, factor), g.indices, g.dense_shape)
    return scale(g, factor)


def _device(name):
    return tf.device(name) if name else contextlib.nullcontext()
