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
   all-reduce of the whole buffer: Horovod's own call), so small buffers never pay for three collectives.
   Under Horovod's MPI controller every call whose data moves with Horovod ops (the Horovod transport's,
   the MPI transport's flat ones) is checked on the mpi4py communicator
   (:class:`horovod_torus.tensorflow.transports.MPIChecked`), not with one more Horovod negotiation;
5. split, restore shapes and dtypes, decompress.

The gradient of the call is the same call on the upstream gradients (as Horovod's allreduce gradient),
so ``tape.gradient`` works through it on every transport.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import tensorflow as tf

from horovod_torus import crossover, ompi_rules
from horovod_torus.fusion import plan_fusion
from horovod_torus.phases import allreduce_buffer
from horovod_torus.scaling import postscale as _postscale
from horovod_torus.scaling import prescale as _prescale
from horovod_torus.scaling import scale
from horovod_torus.settings import TRANSPORTS
from horovod_torus.signature import CallSignature
from horovod_torus.tensorflow.ops import HOROVOD_OPS, check_op, horovod_allreduce, op_label
from horovod_torus.tensorflow.transports import HorovodTransport, MPIChecked, _in_tf1_graph, mpi_allreduce_op

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
            transport instead of the three phases (0: always the torus); per transport in
            :attr:`crossover` (``init`` resolves ``"auto"`` with :meth:`resolve_crossover`).
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
        #: transport -> its crossover (bytes); :attr:`min_torus_bytes` sets every one.
        self.crossover = {}
        #: transport -> where its crossover came from: "setting", "cache", "measured".
        self.crossover_source = {}
        self.min_torus_bytes = int(min_torus_bytes)
        self._pending_crossover = None  # (cache_dir, launcher): "auto" still to resolve at the first call
        # init must not start TensorFlow's runtime (users pin GPUs after hvd.init, as with Horovod): the
        # Horovod transport creates its call counter variable at its first call.
        self._horovod = horovod_transport or HorovodTransport(process_sets, guard=guard)
        #: The transport object of the calls checked on ``torus_comm`` whose data moves with Horovod ops (the
        #: MPI transport's flat calls; the Horovod transport's calls unless an elastic job passed its own).
        self._mpi_checked = MPIChecked(torus_comm, self._horovod) if torus_comm is not None else None
        self._horovod_checked_on_mpi = self._mpi_checked is not None and horovod_transport is None

    def __repr__(self) -> str:
        return (f"TorusAllreduce(grid={self.grid}, rank={self.rank}, transport={self.transport!r}, "
                f"min_torus_bytes={self.crossover})")

    @property
    def min_torus_bytes(self) -> int:
        """The default transport's crossover (bytes): fused buffers below it take one flat all-reduce on
        the same transport (0: always the torus; :data:`horovod_torus.crossover.NEVER`: always flat).
        Assigning it sets the crossover of every transport."""
        return self.crossover.get(self.transport, 0)

    @min_torus_bytes.setter
    def min_torus_bytes(self, value: int) -> None:
        self.crossover = {t: int(value) for t in self.transports()}
        self.crossover_source = {t: "setting" for t in self.transports()}

    def transports(self) -> tuple:
        """The transports this torus can run: ``("horovod", "mpi")`` with an MPI TorusComm, else
        ``("horovod",)``."""
        return TRANSPORTS if self.torus_comm is not None else ("horovod",)

    def algorithm(self, nbytes: int, transport: str | None = None) -> str:
        """``"flat"`` for a fused buffer of ``nbytes`` bytes below the crossover of ``transport`` (None:
        the default one), else ``"torus"``."""
        return "flat" if nbytes < self.crossover.get(transport or self.transport, 0) else "torus"

    def column_algorithm(self, nbytes: int, transport: str | None = None) -> str:
        """Phase 2's algorithm for a fused buffer of ``nbytes`` bytes: on the MPI transport
        :meth:`horovod_torus.mpi.TorusComm.algorithm_for`; on the Horovod transport ``"hvd.allreduce"``
        (Horovod's all-reduce on the column's process set: its controller picks the algorithm);
        ``"none"`` for a grid of one row."""
        if (transport or self.transport) == "mpi":
            return self.torus_comm.algorithm_for(nbytes) or "none"
        return "none" if self.grid.y == 1 else "hvd.allreduce"

    def calibrate(self, sizes=crossover.DEFAULT_SIZES, rounds: int = crossover.ROUNDS,
                  calls: int = crossover.CALLS, transport: str | None = None) -> int:
        """Measure the three phases against the flat all-reduce of ``transport`` (None: the default one)
        with :func:`horovod_torus.crossover.calibrate` (rounds in alternating order, medians, the maximum
        over the ranks, the flat call unless the torus is at least 5 % faster) and set that transport's
        crossover. Collective: every rank calls it with the same arguments; every rank sets the same
        value. No cache is read or written (:meth:`resolve_crossover` does).

        Args:
            sizes: buffer sizes in bytes (float32), measured from the largest down (default 4 KiB ..
                16 MiB, x4). ``rounds``, ``calls``: per size; timed calls per algorithm and round.

        Returns:
            The new crossover in bytes (:data:`horovod_torus.crossover.NEVER`: always flat).
        """
        transport = transport or self.transport
        result = crossover.calibrate(lambda *a: self._measure(transport, *a), self._agree_max, sizes, rounds,
                                     calls)
        self.crossover[transport] = result.min_torus_bytes
        self.crossover_source[transport] = "measured"
        return result.min_torus_bytes

    def resolve_crossover(self, cache_dir: str | None, launcher: str) -> dict:
        """The ``"auto"`` crossover of every transport: the cached value of its
        :class:`horovod_torus.crossover.CrossoverKey` (rank 0's file in ``cache_dir``, broadcast), else
        :meth:`calibrate` (rank 0 then writes the file). Collective; runs TensorFlow ops eagerly, so
        ``init`` calls it at once only when no GPU is visible (else at the first torus call, after the
        user pinned a GPU). One rank: 0. Returns :attr:`crossover`."""
        import socket

        from horovod_torus import __version__

        if self.grid.size == 1:
            self.min_torus_bytes = 0
            return self.crossover
        hosts = crossover.host_runs(_hvd.allgather_object(socket.gethostname(), name="horovod_torus_hosts"))
        for t in self.transports():
            tc = self.torus_comm
            if t == "mpi":
                variant = f"column={tc.column_algorithm};model={tc.column_model.source}"
            else:  # where the Horovod transport's calls are checked changes what they cost
                variant = "check=mpi" if self._horovod_checked_on_mpi else ""
            if t == "horovod" and tc is not None:  # Open MPI's all-reduce rules change what its column runs
                variant += f";coll_tuned={ompi_rules.describe()}"  # (ompi_rules; the mpi one's is libnbc's)
            key = crossover.CrossoverKey(world_size=self.grid.size, grid=str(self.grid), launcher=launcher,
                                         hosts=hosts, transport=t, variant=variant, version=__version__)
            value, source = crossover.resolve(
                key, rank=self.rank, cache_dir=cache_dir,
                broadcast=lambda obj: _hvd.broadcast_object(obj, root_rank=0, name=f"horovod_torus_cache_{t}"),
                run_calibration=lambda: crossover.calibrate(lambda *a: self._measure(t, *a), self._agree_max))
            self.crossover[t], self.crossover_source[t] = value, source
        return self.crossover

    def defer_crossover(self, cache_dir: str | None, launcher: str) -> None:
        """Resolve the ``"auto"`` crossover at the first torus call instead of now (:meth:`resolve_crossover`
        then runs eagerly, under ``tf.init_scope`` when the call is being traced); until then the flat
        call is assumed nowhere."""
        self._pending_crossover = (cache_dir, launcher)

    def _resolve_pending(self) -> None:
        cache_dir, launcher = self._pending_crossover
        self._pending_crossover = None
        with tf.init_scope():
            if not tf.executing_eagerly():  # a TF1 graph: nothing can be measured; the flat call
                import warnings

                warnings.warn("horovod_torus: min_torus_bytes='auto' cannot be calibrated inside a TF1 graph: "
                              "the flat all-reduce is used at every size (set min_torus_bytes to a number)")
                self.min_torus_bytes = crossover.NEVER
                return
            self.resolve_crossover(cache_dir, launcher)

    def _measure(self, transport, nbytes, algorithm, calls, warmup):
        """Seconds of ``calls`` eager all-reduces of ``nbytes`` (float32) with the algorithm forced."""
        from horovod_torus.timing import time_calls

        buf = tf.ones([max(1, nbytes // 4)], tf.float32)
        saved = self.crossover.get(transport, 0)
        self.crossover[transport] = crossover.NEVER if algorithm == "flat" else 0
        try:
            return time_calls(lambda: self([buf], Sum, transport=transport)[0], calls, warmup=warmup,
                              wait=lambda t: t.numpy(), barrier=_barrier)
        finally:
            self.crossover[transport] = saved

    @staticmethod
    def _agree_max(values):
        return _hvd.allreduce(tf.constant(values, tf.float64), op=_hvd.Max, name="horovod_torus_calibrate").numpy()

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
        if self._pending_crossover is not None:
            self._resolve_pending()
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
            algorithm = self.algorithm(g.total * members[0].dtype.size, transport)
            signature = CallSignature(elements=g.total, dtype=g.dtype, layout=layout, op=op_label(op),
                                      prescale=prescale, postscale=postscale,
                                      compression=getattr(compression, "__name__", type(compression).__name__),
                                      algorithm=algorithm, name=name or "")
            buf = _pack(members)
            inner_post = 1.0 if narrow else post  # narrow integers: wrap to their width first, then scale
            if transport == "mpi" and algorithm == "torus":
                out = mpi_allreduce_op(self.torus_comm, buf, signature, pre, inner_post)
            else:
                out = allreduce_buffer(self._data_transport(transport), buf, signature, pre, inner_post)
            for i, r in zip(g.indices, _unpack(out, g)):
                if wire[i] is not None:
                    r = tf.cast(r, own[i])
                if i in narrow:
                    r = scale(r, post)
                results[i] = compression.decompress(r, ctxs[i])
        return results

    def _data_transport(self, transport: str):
        """The :class:`horovod_torus.phases.Transport` of a call whose data moves with Horovod ops: checked
        on the MPI communicator (:class:`MPIChecked`) for the MPI transport's flat calls and, under Horovod's
        MPI controller, for the Horovod transport's calls; checked through Horovod (the
        :class:`HorovodTransport` itself) under Gloo, in an elastic job and in a TF1 Session graph (which
        orders no stateful op: its checks pair by Horovod op name)."""
        if transport == "mpi" or (self._horovod_checked_on_mpi and not _in_tf1_graph()):
            return self._mpi_checked
        return self._horovod

    def free(self) -> None:
        """Free the MPI communicators (called by ``shutdown``)."""
        if self.torus_comm is not None:
            self.torus_comm.free()
            self.torus_comm = self._mpi_checked = None
            self._horovod_checked_on_mpi = False


def _barrier() -> None:
    """Every rank has arrived (a one-element Horovod all-reduce, waited for)."""
    _hvd.allreduce(tf.zeros([1]), op=Sum, name="horovod_torus_calibrate_barrier").numpy()


def _pack(members):
    """Flatten and concatenate one FusionGroup's members (a reshape only, for one member)."""
    flat = [tf.reshape(t, [-1]) for t in members]
    return flat[0] if len(flat) == 1 else tf.concat(flat, axis=0)


def _unpack(buf, g):
    """Inverse of _pack: split the buffer and restore each member's shape."""
    parts = [buf] if len(g.counts) == 1 else tf.split(buf, list(g.counts), axis=0)
    return [tf.reshape(p, s) for p, s in zip(parts, g.shapes)]
