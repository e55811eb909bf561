"""Timing loops for benchmarks and calibration (wall clock, :func:`time.perf_counter`; pure Python).

Both run ``warmup`` untimed calls first (each result waited for), and take:

- ``fn``: the call to time, no arguments; its return value goes to ``wait``;
- ``wait``: blocks until a result of ``fn`` is computed (e.g. ``lambda t: t.numpy()`` for an asynchronous
  TensorFlow op); None when ``fn`` itself blocks;
- ``barrier``: called before timing starts (:func:`time_loop`) or before each timed call
  (:func:`time_calls`), e.g. ``comm.Barrier``, so that the ranks start together; None for none.

Both raise ValueError for ``iters`` < 1 or ``warmup`` < 0, and propagate whatever ``fn``, ``wait`` or
``barrier`` raises.
"""
from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["time_loop", "time_calls"]


def _check(iters: int, warmup: int) -> None:
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters={iters} must be >= 1 and warmup={warmup} >= 0")


def _warm_up(fn, warmup, wait) -> None:
    for _ in range(warmup):
        out = fn()
        if wait is not None:
            wait(out)


def time_loop(fn: Callable[[], Any], iters: int, *, warmup: int = 0, wait: Callable[[Any], Any] | None = None,
              barrier: Callable[[], Any] | None = None) -> float:
    """Mean seconds per call of ``iters`` back-to-back calls of ``fn``, timed as one interval: warm-up,
    ``barrier``, then the calls without waiting in between, and ``wait`` on the last result only (so
    asynchronous calls may overlap, as in a training loop)."""
    _check(iters, warmup)
    _warm_up(fn, warmup, wait)
    if barrier is not None:
        barrier()
    start = time.perf_counter()
    for _ in range(iters):
        out = fn()
    if wait is not None:
        wait(out)
    return (time.perf_counter() - start) / iters


def time_calls(fn: Callable[[], Any], iters: int, *, warmup: int = 0, wait: Callable[[Any], Any] | None = None,
               barrier: Callable[[], Any] | None = None) -> list[float]:
    """Seconds of each of ``iters`` calls of ``fn``, timed one by one: after the warm-up, per call
    ``barrier`` (untimed), then the call and ``wait`` on its result (timed). Returns ``iters`` values."""
    _check(iters, warmup)
    _warm_up(fn, warmup, wait)
    times = []
    for _ in range(iters):
        if barrier is not None:
            barrier()
        start = time.perf_counter()
        out = fn()
        if wait is not None:
            wait(out)
        times.append(time.perf_counter() - start)
    return times
