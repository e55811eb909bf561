"""The 2D-torus all-reduce of one flat buffer, written once over a small transport protocol.

Source: Mikami et al., "ImageNet/ResNet-50 Training in 224 Seconds", arXiv 1811.05233, section 3.2.
Ranks sit on an X x Y grid (rank r at row r // X, column r % X). For a buffer of S elements:

1. reduce-scatter along the row: the rank at column c keeps the row's sum of block c (Horovod's split:
   ``S // X`` elements, one more for the first ``S % X`` columns; a block may be empty);
2. all-reduce along the column on that block (S/X elements);
3. all-gather along the row: every rank holds all S elements.

Bytes sent per rank: 2(X-1)/X * S*itemsize on the rows + 2(Y-1)/(XY) * S*itemsize on the columns, the
same as one ring all-reduce, in 2(X-1) + 2(Y-1) steps instead of 2(XY-1). A phase over one rank is skipped
(X == 1: phases 1 and 3; Y == 1: phase 2).

Below a size where latency dominates, one flat all-reduce over all ranks is faster: a call whose
:class:`CallSignature` says ``algorithm="flat"`` runs :meth:`Transport.allreduce_flat` instead of the
three phases, with the same check and the same scaling. This is the only flat path of the torus: the
TensorFlow layer's ``min_torus_bytes`` crossover takes it on every transport.

:func:`allreduce_buffer` is the shipped algorithm. Every transport runs it unchanged:
:class:`horovod_torus.mpi.TorusComm` (mpi4py row/column communicators: the numpy API and the TensorFlow
``mpi`` transport), :class:`horovod_torus.tensorflow.transports.HorovodTransport` (Horovod ops on the row
and column process sets: MPI, Gloo, NCCL) and :class:`horovod_torus.inprocess.InProcessTransport` (N
simulated ranks in threads: what the unit tests run).
"""
from __future__ import annotations

from typing import Any, Protocol

from horovod_torus.ops import REDUCE_OPS, check_reduce_op
from horovod_torus.scaling import scale
from horovod_torus.signature import CallSignature
from horovod_torus.topology import TorusTopology

__all__ = ["Transport", "allreduce_buffer", "REDUCE_OPS"]


class Transport(Protocol):
    """How one rank moves data in the three phases. Buffers are the transport's own array type
    (numpy arrays, or ``tf.Tensor`` for the Horovod transport), 1-D, of one dtype.

    Attributes:
        grid: the TorusTopology; ``rank``: this rank's position in it.
    """

    grid: TorusTopology
    rank: int

    def verify(self, signature: CallSignature) -> Any:
        """Advance this transport's call number, exchange the signature words among all ranks and raise
        :class:`horovod_torus.signature.TorusMismatchError` on every rank when they differ. Returns a
        token for :meth:`gate` (None when the check has already run)."""

    def reduce_scatter(self, buf, op: str, out=None):
        """Phase 1 on the row: this rank's block of the row reduction (Horovod's split). ``out``: the
        call's output buffer (see :func:`allreduce_buffer`), in which the transport may build the shard
        for :meth:`allgather` to complete in place; None: the transport's own."""

    def allreduce(self, shard, op: str, out=None):
        """Phase 2 on the column: the reduction of the shard over the column. ``out``: the call's output
        buffer when the column result is the call's result (X == 1), else None."""

    def allgather(self, shard, out=None):
        """Phase 3 on the row: the row's blocks concatenated in column order, into ``out`` when the
        transport can write there (the same ``out`` as :meth:`reduce_scatter`'s)."""

    def allreduce_flat(self, buf, op: str, out=None):
        """One all-reduce of the whole buffer over all ranks (the ``"flat"`` algorithm), into ``out``
        when the transport can write there (``out is buf``: in place)."""

    def gate(self, buf, token):
        """``buf``, made to wait for the verification token (a control dependency in TensorFlow graphs), so
        that no data moves before the ranks have agreed."""


def allreduce_buffer(transport: Transport, buf, signature: CallSignature, prescale: float = 1.0,
                     postscale: float = 1.0, op: str = "sum", out=None):
    """All-reduce one flat buffer over every rank of ``transport.grid``: the shipped algorithm.

    Args:
        transport: this rank's :class:`Transport`.
        buf: 1-D buffer, the same length and dtype on every rank.
        signature: what must match across ranks (checked first, on every rank).
        prescale: factor multiplied in before the reduction (:func:`horovod_torus.scaling.prescale`).
        postscale: factor multiplied in after it, once, on the 1/X shard (Average: includes 1/N).
        op: element-wise reduction, one of :data:`REDUCE_OPS`.
        out: None, or a writable buffer like ``buf`` for the result (numpy transports): the flat
            all-reduce and phase 3 write straight into it, so the result is copied only where a
            transport cannot (a scale factor, one rank, a transport of immutable tensors). It must not
            overlap ``buf`` unless it is the same object (``out is buf``: in place).

    Returns:
        ``out`` when given, else a buffer like ``buf`` (new unless the call moved nothing: one rank,
        no element), holding ``postscale * op_k(prescale * buf_k)`` over the ranks k.

    Raises:
        horovod_torus.signature.TorusMismatchError: on every rank when the signatures differ.
        ValueError: an ``op`` outside :data:`REDUCE_OPS`.
    """
    check_reduce_op(op)
    grid = transport.grid
    buf = transport.gate(buf, transport.verify(signature))
    if signature.elements == 0:  # checked, nothing to move
        return buf if out is None else out
    buf = scale(buf, prescale)  # a factor other than 1 makes a new buffer: then out is not buf (not in place)
    if signature.algorithm == "flat":
        result = transport.allreduce_flat(buf, op, out) if grid.size > 1 else buf
        return _into(out, scale(result, postscale))
    shard = transport.reduce_scatter(buf, op, out) if grid.x > 1 else buf
    if grid.y > 1:
        shard = transport.allreduce(shard, op, out if grid.x == 1 else None)
    shard = scale(shard, postscale)
    return _into(out, transport.allgather(shard, out) if grid.x > 1 else shard)


def _into(out, result):
    """``result``, or ``out`` holding it when the caller gave one (copied only when the transport did not
    write into ``out`` itself)."""
    if out is None or result is out:
        return result
    out[...] = result
    return out
