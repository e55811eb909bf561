"""Drop-in replacement for ``horovod.tensorflow.keras`` on Keras 3, reducing through the 2D torus.

``import horovod_torus.tensorflow.keras as hvd`` in place of ``import horovod.tensorflow.keras as hvd``;
``hvd.init()`` registers the torus process sets; ``hvd.DistributedOptimizer`` reduces each step's
gradients through the strategy chosen with its keyword-only ``strategy=`` (``"torus"`` by default).
"""
from horovod.tensorflow import (  # noqa: F401  (the names horovod.tensorflow.keras re-exports)
    Average, ProcessSet, Sum, cross_rank, cross_size, global_process_set, gloo_built, gloo_enabled,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    rank, size,
)
from horovod.tensorflow.compression import Compression  # noqa: F401

from horovod_torus.strategies import available_strategies, get_strategy, register_strategy  # noqa: F401
from horovod_torus.tensorflow.collectives import grouped_torus_allreduce, torus_allreduce  # noqa: F401
from horovod_torus.tensorflow.keras.optimizer import (  # noqa: F401
    DistributedOptimizer, is_distributed_optimizer,
)
from horovod_torus.tensorflow.runtime import grid, init, shutdown, torus_process_sets  # noqa: F401
