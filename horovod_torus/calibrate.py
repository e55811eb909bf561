"""``python -m horovod_torus.calibrate``: the crossover cache from the command line (before a job starts).

Examples::

    python -m horovod_torus.calibrate --show                       # list the cache files (no launcher)
    mpirun -np 4 python -m horovod_torus.calibrate --grid 2x2      # measure and cache the numpy API's crossover
    mpirun -np 4 python -m horovod_torus.calibrate --tensorflow    # ... and every TensorFlow transport's
    mpirun -np 4 python -m horovod_torus.calibrate --force         # measure again

The calibration, the key and the file are :mod:`horovod_torus.crossover`'s; this module only drives them
(through :meth:`horovod_torus.mpi.TorusComm.create` and :func:`horovod_torus.tensorflow.init`).
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

from horovod_torus import crossover

__all__ = ["main"]


def _error(e: Exception) -> int:
    """Print ``e`` as the one-line ``error:`` the other tools print (horovod_torus.bench's); return 2."""
    print(f"horovod_torus.calibrate: error: {e}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    """``python -m horovod_torus.calibrate``: list the crossover cache, or (under a launcher) calibrate and
    cache the crossover of this job's key for the numpy API and, with ``--tensorflow``, the TensorFlow torus.

    Returns the exit status: 0, or 2 after a one-line ``error:`` on stderr for a bad setting (a malformed
    ``--grid``, checked as :mod:`horovod_torus.bench` checks it, with
    :meth:`horovod_torus.topology.TorusTopology.parse`; a grid whose X*Y is not the world size; a bad
    ``HOROVOD_TORUS_*`` variable), on every rank alike and before anything is deleted or measured."""
    import argparse

    from horovod_torus.settings import DEFAULT_CACHE_DIR, TorusSettings
    from horovod_torus.topology import TorusTopology

    # --help's description: the docstring's first paragraph, whole, after the command's name
    description = " ".join(main.__doc__.split("\n\n")[0].split()).split(": ", 1)[1]
    description = description[0].upper() + description[1:].replace("``", "")
    p = argparse.ArgumentParser(prog="python -m horovod_torus.calibrate", description=description)
    p.add_argument("--cache-dir", default=None, help=f"the cache directory (HOROVOD_TORUS_CACHE_DIR, else {DEFAULT_CACHE_DIR})")
    p.add_argument("--show", action="store_true", help="list the cache files and exit (no launcher needed)")
    p.add_argument("--grid", default=None, help="torus grid XxY (HOROVOD_TORUS_GRID, else the default)")
    p.add_argument("--tensorflow", action="store_true", help="also hvd.init (every TensorFlow transport)")
    p.add_argument("--force", action="store_true", help="measure again even when a cache file exists")
    p.add_argument("--version", action="version", version=f"%(prog)s {__import__('horovod_torus').__version__}")
    args = p.parse_args(argv)
    try:
        if args.grid is not None:
            TorusTopology.parse(args.grid)  # the bench's check (horovod_torus.bench.config_from_args)
        cache_dir = TorusSettings.resolve(size=1, cache_dir=args.cache_dir, fields=("cache_dir",)).cache_dir
    except ValueError as e:
        return _error(e)
    if args.show:
        found = crossover.show(cache_dir or DEFAULT_CACHE_DIR)
        if not found:
            print(f"no crossover cache files in {cache_dir or DEFAULT_CACHE_DIR}")
        for d in found:
            key = d.get("key", {})
            print(f"{d['path']}: {d.get('error') or ''}{key.get('transport', '?')} {key.get('world_size', '?')} ranks "
                  f"grid {key.get('grid', '?')} {key.get('launcher', '?')} hosts {key.get('hosts', '?')} -> "
                  f"min_torus_bytes {d.get('min_torus_bytes')} ratios {d.get('ratios')} ({d.get('utc', '')})")
        return 0
    from mpi4py import MPI

    from horovod_torus.mpi import TorusComm, comm_world

    comm = MPI.COMM_WORLD
    try:  # the grid must fit this job (the same answer on every rank) before --force deletes anything
        size, local_size, _ = comm_world(comm)
        TorusSettings.resolve(size=size, local_size=local_size, grid=args.grid, fields=("grid",))
    except ValueError as e:
        return _error(e)
    if args.force and comm.Get_rank() == 0 and cache_dir:
        for d in crossover.show(cache_dir):
            os.unlink(d["path"])
    comm.Barrier()
    unwritten = []   # CrossoverCacheWarning: a cache that could not be written (the last line must not say cached)
    try:  # ValueError: raised on every rank before any torus communicator exists
        with _cache_warnings(unwritten):
            tc = TorusComm.create(comm, args.grid, min_torus_bytes="auto", cache_dir=cache_dir or "off")
    except ValueError as e:
        return _error(e)
    with tc:
        lines = [f"numpy API, grid {tc.grid}: min_torus_bytes {_crossover_text(tc.min_torus_bytes)} "
                 f"({tc.crossover_source})"]
    sources = [tc.crossover_source]
    if args.tensorflow:
        import horovod_torus.tensorflow as hvd

        import tensorflow as tf

        try:  # ValueError: raised on every rank before any collective
            with _cache_warnings(unwritten):
                torus = hvd.init(grid=args.grid, min_torus_bytes="auto", cache_dir=cache_dir or "off")
                torus([tf.zeros([1])], op=hvd.Sum)   # with a GPU visible the first call resolves it
        except ValueError as e:
            return _error(e)
        lines += [f"TensorFlow torus, transport {t}: min_torus_bytes {_crossover_text(v)} ({torus.crossover_source[t]})"
                  for t, v in torus.crossover.items()]
        sources += list(torus.crossover_source.values())
        hvd.shutdown()
    if comm.Get_rank() == 0:
        if not cache_dir:
            where = "no cache (off)"
        elif all(x == "setting" for x in sources):   # one rank: nothing to measure, nothing written
            where = f"nothing measured (one rank): nothing cached in {cache_dir}"
        elif unwritten:
            where = f"NOT cached: {cache_dir} could not be written (the warning above says why)"
        else:
            where = f"cached in {cache_dir}"
        print("\n".join(lines) + "\n" + where)
    sys.stdout.flush()
    return 0


def _crossover_text(value: int) -> str:
    """A crossover in words: its bytes, or :data:`horovod_torus.crossover.NEVER` as "never"."""
    return f"{value} (never: the flat call at every size)" if value >= crossover.NEVER else str(value)


@contextlib.contextmanager
def _cache_warnings(unwritten: list):
    """Record each :class:`horovod_torus.crossover.CrossoverCacheWarning` into ``unwritten`` and show every
    warning as it would have been shown."""
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        for w in caught:
            if issubclass(w.category, crossover.CrossoverCacheWarning):
                unwritten.append(w)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


if __name__ == "__main__":
    raise SystemExit(main())
