"""Point-to-point all-reduce building blocks of the MPI transport: rings, recursive halving-doubling and a
binomial tree, every step a non-blocking ``MPI_Isend``/``MPI_Irecv`` completed through a ``wait`` callable.

``wait`` is :meth:`horovod_torus.mpi.TorusComm._wait` inside a torus call: it completes a step's requests
under the call's deadline (:class:`horovod_torus.stall.CallClock`), so a rank that skipped the call makes
the others raise :class:`horovod_torus.stall.TorusStallError` instead of blocking forever. Outside a call
it is ``MPI_Waitall``. Buffers are 1-D numpy arrays of one dtype; float16 travels as 2-byte words
(:func:`wire`) and is folded with numpy. Every algorithm reduces each element at exactly one rank and then
distributes it, so every rank ends with the same bits (floats included).

Sources: the ring, Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009; recursive halving-doubling, Rabenseifner's algorithm as Thakur, Rabenseifner &
Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005, describe it and Open
MPI runs it (``ompi_coll_base_allreduce_intra_redscat_allgather``: the fold of the p - 2^k extra ranks
exchanges half vectors); the binomial tree, the same paper's reduce and broadcast. Their costs are
:func:`horovod_torus.costmodel.ring_time`, :func:`~horovod_torus.costmodel.halving_doubling_time` and
:func:`~horovod_torus.costmodel.binomial_tree_time`.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from horovod_torus.columns import TREE_CHUNK_BYTES

__all__ = ["wire", "wire_op", "vspec", "blocks", "exchange", "ring_reduce_scatter", "ring_allgather",
           "ring_allreduce", "halving_doubling_allreduce", "tree_allreduce"]

_float16: dict = {}


def _sum_float16(inbuf, inoutbuf, datatype):
    b = np.frombuffer(inoutbuf, dtype=np.float16)
    np.add(np.frombuffer(inbuf, dtype=np.float16), b, out=b)


def wire(a: np.ndarray):
    """MPI buffer spec of ``a``; float16 (no MPI datatype) travels as 2-byte words."""
    if a.dtype != np.float16:
        return a
    if "type" not in _float16:
        _float16["type"] = MPI.UINT16_T.Dup().Commit()
    return [a.view(np.uint16), _float16["type"]]


def wire_op(op, dtype):
    """The MPI op for ``dtype``: float16 sums go through a user-defined op (numpy arithmetic)."""
    if dtype != np.float16:
        return op
    if op != MPI.SUM:
        name = next((f"MPI.{n}" for n in ("MAX", "MIN", "PROD") if getattr(MPI, n) == op), "a user-defined op")
        raise TypeError(f"float16 supports op=MPI.SUM only, got {name}")
    if "op" not in _float16:
        _float16["op"] = MPI.Op.Create(_sum_float16, commute=True)
    return _float16["op"]


def vspec(a, counts):
    spec = wire(a)
    return [spec[0], (counts, None), spec[1]] if isinstance(spec, list) else [spec, (counts, None)]


def blocks(counts):
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
    return [slice(starts[k], starts[k + 1]) for k in range(len(counts))]


def exchange(comm, outgoing, dest, incoming, source, tag, wait) -> None:
    """One ring step: send ``outgoing`` to ``dest`` while receiving ``incoming`` from ``source``."""
    wait([comm.Irecv(wire(incoming), source=source, tag=tag), comm.Isend(wire(outgoing), dest=dest, tag=tag)])


def ring_reduce_scatter(comm: MPI.Comm, send: np.ndarray, shard: np.ndarray, counts, ufunc, work,
                        wait=MPI.Request.Waitall) -> None:
    """Ring reduce-scatter: rank i ends with block i of the reduction of every rank's ``send``.

    p-1 steps; at step s rank i sends its partial block (i-s-1) mod p to rank i+1 and folds the partial
    block (i-s-2) mod p received from rank i-1 into its own contribution (Patarasuk & Yuan 2009). ``work``
    holds two scratch arrays of max(counts) elements; ``shard`` (counts[i] elements) must not overlap
    ``send``. ``wait`` completes each step's two requests (``TorusComm._wait``: under the call's deadline).
    """
    p, i = comm.Get_size(), comm.Get_rank()
    b = blocks(counts)
    right, left = (i + 1) % p, (i - 1) % p
    partial = None
    for step in range(p - 1):
        sb, rb = (i - step - 1) % p, (i - step - 2) % p
        outgoing = send[b[sb]] if step == 0 else partial
        incoming = shard if step == p - 2 else work[step % 2][:counts[rb]]
        exchange(comm, outgoing, right, incoming, left, 71, wait)
        ufunc(incoming, send[b[rb]], out=incoming)
        partial = incoming


def ring_allgather(comm: MPI.Comm, out: np.ndarray, counts, wait=MPI.Request.Waitall) -> None:
    """Ring all-gather in place: rank i's block i of ``out`` is filled in; afterwards every block is."""
    p, i = comm.Get_size(), comm.Get_rank()
    b = blocks(counts)
    right, left = (i + 1) % p, (i - 1) % p
    for step in range(p - 1):
        sb, rb = (i - step) % p, (i - step - 1) % p
        exchange(comm, out[b[sb]], right, out[b[rb]], left, 72, wait)


def ring_allreduce(comm: MPI.Comm, buf: np.ndarray, out: np.ndarray, ufunc, work, counts,
                   wait=MPI.Request.Waitall) -> np.ndarray:
    """Ring all-reduce of ``buf`` into ``out`` (a new array like it): :func:`ring_reduce_scatter` of
    ``counts`` blocks (block i to rank i) then :func:`ring_allgather`. ``work``: two scratch arrays of
    max(counts) elements. Returns ``out``."""
    ring_reduce_scatter(comm, buf, out[blocks(counts)[comm.Get_rank()]], counts, ufunc, work, wait)
    ring_allgather(comm, out, counts, wait)
    return out


