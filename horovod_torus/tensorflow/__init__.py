"""Drop-in replacement for ``horovod.tensorflow`` whose reductions go through the 2D torus.

``import horovod_torus.tensorflow as hvd`` in place of ``import horovod.tensorflow as hvd``;
call ``hvd.init()`` (which registers the torus row/column process sets) before any collective.
``allreduce``, ``grouped_allreduce`` and ``DistributedGradientTape`` have Horovod's signatures and reduce
through the torus; a keyword-only ``strategy=`` picks another registered strategy (``"ring"``: Horovod's
own flat all-reduce). ``broadcast_variables`` also accepts Keras 3 variables.
"""
from horovod.tensorflow import (  # noqa: F401  (re-exported: the names Horovod users touch)
    Average, Compression, ProcessSet, Sum, allgather, broadcast, global_process_set, is_initialized,
    local_rank, local_size, rank, size,
)
# Passed through unchanged, so a script keeps working after the import swap: the other reduction ops
# (for strategy="ring"; the torus itself does Sum/Average), topology queries, build/controller queries,
# the object and other collectives, and the timeline.
from horovod.tensorflow import (  # noqa: F401
    Adasum, Max, Min, Product, add_process_set, allgather_object, alltoall, broadcast_, broadcast_object,
    local_rank_op, local_size_op, rank_op, size_op,
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, grouped_allgather,
    grouped_reducescatter, is_homogeneous, join, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    reducescatter, remove_process_set, rocm_built, start_timeline, stop_timeline,
)
# Horovod's helpers and submodules that move no gradients (scripts and Horovod's own tests use them):
from horovod.tensorflow import (  # noqa: F401
    SyncBatchNormalization, _executing_eagerly, broadcast_global_variables, broadcast_object_fn,
    check_num_rank_power_of_2, compression, functions, gpu_available, mpi_ops, refs_to_vars, util,
    vars_to_refs,
)

from horovod_torus.tf_defaults import skip_autograph

skip_autograph()  # the package's functions run as written inside a user's tf.function (tf_defaults.py)

from horovod_torus.tensorflow.collectives import (  # noqa: F401
    SUPPORTED_DTYPES, grouped_torus_allreduce, torus_allreduce,
)
from horovod_torus.tensorflow.runtime import (  # noqa: F401
    backend, grid, init, ompi_rules_file, settings, shutdown, torus, torus_comm, torus_process_sets, transport,
)
from horovod_torus.tensorflow.torus import TorusAllreduce  # noqa: F401
from horovod_torus.signature import TorusMismatchError  # noqa: F401
from horovod_torus.stall import TorusStallError  # noqa: F401
from horovod_torus.agreement import SettingsMismatchError  # noqa: F401
from horovod_torus.topology import TorusTopology  # noqa: F401
from horovod_torus.tensorflow.reductions import allreduce, grouped_allreduce  # noqa: F401
from horovod_torus.tensorflow.variables import broadcast_variables  # noqa: F401
from horovod_torus.tensorflow.gradient_tape import DistributedGradientTape  # noqa: F401
from horovod_torus.strategies.registry import (  # noqa: E402,F401
    available_strategies, get_strategy, register_strategy,
)
from horovod_torus.tensorflow import elastic  # noqa: E402,F401  (ours: Keras 3 state, torus reset)
