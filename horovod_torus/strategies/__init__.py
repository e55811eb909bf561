"""Pluggable all-reduce strategies for the drop-in Horovod layer.

Built-ins: ``"ring"`` (Horovod's flat ``grouped_allreduce``, the reference) and ``"torus"``
(:func:`horovod_torus.tensorflow.grouped_torus_allreduce`). The contract a strategy follows is in
:mod:`horovod_torus.strategies.registry`; ``DistributedOptimizer``, ``DistributedGradientTape``,
``allreduce`` and ``grouped_allreduce`` take ``strategy=`` (a registered name or a callable).
"""
from horovod_torus.strategies.registry import (  # noqa: F401
    DEFAULT_STRATEGY, STRATEGY_ARGS, available_strategies, get_strategy, register_strategy, resolve_strategy,
    unregister_strategy,
)
from horovod_torus.strategies.registry import _register_builtin
from horovod_torus.strategies.builtins import ring_allreduce, torus_allreduce  # noqa: F401

_register_builtin("ring", ring_allreduce)
_register_builtin("torus", torus_allreduce)

__all__ = ["register_strategy", "unregister_strategy", "get_strategy", "available_strategies", "resolve_strategy",
           "ring_allreduce", "torus_allreduce", "DEFAULT_STRATEGY", "STRATEGY_ARGS"]
