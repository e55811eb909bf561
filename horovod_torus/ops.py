"""The element-wise reductions of the torus, by name: the one table every transport uses.

A transport is asked for one of :data:`REDUCE_OPS` by name; this module maps each name to its numpy ufunc
(:data:`UFUNCS`: the in-process transport and the MPI rings fold with it) and to Horovod's label
(:data:`LABELS`: the ``op`` word of a call signature, error messages). The MPI transport maps the same names
to ``MPI.SUM`` etc. (``getattr(MPI, name.upper())``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["REDUCE_OPS", "UFUNCS", "LABELS", "check_reduce_op"]

#: The element-wise reductions a transport may be asked for ("sum" is all the TensorFlow layer uses).
REDUCE_OPS = ("sum", "min", "max", "prod")

#: name -> the numpy ufunc that folds two buffers (``ufunc(a, b, out=a)``).
UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}

#: name -> Horovod's name of the op (``hvd.Sum``, ``hvd.Min``, ``hvd.Max``, ``hvd.Product``).
LABELS = {"sum": "Sum", "min": "Min", "max": "Max", "prod": "Product"}


def check_reduce_op(op: str) -> str:
    """``op`` if it is one of :data:`REDUCE_OPS`; else ValueError naming it and the choices."""
    if op not in REDUCE_OPS:
        raise ValueError(f"op={op!r} is not an element-wise reduction: choose one of {', '.join(REDUCE_OPS)}")
    return op
