"""The one cross-rank check of every torus call: what must match on every rank, in one int64 vector.

A torus all-reduce moves one flat buffer per dtype through three collectives. Nothing in MPI (and, once
the tensors are fused, nothing in Horovod) notices when the ranks pass different things: a different
length hangs or truncates, the same length in another shape, another op or another scale factor returns
numbers that are silently wrong. So every call first checks a :class:`CallSignature` (K int64 words, the
same encoding on every transport) across ranks, in two steps:

1. every call: ONE all-reduce with MAX of :func:`extremes` (the words and their negations, 2K int64
   words: O(1) bytes per rank whatever the world size) gives every rank the maximum and the minimum of
   each word; :func:`disagreeing` says which fields differ (max != min);
2. only when some field differs: an all-gather of the words, and :func:`compare` raises
   :class:`TorusMismatchError` naming each field and each rank's value.

Every rank sees the same reduced vector (and the same gathered matrix), so every rank takes the second
step together and raises together, before the result is used.

Fields (in this order): the per-transport call sequence number, the element count of the fused buffer,
the dtype code, a CRC-32 of the (dtype, shape) list, the op, the bits of the float32 pre- and post-scale
factors, the compression, the algorithm (three phases or flat; on the MPI transport also the column
algorithm the call chose, :data:`COLUMN_CODES`, as ``code * COLUMN_SHIFT`` added to the word), and a
CRC-32 of the name.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib

import numpy as np

__all__ = ["CallSignature", "TorusMismatchError", "FIELDS", "compare", "layout_crc", "extremes", "disagreeing",
           "COLUMN_CODES", "COLUMN_SHIFT", "EXIT_SIGNATURE", "leaving"]

FIELDS = ("call", "elements", "dtype", "shapes", "op", "prescale", "postscale", "compression", "algorithm",
          "name")

_DTYPE_CODES = {"float16": 1, "bfloat16": 2, "float32": 3, "float64": 4, "int8": 5, "uint8": 6, "int16": 7,
                "uint16": 8, "int32": 9, "uint32": 10, "int64": 11, "uint64": 12, "bool": 13}
_CODE_DTYPES = {v: k for k, v in _DTYPE_CODES.items()}
_OPS = {0: "Average", 1: "Sum", 2: "Min", 3: "Max", 4: "Product"}
_ALGORITHMS = {0: "torus", 1: "flat"}
_OP_CODES = {v: k for k, v in _OPS.items()}
#: The column algorithm a torus call chose (:mod:`horovod_torus.columns`) -> its code in the algorithm
#: word ("": none chosen: a flat call, a grid of one row, the Horovod transport's own check;
#: ``"hvd.allreduce"``: the Horovod transport's torus call checked on the MPI communicator, phase 2 being
#: Horovod's all-reduce on the column's process set).
COLUMN_CODES = {"": 0, "mpi": 1, "ring": 2, "halving-doubling": 3, "tree": 4, "hvd.allreduce": 5}
_CODE_COLUMNS = {v: k for k, v in COLUMN_CODES.items()}
#: The algorithm word is ``algorithm code + COLUMN_SHIFT * column code``.
COLUMN_SHIFT = 8
_ALGORITHM_WORD = FIELDS.index("algorithm")
_ALGORITHM_CODES = {v: k for k, v in _ALGORITHMS.items()}


class TorusMismatchError(ValueError):
    """The ranks passed different tensors or arguments to the same torus call (raised on every rank).

    ``fields`` names what differs; the message lists every rank's value of each differing field.
    TensorFlow callers see it as ``tf.errors.FailedPreconditionError`` (Horovod's type for mismatched
    collectives) with the same message.
    """

    def __init__(self, message: str = "", fields=()):
        super().__init__(message)
        self.fields = tuple(fields)


def layout_crc(layout) -> int:
    """CRC-32 of a list of (dtype name, shape tuple) pairs: tells shapes and their order apart."""
    text = repr([(str(d), tuple(int(x) for x in s)) for d, s in layout])
    return zlib.crc32(text.encode())


def _float_bits(value: float) -> int:
    return int(np.array([value], np.float32).view(np.int32)[0])


@dataclasses.dataclass(frozen=True)
class CallSignature:
    """Everything about one torus call that must be equal on every rank (the call number excepted,
    which the transport adds at run time).

    Attributes:
        elements: element count of the fused buffer.
        dtype: dtype name of the buffer as it travels (e.g. ``"float32"``).
        layout: tuple of (dtype name, shape) of the caller's tensors, in order.
        op: ``"Average"`` or ``"Sum"``.
        prescale, postscale: the caller's factors (compared as float32 bits, as Horovod passes them).
        compression: the compression's name (``"none"``, ``"fp16"``).
        algorithm: ``"torus"`` (three phases) or ``"flat"`` (one all-reduce).
        name: the call's name or ``""``.
    """

    elements: int
    dtype: str
    layout: tuple = ()
    op: str = "Sum"
    prescale: float = 1.0
    postscale: float = 1.0
    compression: str = "none"
    algorithm: str = "torus"
    name: str = ""

    @functools.cached_property
    def _static_words(self) -> np.ndarray:
        """Every word but the call number, computed once per signature (a call site reuses its signature
        every step, so the CRC of a long shape list is not recomputed on the hot path)."""
        return np.array([self.elements, _DTYPE_CODES.get(self.dtype, 99), layout_crc(self.layout),
                         _OP_CODES.get(self.op, 9), _float_bits(self.prescale), _float_bits(self.postscale),
                         zlib.crc32(self.compression.encode()), _ALGORITHM_CODES[self.algorithm],
                         zlib.crc32(self.name.encode())], dtype=np.int64)

    def words(self, call: int, column: str = "") -> np.ndarray:
        """The int64 vector exchanged among ranks (``len(FIELDS)`` words), with call number ``call`` and
        the column algorithm ``column`` (a key of :data:`COLUMN_CODES`) folded into the algorithm word."""
        words = np.concatenate([np.array([call], np.int64), self._static_words])
        words[_ALGORITHM_WORD] += COLUMN_SHIFT * COLUMN_CODES[column]
        return words


#: The signature a rank exchanges when it leaves the torus (``shutdown()`` or the end of the process, in the
#: check of either transport): a rank still making torus calls then sees it in the same exchange and raises at
#: once, naming the rank that left (:func:`leaving`), instead of waiting for the deadline.
EXIT_SIGNATURE = CallSignature(elements=-1, dtype="int64", name="<exit>")


def leaving(gathered: np.ndarray) -> list[int]:
    """The ranks whose row of ``gathered`` ([N, len(FIELDS)]) is an :data:`EXIT_SIGNATURE`."""
    gathered = np.asarray(gathered).reshape(-1, len(FIELDS))
    return [int(r) for r in np.flatnonzero(gathered[:, FIELDS.index("elements")] == EXIT_SIGNATURE.elements)]


def _show(field: str, word: int) -> str:
    if field == "dtype":
        return _CODE_DTYPES.get(word, str(word))
    if field == "op":
        return _OPS.get(word, str(word))
    if field in ("prescale", "postscale"):
        return repr(float(np.array([word], np.int32).view(np.float32)[0]))
    if field == "algorithm":
        base, column = _ALGORITHMS.get(word % COLUMN_SHIFT, str(word)), _CODE_COLUMNS.get(word // COLUMN_SHIFT)
        return f"{base} (column {column})" if column else base
    if field in ("shapes", "compression", "name"):
        return f"crc {word & 0xFFFFFFFF:08x}"
    return str(word)


def _shapes(layout) -> str:
    """A rank's shapes for a mismatch message: ``[(float32, (3, 4)), ...]``, at most 8 then the count."""
    layout = list(layout)
    shown = ", ".join(f"({d}, {tuple(int(x) for x in s)})" for d, s in layout[:8])
    return f"[{shown}{', ... ' + str(len(layout)) + ' tensors' if len(layout) > 8 else ''}]"


