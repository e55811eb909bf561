"""Factories of the built-in strategies named in :mod:`horovod_torus.strategies.registry`.

The torus ones return a strategy bound to the process's :class:`TorusAllreduce` (made by ``init``): the
data path then calls that object directly, with no global look-up per call. ``"horovod"`` is Horovod's
own flat all-reduce (:func:`horovod_torus.tensorflow.ops.horovod_allreduce`).
"""
from __future__ import annotations

from horovod_torus.tensorflow import runtime
from horovod_torus.tensorflow.ops import horovod_allreduce

__all__ = ["horovod", "torus", "torus_horovod", "torus_mpi"]


def horovod():
    return horovod_allreduce


def torus():
    return runtime.torus().strategy()


def torus_horovod():
    return runtime.torus().strategy("horovod")


def torus_mpi():
    return runtime.torus().strategy("mpi")
