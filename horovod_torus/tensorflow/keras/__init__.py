"""Drop-in replacement for ``horovod.tensorflow.keras`` on Keras 3, reducing through the 2D torus.

``import horovod_torus.tensorflow.keras as hvd`` in place of ``import horovod.tensorflow.keras as hvd``;
``hvd.init()`` registers the torus process sets; ``hvd.DistributedOptimizer`` reduces each step's
gradients through the strategy chosen with its keyword-only ``strategy=`` (``"torus"`` by default).
"""
from horovod.tensorflow import (  # noqa: F401  (the names horovod.tensorflow.keras re-exports)
    Average, ProcessSet, Sum, add_process_set, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    global_process_set, gloo_built, gloo_enabled, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, remove_process_set, rocm_built, size, start_timeline, stop_timeline,
)
from horovod.common.util import is_version_greater_equal_than  # noqa: F401
from horovod.tensorflow.compression import Compression  # noqa: F401
import horovod.tensorflow as _hvd_tf
import tensorflow as tf

from horovod_torus.strategies.registry import DEFAULT_STRATEGY

from horovod_torus.strategies.registry import available_strategies, get_strategy, register_strategy  # noqa: F401
from horovod_torus.tensorflow.collectives import grouped_torus_allreduce, torus_allreduce  # noqa: F401
from horovod_torus.tensorflow.keras.optimizer import (  # noqa: F401
    DistributedOptimizer, is_distributed_optimizer,
)
from horovod_torus.tensorflow.runtime import (  # noqa: F401
    backend, grid, init, settings, shutdown, torus, torus_process_sets, transport,
)
from horovod_torus.tensorflow.torus import TorusAllreduce  # noqa: F401
from horovod_torus.signature import TorusMismatchError  # noqa: F401,E402
from horovod_torus.stall import TorusStallError  # noqa: F401,E402
from horovod_torus.tensorflow.keras import callbacks  # noqa: F401,E402
from horovod_torus.tensorflow.keras.saving import load_model  # noqa: F401,E402
from horovod_torus.tensorflow.keras import stops as _stops  # noqa: E402

_stops.install()  # records which callback set model.stop_training (the message of a one-rank stop)
from horovod_torus.tensorflow.reductions import allreduce as _allreduce  # noqa: E402
from horovod_torus.tensorflow.variables import broadcast_variables  # noqa: F401,E402


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, *, strategy=DEFAULT_STRATEGY):
    """``horovod.tensorflow.keras.allreduce``: all-reduce a tensor-compatible value (eager), through
    ``strategy`` (keyword-only, ``"torus"`` by default). Returns a tensor of the value's shape."""
    return _allreduce(tf.constant(value, name=name), average=average, compression=compression, op=op,
                      prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                      strategy=strategy)


def allgather(value, name=None):
    """``horovod.tensorflow.keras.allgather``: concatenate the ranks' values along dimension 0."""
    return _hvd_tf.allgather(tf.constant(value, name=name))


def broadcast(value, root_rank, name=None):
    """``horovod.tensorflow.keras.broadcast``: rank ``root_rank``'s value on every rank."""
    return _hvd_tf.broadcast(tf.constant(value, name=name), root_rank)


def reducescatter(value, name=None, op=Average):
    """``horovod.tensorflow.keras.reducescatter``: the ranks' values reduced with ``op`` (Horovod's op,
    ``Average`` by default), this rank's slice of dimension 0 (Horovod's own call, not the torus)."""
    return _hvd_tf.reducescatter(tf.constant(value, name=name), op=op)


def broadcast_global_variables(root_rank):
    """``horovod.tensorflow.keras.broadcast_global_variables``: Horovod's, TF1 global variables only (it
    raises in eager mode, as Horovod's does: use ``broadcast_variables`` or the broadcast callback)."""
    return _hvd_tf.broadcast_global_variables(root_rank)
from horovod_torus.tensorflow.keras import elastic  # noqa: F401,E402