def extremes(words: np.ndarray) -> np.ndarray:
    """int64 [2K]: ``words`` then ``-words``. Reduced with MAX over the ranks, the first half is each word's
    maximum and the negated second half its minimum (step 1 of the check)."""
    words = np.asarray(words, np.int64)
    return np.concatenate([words, -words])


def disagreeing(reduced: np.ndarray) -> list[int]:
    """Indices of the fields whose maximum and minimum differ, from the MAX-reduced :func:`extremes`
    (empty: every rank passed the same words)."""
    reduced = np.asarray(reduced, np.int64).reshape(2, -1)
    return [int(i) for i in np.flatnonzero(reduced[0] != -reduced[1])]


def compare(gathered: np.ndarray, mine: CallSignature | None = None, what: str = "torus all-reduce",
            layouts=None) -> None:
    """Raise :class:`TorusMismatchError` unless every row of ``gathered`` is equal.

    Args:
        gathered: int64 array [N, len(FIELDS)]: row r is rank r's :meth:`CallSignature.words`.
        mine: this rank's signature (its layout is quoted in the message), optional.
        what: the operation named in the message.
        layouts: None, or every rank's :attr:`CallSignature.layout` in rank order (the MPI transport
            gathers them on a mismatch): the ``shapes`` line then names each rank's shapes, not their CRCs.

    Raises:
        TorusMismatchError: naming each differing field with every rank's value, e.g.
            ``op: rank 0 Average, rank 1 Average, rank 2 Average, rank 3 Sum``.
        ValueError: ``gathered`` has the wrong shape (a transport bug).
    """
    gathered = np.asarray(gathered).reshape(-1, len(FIELDS))
    differ = [i for i in range(len(FIELDS)) if (gathered[:, i] != gathered[0, i]).any()]
    if not differ:
        return
    lines = []
    for i in differ:
        if FIELDS[i] == "shapes" and layouts is not None and len(layouts) == len(gathered):
            values = ", ".join(f"rank {r} {_shapes(layout)}" for r, layout in enumerate(layouts))
        else:
            values = ", ".join(f"rank {r} {_show(FIELDS[i], int(w))}" for r, w in enumerate(gathered[:, i]))
        lines.append(f"  {FIELDS[i]}: {values}")
    columns = {_CODE_COLUMNS.get(int(w) // COLUMN_SHIFT) for w in gathered[:, _ALGORITHM_WORD]}
    if FIELDS.index("call") in differ:
        hint = "every rank must make the same torus calls in the same order (a rank skipped or added a call)"
    elif (differ == [_ALGORITHM_WORD] and "hvd.allreduce" in columns
          and len({int(w) % COLUMN_SHIFT for w in gathered[:, _ALGORITHM_WORD]}) == 1):
        hint = ("the ranks ran the torus on different transports (a Horovod-ops torus call, column "
                "hvd.allreduce, against an mpi4py one): give every rank the same strategy (e.g. 'torus:mpi' "
                "or 'torus:horovod') and the same HOROVOD_TORUS_TRANSPORT")
    elif differ == [_ALGORITHM_WORD] and len({int(w) % COLUMN_SHIFT for w in gathered[:, _ALGORITHM_WORD]}) == 1:
        hint = ("the ranks chose different column algorithms: give every rank the same column_algorithm "
                "(HOROVOD_TORUS_COLUMN_ALGORITHM) and the same TorusComm column_model")
    else:
        hint = ("every rank must pass the same shapes, dtypes, op, scale factors, compression and name, position "
                "by position")
    here = f"; this rank passed {list(mine.layout)[:8]}" if mine is not None and mine.layout else ""
    raise TorusMismatchError(f"{what}: mismatch across ranks: the ranks disagree on {', '.join(FIELDS[i] for i in differ)}:\n"
                             + "\n".join(lines) + f"\n{hint}{here}", [FIELDS[i] for i in differ])
