"""2D-Torus all-reduce of TensorFlow tensors through Horovod ops on the row and column process sets.

Source: Mikami et al., arXiv 1811.05233, section 3.2. Because every phase is a stock Horovod op on a
process set, the same code runs on every Horovod backend (MPI and Gloo on CPU, NCCL on GPU), eagerly and
inside ``tf.function``.
"""
from __future__ import annotations

import zlib

import horovod.tensorflow as _hvd
import numpy as np
import tensorflow as tf

from horovod_torus.fusion import plan_fusion
from horovod_torus.tensorflow import runtime

__all__ = ["torus_allreduce", "grouped_torus_allreduce", "SUPPORTED_DTYPES"]

Average, Sum, Compression = _hvd.Average, _hvd.Sum, _hvd.Compression

SUPPORTED_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)


def torus_allreduce(tensor, op=Average, name=None, compression=Compression.none,
                    prescale_factor=1.0, postscale_factor=1.0):
    """All-reduce one tensor over all ranks through the 2D torus.

    Same contract as ``horovod.tensorflow.allreduce`` for dense tensors: the result has the input's shape
    and dtype and equals ``postscale * op_k(prescale * tensor_k)`` over the N ranks k. See
    :func:`grouped_torus_allreduce` for the phases, the errors raised, and the bytes moved.

    Example (under ``horovodrun -np 4``)::

        import tensorflow as tf, horovod_torus.tensorflow as hvd
        hvd.init(grid="2x2")
        print(hvd.torus_allreduce(tf.fill([3], float(hvd.rank())), op=hvd.Sum))   # [6. 6. 6.]
    """
    return grouped_torus_allreduce([tensor], op=op, name=name, compression=compression,
                                   prescale_factor=prescale_factor, postscale_factor=postscale_factor)[0]


def grouped_torus_allreduce(tensors, op=Average, name=None, compression=Compression.none,
                            prescale_factor=1.0, postscale_factor=1.0):
    """All-reduce many tensors through the 2D torus, fused into one buffer per dtype.

    Phases, for each dtype's fused buffer of S elements (the members flattened and concatenated):

    1. reduce-scatter along the row (``hvd.reducescatter``, op Sum, ``prescale_factor`` applied here):
       each rank keeps the row sum of about S/X elements (Horovod's split: the first S % X ranks of a
       row get one extra element; a shard may be empty);
    2. all-reduce along the column on that S/X shard (``hvd.allreduce``, op Sum); then the shard is
       multiplied by ``postscale_factor`` (and for Average divided by N = X*Y) once, on 1/X of the data;
    3. all-gather along the row (``hvd.allgather``): every rank holds the full result.

    A phase over one rank is skipped (X == 1: phases 1 and 3; Y == 1: phase 2). Bytes sent per rank:
    2(X-1)/X * S*itemsize on the row rings + 2(Y-1)/(XY) * S*itemsize on the column rings, as for one
    ring all-reduce, in 2(X-1) + 2(Y-1) steps instead of 2(XY-1).

    Args:
        tensors: list of dense ``tf.Tensor`` / ``tf.Variable`` with fully defined shapes (any rank, 0-d and
            empty included) and dtypes float16, bfloat16, float32, float64, int32, int64. Shapes and
            dtypes must match across ranks position by position. Horovod 0.28.1 has no bfloat16 kernels,
            so bfloat16 tensors travel (and are summed) as float32 and are rounded back once.
        op: ``Average`` (default) or ``Sum``. Integer Average follows Horovod: the sum times 1/N in
            double precision, truncated toward zero.
        name: optional name prefix of the Horovod ops (needed only to tell concurrent calls apart).
        compression: ``Compression.none`` or ``Compression.fp16`` (floating tensors travel as float16).
        prescale_factor, postscale_factor: multiplied in once each, before and after the sum.

    Returns:
        A list of tensors, same shapes and dtypes as ``tensors``.

    Raises:
        ValueError: an op other than Average/Sum, or a shape with an unknown dimension.
        TypeError: an unsupported dtype (the message names it), or a tf.IndexedSlices.
        RuntimeError: ``init()`` was not called.
        tf.errors.InvalidArgumentError (Horovod backend) or ValueError (mpi backend), on every rank:
            shapes, dtypes or their order differ across ranks, the same element count in another shape
            included (a CRC-32 of the (dtype, shape) list is all-gathered per call; the mpi backend compares
            its own checksum). Inside ``tf.function`` a differing element count may surface first as
            Horovod's own error (``tf.errors.FailedPreconditionError`` or similar).
    """
    sets = runtime.torus_process_sets()
    op = _check_op(op)
    tensors = list(tensors)
    for t in tensors:
        if isinstance(t, tf.IndexedSlices):
            raise TypeError("grouped_torus_allreduce takes dense tensors; convert tf.IndexedSlices with "
                            "tf.convert_to_tensor or use sparse_as_dense=True")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"torus all-reduce does not support dtype {t.dtype.name}: supported are "
                            f"{', '.join(d.name for d in SUPPORTED_DTYPES)}; cast the tensor first")
    if not tensors:
        return []
    n = sets.grid.size
    divisor = n if op == Average else 1
    compressed, ctxs = zip(*(compression.compress(t) for t in tensors))
    upcast = [t.dtype == tf.bfloat16 for t in compressed]
    compressed = [tf.cast(t, tf.float32) if up else t for t, up in zip(compressed, upcast)]
    groups = plan_fusion([t.shape.as_list() for t in compressed], [t.dtype.name for t in compressed],
                         sets.grid.x)
    results = [None] * len(tensors)
    check = _signature_check(compressed, sets, name)
    for g in groups:
        members = [compressed[i] for i in g.indices]
        if g.total == 0:
            reduced = members
        else:
            suffix = f"{name}_{g.dtype}" if name else None
            buf = _pack(members, g)
            out = _torus_sum(buf, sets, prescale_factor, postscale_factor, divisor, suffix, g.shapes)
            reduced = _unpack(out, g)
        for i, r in zip(g.indices, reduced):
            if upcast[i]:
                r = tf.cast(r, tf.bfloat16)
            results[i] = compression.decompress(r, ctxs[i])
    if check is not None:
        with tf.control_dependencies([check]):
            results = [tf.identity(r) for r in results]
    return results


