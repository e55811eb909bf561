"""``TorusAllreduce``: the torus collective of this process, made once by ``init`` and called per step.

It holds everything a call needs (the grid, this rank, the Horovod row/column process sets, the mpi4py
:class:`horovod_torus.mpi.TorusComm` when Horovod runs its MPI controller, the chosen transport, the
size below which one flat all-reduce replaces the three phases) and does, per call:

1. validate (op Average/Sum, dense tensors, supported dtypes: errors raised before any collective);
2. compress (``Compression.fp16``), widen bfloat16 to float32 (Horovod 0.28.1 has no bfloat16 kernels);
3. fuse the tensors into one flat buffer per dtype (:func:`horovod_torus.fusion.plan_fusion`);
4. per buffer, run the shipped algorithm :func:`horovod_torus.phases.allreduce_buffer` on the transport:
   the cross-rank signature check, pre-scale, the three phases, post-scale with 1/N for Average
   (:mod:`horovod_torus.scaling`); below ``min_torus_bytes`` the same function's flat branch instead (one
   all-reduce of the whole buffer on the same transport: ``hvd.allreduce`` on the Horovod transport,
   ``MPI_Allreduce`` on the MPI one), so small buffers never pay for three collectives;
5. split, restore shapes and dtypes, decompress.

The gradient of the call is the same call on the upstream gradients (as Horovod's allreduce gradient),
so ``tape.gradient`` works through it on every transport.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus.fusion import plan_fusion
from horovod_torus.phases import allreduce_buffer
from horovod_torus.scaling import postscale as _postscale
from horovod_torus.scaling import prescale as _prescale
from horovod_torus.scaling import scale
from horovod_torus.settings import TRANSPORTS
from horovod_torus.signature import CallSignature
from horovod_torus.tensorflow.ops import HOROVOD_OPS, check_op, horovod_allreduce, op_label
from horovod_torus.tensorflow.transports import HorovodTransport, _in_tf1_graph, mpi_allreduce_op

__all__ = ["TorusAllreduce", "SUPPORTED_DTYPES", "TRANSPORTS", "HOROVOD_OPS"]

Average, Sum, Compression = _hvd.Average, _hvd.Sum, _hvd.Compression

SUPPORTED_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int16, tf.uint16,
                    tf.int32, tf.int64)

#: Integer dtypes without Horovod reduce-scatter kernels: they travel (and are summed) as int32, wrap back
#: to their own width like a sum in that width, then Average/postscale applies in their dtype.
NARROW_INTEGERS = (tf.int8, tf.uint8, tf.int16, tf.uint16)

def check_tensors(tensors) -> list:
    """Dense tensors of supported dtypes, converted; TypeError naming the offending one otherwise."""
    out = []
    for t in tensors:
        if isinstance(t, tf.IndexedSlices):
            raise TypeError("the torus all-reduce takes dense tensors; convert tf.IndexedSlices with "
                            "tf.convert_to_tensor or use sparse_as_dense=True")
        t = tf.convert_to_tensor(t)
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"torus all-reduce does not support dtype {t.dtype.name}: supported are "
                            f"{', '.join(d.name for d in SUPPORTED_DTYPES)}; cast the tensor first")
        out.append(t)
    return out


class TorusAllreduce:
    """The 2D-torus all-reduce of this process (Mikami et al., arXiv 1811.05233, section 3.2).

    Made by :func:`horovod_torus.tensorflow.init`; call it like a strategy::

        torus = hvd.init(grid="2x2")
        summed = torus([tf.ones([3]), tf.ones([2, 2])], op=hvd.Sum)   # list in, list out

    Attributes:
        grid: the TorusTopology. ``rank``: this rank. ``process_sets``: the TorusProcessSets.
        transport: ``"horovod"`` or ``"mpi"``: the default data path chosen at init.
        min_torus_bytes: fused buffers smaller than this (bytes) take one flat all-reduce on the same
            transport instead of the three phases (0: always the torus).
        torus_comm: the :class:`horovod_torus.mpi.TorusComm` (None when Horovod has no MPI controller).

    ``guard`` (an argument only): the Horovod transport's deadline,
    :class:`horovod_torus.tensorflow.guard.ExchangeGuard` (None: none).
    ``horovod_transport``: the object behind ``transport="horovod"`` (None: a
    :class:`horovod_torus.tensorflow.transports.HorovodTransport` on the row and column process sets with
    ``guard``; an elastic job passes a
    :class:`horovod_torus.tensorflow.elastic_transport.GlobalSetTransport`).
    """

    def __init__(self, process_sets, transport: str, torus_comm=None, min_torus_bytes: int = 0, guard=None,
                 horovod_transport=None):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}: choose one of {', '.join(TRANSPORTS)}")
        if transport == "mpi" and torus_comm is None:
            raise ValueError("transport='mpi' needs Horovod's MPI controller (launch with mpirun or "
                             "horovodrun --mpi); use 'horovod' under horovodrun --gloo")
        self.process_sets = process_sets
        self.grid, self.rank = process_sets.grid, process_sets.rank
        self.transport = transport
        self.torus_comm = torus_comm
        self.min_torus_bytes = int(min_torus_bytes)
        # init must not start TensorFlow's runtime (users pin GPUs after hvd.init, as with Horovod): the
        # Horovod transport creates its call counter variable at its first call.
        self._horovod = horovod_transport or HorovodTransport(process_sets, guard=guard)

    def __repr__(self) -> str:
        return (f"TorusAllreduce(grid={self.grid}, rank={self.rank}, transport={self.transport!r}, "
                f"min_torus_bytes={self.min_torus_bytes})")

    def algorithm(self, nbytes: int) -> str:
        """``"flat"`` for a fused buffer of ``nbytes`` bytes below :attr:`min_torus_bytes`, else ``"torus"``."""
        return "flat" if nbytes < self.min_torus_bytes else "torus"

    def calibrate(self, sizes=tuple(4096 * 4 ** k for k in range(7)), iters: int = 3) -> int:
        """Measure the three phases against the flat all-reduce of the same transport and set
        :attr:`min_torus_bytes` to the smallest measured size from which the torus is never slower
        (``2**62``, i.e. always flat, when it loses at the largest size). Collective: every rank calls it;
        the medians summed over the ranks decide, so every rank sets the same value.

        Args:
            sizes: buffer sizes in bytes (float32), ascending (default 4 KiB .. 16 MiB, x4).
            iters: timed calls per size and algorithm (median taken), after one warm-up call each.

        Returns:
            The new ``min_torus_bytes``.
        """
        import numpy as np

        from horovod_torus.timing import time_calls

        medians = []
        for nbytes in sizes:
            buf = tf.ones([max(1, nbytes // 4)], tf.float32)
            pair = []
            for algorithm in ("flat", "torus"):
                saved = self.min_torus_bytes
                self.min_torus_bytes = 2 ** 62 if algorithm == "flat" else 0
                try:
                    times = time_calls(lambda: self([buf], Sum)[0], iters, warmup=1, wait=lambda t: t.numpy())
                finally:
                    self.min_torus_bytes = saved
                pair.append(float(np.median(times)))
            medians.append(pair)
        self.min_torus_bytes = 0
        # every rank decides on the sum over ranks of the medians: the same numbers, so the same choice
        summed = self([tf.constant(medians, tf.float64)], Sum)[0]
        wins = [t <= f for f, t in summed.numpy().tolist()]
        crossover = 2 ** 62
        for nbytes, win in zip(reversed(sizes), reversed(wins)):
            if not win:
                break
            crossover = nbytes
        self.min_torus_bytes = int(crossover)
        return self.min_torus_bytes

    def strategy(self, transport: str | None = None):
        """A strategy callable (the registry's contract) bound to ``transport`` (None: the default).

        Average and Sum go through the torus; Min, Max and Product (:data:`HOROVOD_OPS`) go through
        Horovod's own all-reduce (:func:`horovod_torus.tensorflow.ops.horovod_allreduce`, the ``horovod``
        strategy), so ``hvd.allreduce(x, op=hvd.Max)`` works as with Horovod. Calling the object itself
        (``hvd.torus_allreduce``) takes Average/Sum only."""
        if transport is not None and transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}: choose one of {', '.join(TRANSPORTS)}")
        if transport == "mpi" and self.torus_comm is None:
            raise ValueError("strategy 'torus:mpi' needs Horovod's MPI controller (launch with mpirun); "
                             "use 'torus:horovod' under horovodrun --gloo")

        def torus(tensors, op=Average, name=None, compression=Compression.none, prescale_factor=1.0,
                  postscale_factor=1.0):
            if op in HOROVOD_OPS:  # the torus sums: other element-wise ops take Horovod's own call
                return horovod_allreduce(tensors, op, name, compression, prescale_factor, postscale_factor)
            return self(tensors, op, name, compression, prescale_factor, postscale_factor, transport=transport)
        torus.__name__ = f"torus:{transport or self.transport}"
        return torus

    def __call__(self, tensors, op=Average, name=None, compression=Compression.none, prescale_factor=1.0,
                 postscale_factor=1.0, *, transport: str | None = None) -> list:
        """All-reduce ``tensors`` over all ranks, fused into one buffer per dtype.

        Args:
            tensors: list of dense tensors / variables with fully defined shapes (0-d and empty
                included), dtypes in :data:`SUPPORTED_DTYPES`; the same shapes and dtypes, in the same
                order, on every rank.
            op: ``Average`` (default) or ``Sum``; integer Average truncates toward zero like Horovod.
            name: optional name (part of the cross-rank signature; prefix of Horovod op names).
            compression: ``Compression.none`` or ``Compression.fp16``.
            prescale_factor, postscale_factor: multiplied in once each, before and after the sum (as
                float32, like Horovod's attributes; float16 scaled in float32).
            transport: ``"horovod"``, ``"mpi"`` or None (the one chosen at init).

        Returns:
            A list of tensors of the inputs' shapes and dtypes:
            ``postscale * op_k(prescale * tensors_k)`` over the N ranks k.

        Raises:
            ValueError: an op other than Average/Sum, an unknown transport, a shape with an unknown
                dimension.
            TypeError: an unsupported dtype (named) or a tf.IndexedSlices.
            tf.errors.FailedPreconditionError: on every rank, when the ranks pass different shapes, dtypes
                (or their order), op, scale factors, compression or name (the message names each rank's
                value).
        """
        op = check_op(op)
        tensors = check_tensors(list(tensors))
        if not tensors:
            return []
        transport = transport or self.transport
        if transport not in TRANSPORTS:
            raise ValueError(f"transport={transport!r}: choose one of {', '.join(TRANSPORTS)}")
        if transport == "mpi" and _in_tf1_graph():
            # A TF1 graph run by a Session orders nothing: its MPI calls could pair differently on each
            # rank. Horovod's ops match by name, so such graphs use the Horovod transport.
            transport = "horovod"
        args = (op, name, compression, float(prescale_factor), float(postscale_factor), transport)
        if all(t.dtype.is_floating for t in tensors):
            return self._differentiable(tensors, args)
        return self._reduce(tensors, *args)

    def _differentiable(self, tensors, args):
        @tf.custom_gradient
        def reduce(*xs):
            ys = self._reduce(list(xs), *args)

            def grad(*dys):
                return self._reduce([tf.convert_to_tensor(d) for d in dys], *args)
            return ys, grad
        return list(reduce(*tensors))

    def _reduce(self, tensors, op, name, compression, prescale, postscale, transport):
        layout = tuple((t.dtype.name, tuple(t.shape.as_list())) for t in tensors)
        compressed, ctxs = zip(*(compression.compress(t) for t in tensors))
        wire = [tf.float32 if t.dtype == tf.bfloat16 else tf.int32 if t.dtype in NARROW_INTEGERS else None
                for t in compressed]
        own = [t.dtype for t in compressed]
        compressed = [t if w is None else tf.cast(t, w) for t, w in zip(compressed, wire)]
        groups = plan_fusion([t.shape.as_list() for t in compressed], [t.dtype.name for t in compressed])
        pre = _prescale(prescale)
        post = _postscale(postscale, self.grid.size if op == Average else 1)
        results = [None] * len(tensors)
        for g in groups:
            narrow = [i for i in g.indices if own[i] in NARROW_INTEGERS]
            members = [compressed[i] for i in g.indices]
            algorithm = self.algorithm(g.total * members[0].dtype.size)
            signature = CallSignature(elements=g.total, dtype=g.dtype, layout=layout, op=op_label(op),
                                      prescale=prescale, postscale=postscale,
                                      compression=getattr(compression, "__name__", type(compression).__name__),
                                      algorithm=algorithm, name=name or "")
            buf = _pack(members)
            inner_post = 1.0 if narrow else post  # narrow integers: wrap to their width first, then scale
            if transport == "mpi":
                out = mpi_allreduce_op(self.torus_comm, buf, signature, pre, inner_post)
            else:
                out = allreduce_buffer(self._horovod, buf, signature, pre, inner_post)
            for i, r in zip(g.indices, _unpack(out, g)):
                if wire[i] is not None:
                    r = tf.cast(r, own[i])
                if i in narrow:
                    r = scale(r, post)
                results[i] = compression.decompress(r, ctxs[i])
        return results

    def free(self) -> None:
        """Free the MPI communicators (called by ``shutdown``)."""
        if self.torus_comm is not None:
            self.torus_comm.free()
            self.torus_comm = None


def _pack(members):
    """Flatten and concatenate one FusionGroup's members (a reshape only, for one member)."""
    flat = [tf.reshape(t, [-1]) for t in members]
    return flat[0] if len(flat) == 1 else tf.concat(flat, axis=0)


def _unpack(buf, g):
    """Inverse of _pack: split the buffer and restore each member's shape."""
    parts = [buf] if len(g.counts) == 1 else tf.split(buf, list(g.counts), axis=0)
    return [tf.reshape(p, s) for p, s in zip(parts, g.shapes)]
