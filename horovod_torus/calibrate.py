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

import os
import sys

from horovod_torus import crossover

__all__ = ["main"]


def main(argv=None) -> int:
    """``python -m horovod_torus.calibrate``: list the crossover cache, or (under a launcher) calibrate and
    cache the crossover of this job's key for the numpy API and, with ``--tensorflow``, the TensorFlow torus."""
    import argparse

    from horovod_torus.settings import DEFAULT_CACHE_DIR

    p = argparse.ArgumentParser(prog="python -m horovod_torus.calibrate", description=main.__doc__.split("\n")[0])
    p.add_argument("--cache-dir", default=None, help=f"the cache directory (HOROVOD_TORUS_CACHE_DIR, else {DEFAULT_CACHE_DIR})")
    p.add_argument("--show", action="store_true", help="list the cache files and exit (no launcher needed)")
    p.add_argument("--grid", default=None, help="torus grid XxY (HOROVOD_TORUS_GRID, else the default)")
    p.add_argument("--tensorflow", action="store_true", help="also hvd.init (every TensorFlow transport)")
    p.add_argument("--force", action="store_true", help="measure again even when a cache file exists")
    p.add_argument("--version", action="version", version=f"%(prog)s {__import__('horovod_torus').__version__}")
    args = p.parse_args(argv)
    from horovod_torus.settings import TorusSettings

    cache_dir = TorusSettings.resolve(size=1, cache_dir=args.cache_dir, fields=("cache_dir",)).cache_dir
    if args.show:
        for d in crossover.show(cache_dir or DEFAULT_CACHE_DIR):
            key = d.get("key", {})
            print(f"{d['path']}: {d.get('error') or ''}{key.get('transport', '?')} {key.get('world_size', '?')} ranks "
                  f"grid {key.get('grid', '?')} {key.get('launcher', '?')} hosts {key.get('hosts', '?')} -> "
                  f"min_torus_bytes {d.get('min_torus_bytes')} ratios {d.get('ratios')} ({d.get('utc', '')})")
        return 0
    from mpi4py import MPI

    from horovod_torus.mpi import TorusComm

    comm = MPI.COMM_WORLD
    if args.force and comm.Get_rank() == 0 and cache_dir:
        for d in crossover.show(cache_dir):
            os.unlink(d["path"])
    comm.Barrier()
    with TorusComm.create(comm, args.grid, min_torus_bytes="auto", cache_dir=cache_dir or "off") as tc:
        lines = [f"numpy API, grid {tc.grid}: min_torus_bytes {tc.min_torus_bytes} ({tc.crossover_source})"]
    if args.tensorflow:
        import horovod_torus.tensorflow as hvd

        import tensorflow as tf

        torus = hvd.init(grid=args.grid, min_torus_bytes="auto", cache_dir=cache_dir or "off")
        torus([tf.zeros([1])], op=hvd.Sum)   # with a GPU visible the first call resolves it
        lines += [f"TensorFlow torus, transport {t}: min_torus_bytes {v} ({torus.crossover_source[t]})"
                  for t, v in torus.crossover.items()]
        hvd.shutdown()
    if comm.Get_rank() == 0:
        print("\n".join(lines) + (f"\ncached in {cache_dir}" if cache_dir else "\nno cache (off)"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
