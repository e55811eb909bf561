"""The strategy registry: named all-reduce strategies the drop-in layer reduces gradients with.

A *strategy* is a callable with the trailing arguments of every Horovod collective::

    fn(tensors: list[tf.Tensor], op, name, compression, prescale_factor, postscale_factor) -> list[tf.Tensor]

It all-reduces a list of dense tensors over **all** ranks and returns a list of the same length, shapes and
dtypes, equal to ``postscale_factor * op_k(prescale_factor * tensors_k)`` over the N ranks k (``op`` is
``horovod.tensorflow.Average`` or ``Sum``; Average divides exactly once by N). The optimizer and the tape
call it ONCE per step with all the step's dense gradients, so a strategy is free to fuse them.
The reference strategy ``"horovod"`` (Horovod's flat ``grouped_allreduce``) defines correctness: any other
strategy must give the same values up to floating-point reassociation.

Built-ins (always registered, loaded on first use, so this module imports neither TensorFlow nor Horovod):

* ``"torus"``: the 2D torus of the process (``hvd.init``), on the transport chosen at init;
* ``"torus:horovod"`` / ``"torus:mpi"``: the same torus on the Horovod-ops / the mpi4py transport;
* ``"horovod"``: Horovod's flat ``grouped_allreduce`` (the reference; under mpirun an ``MPI_Allreduce``
  whose algorithm the MPI library picks, under Gloo a ring, on GPUs NCCL's ring or tree);
* ``"ring"``: deprecated alias of ``"horovod"`` (the name it had; it still works, with a
  DeprecationWarning).
"""
from __future__ import annotations

import inspect
import warnings
from typing import Callable

__all__ = ["register_strategy", "unregister_strategy", "get_strategy", "available_strategies", "check_strategy",
           "import_strategy_modules", "resolve_strategy", "STRATEGY_ARGS", "DEFAULT_STRATEGY"]

#: The strategy used when none is named.
DEFAULT_STRATEGY = "torus"

#: The positional parameters every strategy accepts, in this order.
STRATEGY_ARGS = ("tensors", "op", "name", "compression", "prescale_factor", "postscale_factor")

_REGISTRY: dict[str, Callable] = {}

#: Built-in names -> "module:factory"; the factory returns the strategy (torus ones need ``init`` first).
_BUILTIN = {
    "torus": "horovod_torus.tensorflow.builtin_strategies:torus",
    "torus:horovod": "horovod_torus.tensorflow.builtin_strategies:torus_horovod",
    "torus:mpi": "horovod_torus.tensorflow.builtin_strategies:torus_mpi",
    "horovod": "horovod_torus.tensorflow.builtin_strategies:horovod",
}

#: Deprecated names -> the built-in they stand for.
ALIASES = {"ring": "horovod"}


def _check_callable(fn, label: str) -> None:
    if not callable(fn):
        raise TypeError(f"strategy {label} must be callable, got {fn!r} ({type(fn).__name__})")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: nothing more to check
        return
    try:
        sig.bind(*[None] * len(STRATEGY_ARGS))
        sig.bind(**{a: None for a in STRATEGY_ARGS})
    except TypeError as exc:
        raise TypeError(
            f"strategy {label} = {getattr(fn, '__qualname__', fn)!r}{sig} cannot be called as "
            f"fn({', '.join(STRATEGY_ARGS)}) by position and by keyword ({exc}); give it exactly these "
            f"parameters (see horovod_torus.strategies.registry)") from None