def _signature_check(tensors, sets, name):
    """On the Horovod data path: all-gather a CRC-32 of this call's (dtype, shape) list and fail on every
    rank when the ranks disagree. Flattening into fused buffers hides a shape that differs across ranks
    with the same element count (``[2, 6]`` here, ``[3, 4]`` there), which Horovod's own shape check
    would catch on an unfused all-reduce. One 4-byte all-gather on the global process set per call,
    negotiated in the same Horovod cycle as the first phase. Returns the assert op (graph mode) or None
    (eager mode: raises at once, or a single rank / the mpi backend: nothing to do, the mpi backend
    compares (length, dtype, shape checksum) itself).

    Raises:
        tf.errors.InvalidArgumentError: on every rank, naming every rank's signature.
    """
    if sets.grid.size == 1 or runtime.backend() == "mpi":
        return None
    layout = repr([(t.dtype.name, tuple(t.shape.as_list())) for t in tensors])
    signature = zlib.crc32(layout.encode()) & 0x7FFFFFFF
    with tf.device("/cpu:0"):
        gathered = _hvd.allgather(tf.constant([signature], tf.int32), name=name and f"{name}_sig")
        return tf.debugging.assert_equal(
            gathered, tf.fill(tf.shape(gathered), gathered[0]),
            message=f"torus all-reduce{f' {name!r}' if name else ''}: tensor shapes or dtypes differ across "
                    f"ranks (CRC-32 of the (dtype, shape) list per rank, in rank order, below); this rank "
                    f"has {layout[:300]}: every rank must pass the same shapes in the same order")


def _check_op(op):
    if op is None:
        return Average
    if op not in (Average, Sum):
        names = {getattr(_hvd, n): n for n in ("Max", "Min", "Product", "Adasum")}
        label = names.get(op, repr(op))
        hint = ("Adasum is not supported by horovod_torus" if label == "Adasum" else
                f"use strategy='ring' (Horovod's own all-reduce) for op={label}")
        raise ValueError(f"torus all-reduce supports op=Average or op=Sum, got op={label}: {hint}")
    return op


def _pack(members, g):
    """Flatten and concatenate the members of one FusionGroup (a reshape only, for one member)."""
    flat = [tf.reshape(t, [-1]) for t in members]
    return flat[0] if len(flat) == 1 else tf.concat(flat, axis=0)


def _unpack(buf, g):
    """Inverse of _pack: split the buffer and restore each member's shape."""
    parts = [buf] if len(g.counts) == 1 else tf.split(buf, list(g.counts), axis=0)
    return [tf.reshape(p, s) for p, s in zip(parts, g.shapes)]


def _postscale(shard, postscale, divisor):
    """Multiply by postscale / divisor once, as Horovod does after its sum: the factor is computed in
    double precision from the float32 ``postscale`` attribute; integers are scaled in double and truncated
    toward zero. (Passing postscale/N through Horovod's float32 attribute would round 1/N when N is not a
    power of two, hence the scaling here, on the 1/X shard.)"""
    factor = float(np.float32(postscale)) / divisor
    if factor == 1.0:
        return shard
    if shard.dtype.is_integer:
        return tf.cast(tf.cast(shard, tf.float64) * factor, shard.dtype)
    return shard * tf.constant(factor, shard.dtype)


def _torus_sum(buf, sets, prescale, postscale, divisor, name, shapes):
    """The three phases on one flat buffer (1-D, same length on every rank)."""
    row, column = sets.row, sets.column
    if row is None and column is None:  # a single rank: Horovod's own op applies the scaling
        return _hvd.allreduce(buf, op=Sum, prescale_factor=prescale, postscale_factor=postscale,
                              name=name and f"{name}_ar")
    if runtime.backend() == "mpi":
        from horovod_torus.tensorflow.mpi_backend import torus_sum_mpi

        return torus_sum_mpi(buf, runtime.torus_comm(), prescale, postscale, divisor, shapes)
    shard = buf
    if row is not None:
        shard = _hvd.reducescatter(shard, op=Sum, process_set=row, name=name and f"{name}_rs",
                                   prescale_factor=prescale)
    if column is not None:
        shard = _hvd.allreduce(shard, op=Sum, process_set=column, name=name and f"{name}_ar",
                               prescale_factor=prescale if row is None else 1.0)
    shard = _postscale(shard, postscale, divisor)
    if row is not None:
        shard = _hvd.allgather(shard, process_set=row, name=name and f"{name}_ag")
    return shard
