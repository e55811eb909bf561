"""Benchmarks of horovod-torus.

* ``python -m horovod_torus.bench``: all-reduce benchmark in the nccl-tests style (torus, ring,
  mpi-torus, mpi), see :mod:`horovod_torus.bench.__main__`;
* ``python -m horovod_torus.bench.train``: ResNet-50 training throughput on synthetic data.

Modules: ``report`` (algbw/busbw, table, JSON), ``allreduce`` (timing protocol), ``reducers`` (the
strategies), ``world`` (launcher, barrier/gather, host facts), ``plot``.
"""
