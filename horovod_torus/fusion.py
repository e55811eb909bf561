"""Fusion-buffer layout: many tensors -> one flat buffer per dtype, and the row shard sizes.

Pure Python (no TensorFlow): the TF and numpy paths both use this plan, so a step's gradients make
one pass through the three torus phases per dtype instead of one pass per tensor.

Layout of one buffer (elements, not bytes)::

    [ t0.ravel() | t1.ravel() | ... | tk.ravel() ]      length = total

No padding: the row reduce-scatter splits the buffer as Horovod's ``reducescatter`` does (the first
``total % x`` ranks of a row get one extra element, see :func:`shard_counts`). Ranks of one column hold the
same position in their rows, so their shards have equal sizes, as the column all-reduce needs; a shard
may be empty when total < x. Because the buffer length is the true element count, a shape that differs
across ranks is caught by Horovod's own shape check instead of being hidden by padding.
"""
from __future__ import annotations

import dataclasses
import math

__all__ = ["FusionGroup", "plan_fusion", "shard_counts"]


def shard_counts(count: int, x: int) -> list[int]:
    """Elements owned by each of the x ranks of a row after the reduce-scatter of ``count`` elements.

    Horovod's rule (``hvd.reducescatter`` splits dim 0; uneven sizes give the first ranks one extra row):
    ``count // x + (1 if i < count % x else 0)`` for position i. The counts sum to ``count``.
    """
    base, extra = divmod(count, x)
    return [base + (1 if i < extra else 0) for i in range(x)]


@dataclasses.dataclass(frozen=True)
class FusionGroup:
    """One fused buffer.

    Attributes:
        dtype: the dtype key shared by every member (e.g. ``"float32"``).
        indices: positions of the members in the caller's tensor list.
        shapes: the members' shapes.
        counts: the members' element counts.
        offsets: start element of each member in the buffer.
        total: sum of counts: the buffer length in elements.
    """

    dtype: str
    indices: tuple
    shapes: tuple
    counts: tuple
    offsets: tuple
    total: int


def plan_fusion(shapes, dtypes) -> list[FusionGroup]:
    """Group tensors by dtype (first-appearance order) and lay each group out in one buffer.

    Args:
        shapes: sequence of shapes (tuples of ints; ``()`` for a scalar).
        dtypes: sequence of dtype keys (any hashable with a stable ``str``), same length.

    Returns:
        One FusionGroup per distinct dtype, in order of first appearance.

    Raises:
        ValueError: mismatched lengths, or a shape with an unknown (None) dimension.
    """
    shapes, dtypes = list(shapes), list(dtypes)
    if len(shapes) != len(dtypes):
        raise ValueError(f"plan_fusion got {len(shapes)} shapes but {len(dtypes)} dtypes")
    order: dict = {}
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        shape = tuple(shape)
        if any(d is None for d in shape):
            raise ValueError(
                f"tensor {i} has shape {shape} with an unknown dimension: the torus all-reduce needs "
                f"fully defined shapes (build the model / call the function with concrete input shapes)")
        order.setdefault(str(dtype), []).append((i, shape))
    groups = []
    for dtype, members in order.items():
        counts = tuple(math.prod(s) for _, s in members)
        offsets, acc = [], 0
        for c in counts:
            offsets.append(acc)
            acc += c
        groups.append(FusionGroup(dtype=dtype, indices=tuple(i for i, _ in members),
                                  shapes=tuple(s for _, s in members), counts=counts,
                                  offsets=tuple(offsets), total=acc))
    return groups