def register_strategy(name: str, fn: Callable, *, overwrite: bool = False) -> Callable:
    """Register ``fn`` as the all-reduce strategy called ``name``.

    Args:
        name: a non-empty string without whitespace, e.g. ``"my_hierarchical"``.
        fn: ``fn(tensors, op, name, compression, prescale_factor, postscale_factor) -> list`` (see the
            module docstring); checked here, when registered, to accept those six arguments by position
            and by keyword.
        overwrite: replace a user strategy already registered under ``name``. The built-ins
            (``"horovod"``, ``"torus"``, ``"torus:horovod"``, ``"torus:mpi"``) and the alias ``"ring"``
            can never be replaced.

    Returns:
        ``fn`` (so this can be used as a decorator through ``functools.partial``).

    Raises:
        ValueError: ``name`` is empty, has whitespace, is a built-in, or is taken and ``overwrite`` is False.
        TypeError: ``name`` is not a string, ``fn`` is not callable or has the wrong parameters.

    Example::

        from horovod_torus.strategies import register_strategy, get_strategy
        def sum_then_scale(tensors, op, name, compression, prescale_factor, postscale_factor):
            return get_strategy("horovod")(tensors, op, name, compression, prescale_factor, postscale_factor)
        register_strategy("mine", sum_then_scale)
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), strategy="mine")
    """
    if not isinstance(name, str):
        raise TypeError(f"strategy name must be a str, got {name!r} ({type(name).__name__})")
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"strategy name {name!r} must be non-empty and contain no whitespace")
    if name in _BUILTIN or name in ALIASES:
        raise ValueError(f"strategy {name!r} is built in and cannot be replaced; register yours under "
                         f"another name")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"strategy {name!r} is already registered; pass overwrite=True to replace it")
    _check_callable(fn, repr(name))
    _REGISTRY[name] = fn
    return fn


def unregister_strategy(name: str) -> None:
    """Remove a user strategy. Raises ValueError for a built-in or an unknown name."""
    if name in _BUILTIN or name in ALIASES:
        raise ValueError(f"strategy {name!r} is built in and cannot be removed")
    get_strategy(name)
    del _REGISTRY[name]


def get_strategy(name: str) -> Callable:
    """The strategy registered under ``name``.

    Raises:
        ValueError: no strategy has that name (the message lists the registered ones).
        TypeError: ``name`` is not a string.
        RuntimeError: a torus strategy before ``horovod_torus.tensorflow.init()``.
    """
    if not isinstance(name, str):
        raise TypeError(f"strategy name must be a str, got {name!r} ({type(name).__name__})")
    if name in ALIASES:
        warnings.warn(f"strategy {name!r} is deprecated: use {ALIASES[name]!r} (the same call)",
                      DeprecationWarning, stacklevel=2)
        name = ALIASES[name]
    if name in _BUILTIN:
        import importlib

        module, factory = _BUILTIN[name].split(":")
        return getattr(importlib.import_module(module), factory)()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown all-reduce strategy {name!r}: registered are "
                         f"{', '.join(map(repr, available_strategies()))}; add yours with "
                         f"horovod_torus.strategies.register_strategy(name, fn)") from None


def check_strategy(strategy) -> None:
    """Raise now (ValueError/TypeError) for an unknown name or a callable with wrong parameters, without
    resolving a built-in (the torus ones exist only after ``init``)."""
    if isinstance(strategy, str):
        if strategy not in _BUILTIN and strategy not in ALIASES:
            get_strategy(strategy)
    else:
        _check_callable(strategy, "argument")


def available_strategies() -> tuple[str, ...]:
    """Names of the registered strategies (built-ins included, deprecated aliases not), sorted."""
    return tuple(sorted(set(_REGISTRY) | set(_BUILTIN)))


def resolve_strategy(strategy) -> Callable:
    """A strategy from a registered name or a callable (checked like :func:`register_strategy`)."""
    if isinstance(strategy, str):
        return get_strategy(strategy)
    _check_callable(strategy, "argument")
    return strategy


def import_strategy_modules(modules) -> None:
    """Import each module of ``modules`` (names, or one comma-separated string) for the strategies it
    registers: what ``--strategy-module`` does in the training app and the benchmark.

    Raises:
        ImportError: naming the module that could not be imported.
    """
    import importlib

    if isinstance(modules, str):
        modules = [modules]
    for item in modules or []:
        for module in filter(None, (m.strip() for m in item.split(","))):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ImportError(f"--strategy-module {module!r} cannot be imported ({exc}): put it on "
                                  f"PYTHONPATH (every rank must be able to import it)") from exc
