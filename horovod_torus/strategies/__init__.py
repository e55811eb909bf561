"""Pluggable all-reduce strategies for the drop-in Horovod layer.

Built-ins: ``"torus"`` (the 2D torus made by ``hvd.init``, on its default transport), ``"torus:horovod"``
and ``"torus:mpi"`` (the same torus on one transport), ``"ring"`` (Horovod's flat ``grouped_allreduce``,
the reference). The contract a strategy follows is in :mod:`horovod_torus.strategies.registry`;
``DistributedOptimizer``, ``DistributedGradientTape``, ``allreduce``, ``grouped_allreduce``, the training
app (``--strategy``) and the benchmark (``--strategies``) take any registered name.
"""
from horovod_torus.strategies.registry import (  # noqa: F401
    DEFAULT_STRATEGY, STRATEGY_ARGS, available_strategies, check_strategy, get_strategy, import_strategy_modules,
    register_strategy, resolve_strategy, unregister_strategy,
)

__all__ = ["register_strategy", "unregister_strategy", "get_strategy", "available_strategies", "resolve_strategy", "check_strategy",
           "import_strategy_modules", "DEFAULT_STRATEGY", "STRATEGY_ARGS"]
