"""The one scaling policy of every torus transport and of the numpy API: Horovod's ScaleBuffer.

Horovod 0.28.1 (horovod/common/ops/collective_operations.cc, ``ScaleBuffer``) multiplies a buffer by a
double factor as follows, and so does :func:`scale`, for numpy arrays and TensorFlow tensors alike:

* float16 / bfloat16: converted to float32, multiplied by ``float32(factor)``, rounded back once;
* float32: multiplied by ``float32(factor)``;
* float64: multiplied by the double factor;
* integers: multiplied in double precision and truncated toward zero.

The factors themselves come from :func:`prescale` and :func:`postscale`: Horovod's TensorFlow op takes
``prescale_factor`` / ``postscale_factor`` as float32 attributes, so the user's value is rounded to float32
first; Average then divides by N in double precision (Horovod would pass ``postscale / N`` through its
float32 attribute, which rounds 1/N when N is not a power of two: one ulp off in float64 at N = 6).
"""
from __future__ import annotations

import numpy as np

__all__ = ["prescale", "postscale", "scale"]


def prescale(factor: float) -> float:
    """The pre-scale factor as Horovod applies it: ``float32(factor)`` widened to double."""
    return float(np.float32(factor))


def postscale(factor: float, divisor: int = 1) -> float:
    """The post-scale factor: ``float32(factor) / divisor`` in double (divisor = N for Average, else 1)."""
    return float(np.float32(factor)) / divisor


def scale(x, factor: float):
    """``x * factor`` with Horovod's ScaleBuffer rules (module docstring); returns ``x`` itself for 1.0.

    Args:
        x: a numpy array or a ``tf.Tensor`` (any shape) of a floating or integer dtype.
        factor: a double, e.g. from :func:`prescale` or :func:`postscale`.

    Returns:
        An array or tensor of ``x``'s shape and dtype (a new one unless ``factor == 1.0``).
    """
    if factor == 1.0:
        return x
    if isinstance(x, np.ndarray) or np.isscalar(x):
        x = np.asarray(x)
        if x.dtype.kind in "iu":
            return (x.astype(np.float64) * factor).astype(x.dtype)
        if x.dtype.itemsize < 4:
            return (x.astype(np.float32) * np.float32(factor)).astype(x.dtype)
        return (x * x.dtype.type(factor)).astype(x.dtype, copy=False)
    import tensorflow as tf

    dtype = x.dtype
    if dtype.is_integer:
        return tf.cast(tf.cast(x, tf.float64) * factor, dtype)
    if dtype.size < 4:
        return tf.cast(tf.cast(x, tf.float32) * tf.constant(factor, tf.float32), dtype)
    return x * tf.constant(factor, dtype)