def _send(comm, a, dest, tag, wait) -> None:
    wait([comm.Isend(wire(a), dest=dest, tag=tag)])


def _recv(comm, a, source, tag, wait) -> None:
    wait([comm.Irecv(wire(a), source=source, tag=tag)])


def halving_doubling_allreduce(comm: MPI.Comm, buf: np.ndarray, out: np.ndarray, ufunc, work,
                               wait=MPI.Request.Waitall) -> np.ndarray:
    """Rabenseifner's all-reduce of ``buf`` into ``out`` (a new array like it): recursive vector halving
    (reduce-scatter) then recursive doubling (all-gather), any number of ranks p. Returns ``out``.

    With q = 2^floor(lg p) and r = p - q, ranks 0 .. 2r-1 first fold in pairs (even i with i + 1): they
    exchange half vectors and fold them, the odd one sends its folded half to the even one and sits out;
    the q remaining ranks (the evens of the first 2r, then r .. p-1 renumbered i - r) run the butterfly at
    distance 1, 2, ..., q/2, each step exchanging half of the window kept so far (uneven lengths split at
    ``len // 2``; a window may be empty); the all-gather retraces it; the evens of the first 2r send the
    result to the odd ones last. Messages: 2 lg q, + 3 when p != q. ``work``: one scratch array of
    ceil(n / 2) elements (n = ``buf.size``).
    """
    p, i = comm.Get_size(), comm.Get_rank()
    out[...] = buf
    if p == 1:
        return out
    n = out.size
    q = 1 << (p.bit_length() - 1)
    r = p - q
    half = n // 2
    if i < 2 * r:  # the fold
        if i % 2 == 0:
            exchange(comm, out[half:], i + 1, work[:half], i + 1, 81, wait)
            ufunc(out[:half], work[:half], out=out[:half])
            _recv(comm, out[half:], i + 1, 82, wait)
        else:
            exchange(comm, out[:half], i - 1, work[:n - half], i - 1, 81, wait)
            ufunc(out[half:], work[:n - half], out=out[half:])
            _send(comm, out[half:], i - 1, 82, wait)
            _recv(comm, out, i - 1, 85, wait)
            return out
    me = i // 2 if i < 2 * r else i - r

    def real(k):  # a butterfly index -> its rank
        return 2 * k if k < r else k + r

    lo, hi, steps, mask = 0, n, [], 1
    while mask < q:  # reduce-scatter: the window halves, the partner's distance doubles
        partner, mid = me ^ mask, lo + (hi - lo) // 2
        keep, give = ((lo, mid), (mid, hi)) if me < partner else ((mid, hi), (lo, mid))
        size = keep[1] - keep[0]
        exchange(comm, out[give[0]:give[1]], real(partner), work[:size], real(partner), 83, wait)
        ufunc(out[keep[0]:keep[1]], work[:size], out=out[keep[0]:keep[1]])
        steps.append((mask, lo, hi, mid, me < partner))
        lo, hi = keep
        mask <<= 1
    for mask, plo, phi, mid, lower in reversed(steps):  # all-gather: the windows double back
        partner = me ^ mask
        other = (mid, phi) if lower else (plo, mid)
        exchange(comm, out[lo:hi], real(partner), out[other[0]:other[1]], real(partner), 84, wait)
        lo, hi = plo, phi
    if i < 2 * r:
        _send(comm, out, i + 1, 85, wait)
    return out


def tree_allreduce(comm: MPI.Comm, buf: np.ndarray, out: np.ndarray, ufunc, work_for,
                   wait=MPI.Request.Waitall, chunk_bytes: int = TREE_CHUNK_BYTES) -> np.ndarray:
    """Binomial-tree reduce to rank 0 then binomial-tree broadcast of ``buf`` into ``out`` (a new array
    like it), pipelined in pieces of ``chunk_bytes``. Returns ``out``.

    Rank i's parent is i - lowbit(i), its children i + 2^k for 2^k < lowbit(i) (all 2^k < p at the root):
    ceil(lg p) rounds up and down. Reduce: per piece, receive every child's partial sum at once, fold them
    in child order, send the result up without waiting (the next piece's receives overlap it). Broadcast:
    per piece, receive from the parent, forward to the children (largest subtree first) without waiting.
    ``work_for(k, count)``: scratch array k (k < number of children) of ``count`` elements.
    """
    p, i = comm.Get_size(), comm.Get_rank()
    out[...] = buf
    if p == 1:
        return out
    children, parent, mask = [], None, 1
    while mask < p:
        if i & mask:
            parent = i - mask
            break
        if i + mask < p:
            children.append(i + mask)
        mask <<= 1
    step = max(1, chunk_bytes // max(out.itemsize, 1))
    pieces = [slice(s, min(s + step, out.size)) for s in range(0, out.size, step)] or [slice(0, 0)]
    scratch = [work_for(k, min(step, out.size)) for k in range(len(children))]
    sends = []
    for piece in pieces:
        m = piece.stop - piece.start
        if children:
            wait([comm.Irecv(wire(scratch[k][:m]), source=c, tag=86) for k, c in enumerate(children)])
            for k in range(len(children)):
                ufunc(out[piece], scratch[k][:m], out=out[piece])
        if parent is not None:
            sends.append(comm.Isend(wire(out[piece]), dest=parent, tag=86))
    if sends:
        wait(sends)
    sends = []
    for piece in pieces:
        if parent is not None:
            _recv(comm, out[piece], parent, 87, wait)
        sends.extend(comm.Isend(wire(out[piece]), dest=c, tag=87) for c in reversed(children))
    if sends:
        wait(sends)
    return out
