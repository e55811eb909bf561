"""The reductions the benchmarks compare, behind one name each.

TensorFlow strategies (tensors in, tensors out, timed inside ``tf.function`` as training does):

* ``torus``: :func:`horovod_torus.tensorflow.grouped_torus_allreduce` (row reduce-scatter, column
  all-reduce, row all-gather; one fused buffer per dtype);
* ``ring``: Horovod's flat all-reduce (``horovod.tensorflow.grouped_allreduce``, the reference).

Both come from the strategy registry (:func:`horovod_torus.strategies.get_strategy`), so the benchmark
measures exactly what ``DistributedOptimizer(strategy=...)`` runs.

MPI strategies (numpy buffers, mpi4py on ``MPI.COMM_WORLD``):

* ``mpi-torus``: :func:`horovod_torus.mpi.torus_allreduce`;
* ``mpi``: ``MPI_Allreduce`` on the world communicator.
"""
from __future__ import annotations

__all__ = ["TF_STRATEGIES", "MPI_STRATEGIES", "STRATEGIES", "tf_reduce_fn", "mpi_reduce_fn"]

TF_STRATEGIES = ("torus", "ring")
MPI_STRATEGIES = ("mpi-torus", "mpi")
STRATEGIES = TF_STRATEGIES + MPI_STRATEGIES


def tf_reduce_fn(name: str):
    """fn(tensors, op, name=None, compression, prescale_factor, postscale_factor) -> list of tensors.

    The signature of the strategy registry (``horovod_torus.strategies.get_strategy``).

    Raises:
        ValueError: a name outside TF_STRATEGIES.
    """
    if name not in TF_STRATEGIES:
        raise ValueError(f"TensorFlow strategy {name!r} is unknown: choose one of {', '.join(TF_STRATEGIES)}")
    from horovod_torus.strategies import get_strategy

    return get_strategy(name)


def mpi_reduce_fn(name: str, comm, grid=None):
    """fn(sendbuf, recvbuf) -> None: the sum over ``comm`` of numpy ``sendbuf`` written into ``recvbuf``.

    ``mpi-torus`` splits ``comm`` into row and column communicators now (collective over ``comm``).

    Raises:
        ValueError: a name outside MPI_STRATEGIES, or a grid that does not fit ``comm`` (every rank).
    """
    from mpi4py import MPI

    if name == "mpi":
        def flat(send, recv):
            comm.Allreduce(send, recv, op=MPI.SUM)
        return flat
    if name == "mpi-torus":
        from horovod_torus.mpi import TorusComm, torus_allreduce

        tc = TorusComm.create(comm, grid)

        def torus(send, recv):
            torus_allreduce(tc, send, recv, op=MPI.SUM)
        torus.grid = tc.grid
        return torus
    raise ValueError(f"MPI strategy {name!r} is unknown: choose one of {', '.join(MPI_STRATEGIES)}")
