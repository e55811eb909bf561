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

from horovod_torus.tensorflow.collectives import (  # noqa: F401
    SUPPORTED_DTYPES, grouped_torus_allreduce, torus_allreduce,
)
from horovod_torus.tensorflow.runtime import backend, grid, init, shutdown, torus_process_sets  # noqa: F401
from horovod_torus.topology import TorusTopology  # noqa: F401
from horovod_torus.tensorflow.reductions import allreduce, grouped_allreduce  # noqa: F401
from horovod_torus.tensorflow.variables import broadcast_variables  # noqa: F401
from horovod_torus.tensorflow.gradient_tape import DistributedGradientTape  # noqa: F401
import horovod_torus.strategies  # noqa: E402,F401  (registers the built-in strategies "ring" and "torus")
from horovod_torus.strategies.registry import (  # noqa: E402,F401
    available_strategies, get_strategy, register_strategy,
)
