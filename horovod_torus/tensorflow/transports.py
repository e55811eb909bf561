"""The two TensorFlow transports of the torus: Horovod ops on process sets, and MPI behind one op.

* :class:`HorovodTransport` implements :class:`horovod_torus.phases.Transport` with Horovod ops on the
  row and column process sets registered at init (``hvd.reducescatter``, or under Horovod's Gloo
  controller ``hvd.alltoall`` + a local sum; ``hvd.allreduce``; ``hvd.allgather``): every Horovod backend
  (MPI and Gloo on CPU, NCCL on GPU), eager and in ``tf.function``. The signature is checked on the global
  set first (:meth:`HorovodTransport.exchange`: one ``hvd.allreduce`` with Max of the words and their
  negations; an ``hvd.allgather`` of the words only when they differ), eagerly, under the stall deadline
  of :class:`horovod_torus.tensorflow.guard.ExchangeGuard` (inside ``tf.function`` through one stateful
  ``tf.py_function``, in program order); phase 1 (or the flat all-reduce, Horovod's own call on the
  global set) waits for that check, so no data moves before the ranks agree, and no two process sets of
  one call ever have operations in flight at once.
* :class:`MPIChecked` is how every call that moves its data with Horovod ops is checked when Horovod runs on
  its MPI controller (mpirun): the MPI transport's flat calls (below the crossover) and every call of the
  Horovod transport (flat, or the three phases on the process sets). The signature check runs on the mpi4py
  communicator (:meth:`horovod_torus.mpi.TorusComm.verify`, under its deadline, in one small stateful
  ``tf.numpy_function`` inside ``tf.function``, directly when eager), then the Horovod ops, gated on it.
  One MPI_Allreduce of 20 int64 words instead of one more Horovod negotiation per call; and every call of
  both transports is numbered and checked on one communicator, so ranks that disagree on the transport or
  on the crossover meet in the same check and raise a mismatch, never wait in two libraries.
* :func:`mpi_allreduce_op` runs :func:`horovod_torus.phases.allreduce_buffer` on a
  :class:`horovod_torus.mpi.TorusComm` inside ONE stateful ``tf.numpy_function`` (CPU tensors under
  Horovod's MPI controller): no Horovod negotiation on the data path. Being stateful, the calls run in
  program order inside ``tf.function`` (TensorFlow's automatic control dependencies), as MPI needs.

When the ranks disagree both raise :class:`TorusMismatchTFError` eagerly: a
``tf.errors.FailedPreconditionError`` (Horovod's type for mismatched collectives) that is also a
:class:`horovod_torus.signature.TorusMismatchError` (a ValueError). Inside ``tf.function`` TensorFlow's
py-function boundary keeps only the ValueError's code: there it surfaces as
``tf.errors.InvalidArgumentError`` with the same message. A stall (or a rank that left) raises
:class:`TorusStallTFError` eagerly, :class:`TorusStallGraphError` inside ``tf.function`` (seen there as
``tf.errors.InvalidArgumentError``).
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import numpy as np
import tensorflow as tf

from horovod_torus.fusion import shard_counts
from horovod_torus.phases import allreduce_buffer
from horovod_torus.signature import (FIELDS, CallSignature, TorusMismatchError, compare, disagreeing, extremes,
                                     leaving)
from horovod_torus.stall import TorusStallError, last_stop, left_error
from horovod_torus.tensorflow.ops import horovod_allreduce

__all__ = ["HorovodTransport", "MPIChecked", "mpi_allreduce_op", "as_tf_error", "TorusMismatchTFError",
           "TorusStallTFError", "TorusStallGraphError"]


class TorusMismatchTFError(tf.errors.FailedPreconditionError, TorusMismatchError):
    """A cross-rank mismatch, as TensorFlow code sees it: Horovod's FailedPreconditionError, and a
    TorusMismatchError (ValueError) with its ``fields``."""

    def __init__(self, message: str, fields=()):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)
        self.fields = tuple(fields)


class TorusStallTFError(tf.errors.DeadlineExceededError, TorusStallError):
    """A stalled torus call, as TensorFlow code sees it: a ``tf.errors.DeadlineExceededError`` that is also
    a :class:`horovod_torus.stall.TorusStallError` with its ``call``, ``name``, ``missing`` ranks and ``by``."""

    def __init__(self, exc: TorusStallError):
        tf.errors.DeadlineExceededError.__init__(self, None, None, str(exc))
        self.call, self.name, self.missing, self.deadline = exc.call, exc.name, exc.missing, exc.deadline
        self.by = getattr(exc, "by", None)


class TorusStallGraphError(TorusStallTFError, ValueError):
    """A stalled torus call raised inside a py-function of a ``tf.function`` graph: being a ValueError,
    TensorFlow's py-function boundary turns it into ``tf.errors.InvalidArgumentError`` with its message
    (an UnknownError otherwise, which ``horovod.tensorflow.elastic.run`` swallows unless it names a Horovod
    op, then takes for a lost rank: a stall must end the run instead)."""


def as_tf_error(exc: TorusMismatchError) -> TorusMismatchTFError:
    """The TensorFlow form of a mismatch."""
    return TorusMismatchTFError(str(exc), exc.fields)


class HorovodTransport:
    """:class:`horovod_torus.phases.Transport` over Horovod's row and column process sets.

    Args:
        sets: the :class:`horovod_torus.process_sets.TorusProcessSets` registered at init.
        name: prefix of the Horovod op names (None: Horovod's automatic names).
        guard: the :class:`horovod_torus.tensorflow.guard.ExchangeGuard` (the deadline) or None.

    The phases' ``out`` arguments are ignored: tensors are immutable, every phase returns a new one.
    """

    def __init__(self, sets, name: str | None = None, guard=None):
        self.sets, self.grid, self.rank = sets, sets.grid, sets.rank
        self.guard = guard
        self._counter_var = None
        self._static_calls = 0
        self._name = name
        # Phase 1 under Horovod's Gloo controller: alltoall + local sum (see _reduce_scatter_alltoall)
        self.reduce_scatter_via = "alltoall" if _hvd.gloo_enabled() else "reducescatter"

    @property
    def _counter(self) -> tf.Variable:
        """The call counter (int64, CPU), created at the first call, outside any tf.function."""
        if self._counter_var is None:
            with tf.init_scope(), tf.device("/cpu:0"):
                self._counter_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="torus_calls")
        return self._counter_var

    def _op_name(self, suffix):
        return self._name and f"{self._name}_{suffix}"

    def verify(self, signature: CallSignature):
        if self.grid.size == 1:
            return None
        with tf.device("/cpu:0"):
            if _in_tf1_graph():  # a Session graph: no eager variable here; number the calls as built
                self._static_calls += 1
                call = tf.constant(self._static_calls, tf.int64)
            else:
                call = self._counter.assign_add(1)
            static = tf.constant(signature.words(0)[1:], tf.int64)
            words = tf.concat([tf.reshape(call, [1]), static], axis=0)
            if _in_tf1_graph():
                return self._verify_in_session_graph(words, signature)
            if tf.executing_eagerly():
                self.exchange(words.numpy(), signature)
                return None

            def run(w):
                try:
                    self.exchange(w.numpy(), signature)
                except TorusStallTFError as exc:
                    raise TorusStallGraphError(exc) from None
                return tf.constant(0, tf.int64)

            # Stateful: in program order inside tf.function, so every rank exchanges its calls in order.
            return tf.py_function(run, [words], tf.int64, name="TorusSignatureCheck")

    def _verify_in_session_graph(self, words, signature):
        """The same check as graph ops, for TF1 Session graphs: there stateful ops are not ordered (no
        automatic control dependencies), so eager exchanges (which Horovod names alike) could overlap;
        named graph ops pair by name instead. No deadline here (Horovod's own stall handling)."""
        k = len(FIELDS)
        reduced = _hvd.allreduce(tf.concat([words, -words], axis=0), op=_hvd.Max, name=self._op_name("sig"))
        agreed = tf.reduce_all(tf.equal(reduced[:k], -reduced[k:]))
        gathered = tf.cond(agreed, lambda: tf.zeros([0, k], tf.int64),
                           lambda: _hvd.allgather(tf.reshape(words, [1, k]), name=self._op_name("sig_all")))

        def check(rows):
            if rows.shape[0]:  # the words differ: name each rank's value
                try:
                    compare(rows, signature)
                except TorusMismatchError as exc:
                    raise as_tf_error(exc) from None
            return np.int64(0)

        return tf.numpy_function(check, [gathered], tf.int64, stateful=True, name="TorusSignatureCheck")

    def calls(self) -> int:
        """The torus calls this transport has numbered so far."""
        return self._static_calls if self._counter_var is None else int(self._counter_var.numpy())

    def exchange(self, words: np.ndarray, signature: CallSignature) -> None:
        """The signature check of one call, eagerly, under the deadline: ONE ``hvd.allreduce`` (Max) of the
        words and their negations on the global set, and only when they differ an ``hvd.allgather`` of the
        words, compared by :func:`horovod_torus.signature.compare` (each rank's value named).

        Raises (in their TensorFlow forms): :class:`TorusStallTFError` past the deadline or when another
        rank left the torus (:data:`horovod_torus.signature.EXIT_SIGNATURE`); :class:`TorusMismatchTFError`
        when the words differ."""
        words = np.asarray(words, np.int64)

        def collect():
            with tf.device("/cpu:0"):
                reduced = _hvd.allreduce(tf.constant(extremes(words)), op=_hvd.Max).numpy()
                if not disagreeing(reduced):
                    return None
                return _hvd.allgather(tf.constant(words.reshape(1, -1))).numpy()

        try:
            rows = collect() if self.guard is None else self.guard.run(int(words[0]), signature.name, collect)
            if rows is None:
                return
            left = leaving(rows)
            if left and len(left) < len(rows):
                raise self._left_error(rows, left)
            compare(rows, signature)
        except TorusStallError as exc:
            if self.guard is not None:
                self.guard.stall = exc
            raise TorusStallTFError(exc) from None
        except TorusMismatchError as exc:
            raise as_tf_error(exc) from None

    def _left_error(self, rows, left) -> TorusStallError:
        """Some ranks exchanged the exit signature while the others made a torus call: the leaving rank
        tells the others why it left (the channel's note), the others wait briefly for that note."""
        staying = [r for r in range(len(rows)) if r not in left]
        if self.rank in left:
            if self.guard is not None and last_stop():
                self.guard.publish_note(f"it stopped training: {last_stop()}", staying)
            return left_error(rows, left, self.rank, self.grid)
        why = self.guard.notes(left) if self.guard is not None else ""
        return left_error(rows, left, self.rank, self.grid, why)

    def reduce_scatter(self, buf, op, out=None):
        _sum_only(op)
        if self.reduce_scatter_via == "alltoall":
            shard = self._reduce_scatter_alltoall(buf)
        else:
            shard = _hvd.reducescatter(buf, op=_hvd.Sum, process_set=self.sets.row, name=self._op_name("rs"))
        if buf.shape[0] is not None:  # Horovod's split (shard_counts), known when the length is
            shard.set_shape([shard_counts(buf.shape[0], self.grid.x)[self.grid.coords(self.rank)[1]]])
        return shard

    def _reduce_scatter_alltoall(self, buf):
        """Phase 1 as ``hvd.alltoall`` on the row + a local sum (Horovod's Gloo controller).

        Horovod 0.28.1's Gloo reduce-scatter is ``gloo::ReduceScatterHalvingDoubling``, whose ``run()``
        overwrites the start of its send buffer (the distribution memcpy on every rank but 0) while the
        asynchronous send of that region to rank 0 may still be in flight: rank 0 then sums the peer's
        already reduced values into the tail of its shard (measured on the emulated rails cluster,
        2 MiB, 200 Mbit/s: ~150 wrong elements at the end of the shard in 2 of 3 calls; the same race is
        reported against gloo in jax-ml/jax#40830). Gloo's alltoallv waits for its sends. Same traffic
        as a reduce-scatter ((X-1)/X of the buffer out and in per rank), same split as Horovod's
        (:func:`horovod_torus.fusion.shard_counts`: the first ``n % X`` positions one element more).
        """
        counts = shard_counts(buf.shape[0], self.grid.x)  # fused buffers have a static length
        splits = tf.constant(counts, tf.int32)
        pieces, _ = _hvd.alltoall(buf, splits=splits, process_set=self.sets.row, name=self._op_name("rs"))
        mine = counts[self.grid.coords(self.rank)[1]]  # position in the row = column index
        return tf.reduce_sum(tf.reshape(pieces, [self.grid.x, mine]), axis=0)

    def allreduce(self, shard, op, out=None):
        _sum_only(op)
        return _hvd.allreduce(shard, op=_hvd.Sum, process_set=self.sets.column, name=self._op_name("ar"))

    def allgather(self, shard, out=None):
        return _hvd.allgather(shard, process_set=self.sets.row, name=self._op_name("ag"))

    def allreduce_flat(self, buf, op, out=None):
        _sum_only(op)
        return horovod_allreduce([buf], _hvd.Sum, self._op_name("flat"))[0]

    def gate(self, buf, token):
        if token is None or tf.executing_eagerly():
            return buf  # eagerly the check has already run (and raised)
        with tf.control_dependencies([token]):
            return tf.identity(buf)


def _in_tf1_graph() -> bool:
    """True while building a TF1-style graph (not eager, not inside tf.function)."""
    if tf.executing_eagerly():
        return False
    from tensorflow.python.framework import func_graph

    return not isinstance(tf.compat.v1.get_default_graph(), func_graph.FuncGraph)


def _sum_only(op):
    if op != "sum":
        raise ValueError(f"the Horovod torus transport reduces with op='sum' only, got {op!r}")


def mpi_allreduce_op(tc, buf: tf.Tensor, signature: CallSignature, prescale: float, postscale: float):
    """The torus all-reduce of a 1-D CPU tensor through ``tc`` (a TorusComm), as one TensorFlow op.

    Args:
        tc: :class:`horovod_torus.mpi.TorusComm` made at init.
        buf: 1-D tensor (float16/32/64 or an integer dtype), same length on every rank.
        signature, prescale, postscale: see :func:`horovod_torus.phases.allreduce_buffer`.

    Returns:
        A tensor like ``buf``.
    """
    stall_form = TorusStallTFError if tf.executing_eagerly() else TorusStallGraphError

    def fn(a):
        return _watched(tc, signature, stall_form, lambda: np.asarray(
            allreduce_buffer(tc, a, signature, prescale, postscale), dtype=a.dtype))

    with tf.device("/cpu:0"):
        out = tf.numpy_function(fn, [buf], buf.dtype, stateful=True, name="TorusAllreduceMPI")
    out.set_shape(buf.shape)
    return out


class MPIChecked:
    """:class:`horovod_torus.phases.Transport` of the calls checked on the :class:`horovod_torus.mpi.TorusComm`
    ``tc`` whose data moves through ``horovod`` (a :class:`HorovodTransport`): the MPI transport's ``"flat"``
    calls (Horovod's own ``grouped_allreduce`` on the global set) and, under Horovod's MPI controller, every
    call of the Horovod transport (its flat call, or its three phases on the row and column process sets).

    Why: a check through Horovod is one more negotiation per call (4 ranks on 2 cores, 8 B: 2.9x the time of
    Horovod's own call; checked on MPI: 1.3x, docs/notes/mpi_transport.md); and the same MPI_Allreduce
    run inside a ``tf.numpy_function`` for the data paid the tensor conversions and a new output array per
    call (16 MiB float32: 1.45x Horovod's call). The check stays on the communicator of the MPI transport's
    three phases, so a size that puts one rank above the crossover and another below it, or ranks that
    pick different transports, still meet in one check and raise a mismatch named on every rank. A Horovod
    transport torus call's algorithm word carries the column ``"hvd.allreduce"``
    (:data:`horovod_torus.signature.COLUMN_CODES`), which no MPI transport torus call does.
    """

    def __init__(self, tc, horovod: HorovodTransport):
        self.tc, self.horovod = tc, horovod
        self.grid, self.rank = tc.grid, tc.rank

    def verify(self, signature: CallSignature):
        column = "hvd.allreduce" if signature.algorithm == "torus" and signature.elements > 0 else ""

        def check(stall_form):
            _watched(self.tc, signature, stall_form, lambda: self.tc.verify(signature, column))
            return np.int64(0)

        if tf.executing_eagerly():
            check(TorusStallTFError)
            return None
        with tf.device("/cpu:0"):
            return tf.numpy_function(lambda: check(TorusStallGraphError), [], tf.int64, stateful=True,
                                     name="TorusSignatureCheckMPI")

    def reduce_scatter(self, buf, op, out=None):
        return self.horovod.reduce_scatter(buf, op)

    def allreduce(self, shard, op, out=None):
        return self.horovod.allreduce(shard, op)

    def allgather(self, shard, out=None):
        return self.horovod.allgather(shard)

    def allreduce_flat(self, buf, op, out=None):
        return self.horovod.allreduce_flat(buf, op)

    def gate(self, buf, token):
        return self.horovod.gate(buf, token)


def _watched(tc, signature: CallSignature, stall_form, fn):
    """``fn()`` (MPI steps of one call on ``tc``) under ``tc``'s deadline, its errors in their TensorFlow
    forms: a mismatch as :class:`TorusMismatchTFError`, a stall as ``stall_form``."""
    try:
        with tc.watch(signature.name):
            return fn()
    except TorusMismatchError as exc:
        raise as_tf_error(exc) from None
    except TorusStallError as exc:
        raise stall_form(exc) from None
