"""Benchmark arithmetic and output: sizes, algbw/busbw, the nccl-tests table, the JSON document.

Pure Python + numpy (no TensorFlow, no MPI), so every number here is unit-tested.

Definitions (nccl-tests, doc/PERFORMANCE.md), for an all-reduce of S bytes over n ranks taking t seconds:

* algbw = S / t, in GB/s with 1 GB = 1e9 bytes;
* busbw = algbw * 2(n-1)/n: the bytes each rank must move over its link in a bandwidth-optimal
  all-reduce, so busbw is comparable with link peak whatever the algorithm (ring, torus, ...).

The time t of a row is the per-iteration time averaged over the timed iterations on each rank, then
averaged over ranks (nccl-tests' default ``-a``); min and max over ranks are reported beside it.
"""
from __future__ import annotations

import dataclasses
import json
import re

__all__ = ["Row", "algbw_gbps", "busbw_gbps", "parse_size", "format_size", "sweep_sizes",
           "summarize_times", "format_table", "bench_document", "DTYPES",
           "canonical_dtype", "markdown_table"]

# nccl-tests type names -> numpy/TensorFlow names, and bytes per element.
DTYPES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "int": "int32",
            "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def canonical_dtype(name: str) -> str:
    """``"float"`` -> ``"float32"`` (nccl-tests names accepted). Raises ValueError naming the choices."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported: choose one of {', '.join(DTYPES)} "
                         f"(or the nccl-tests names half, float, double, bfloat16, int32, int64)")
    return key


def parse_size(text) -> int:
    """Bytes from ``"4"``, ``"4K"``, ``"128M"``, ``"1G"`` (binary units, as nccl-tests: 1K = 1024 B).

    Raises:
        ValueError: malformed text or a size < 0 (the message names the text and the form).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"size {text} is negative")
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"size {text!r} is malformed: expected bytes with an optional K/M/G suffix "
                         f"(binary units), e.g. 4, 4K, 128M")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def format_size(nbytes: int) -> str:
    """4096 -> '4K', 134217728 -> '128M', 100 -> '100' (exact binary units only)."""
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """The sizes of a sweep: min_bytes * factor^k up to max_bytes, as nccl-tests ``-b -e -f``.

    Raises:
        ValueError: min_bytes > max_bytes, min_bytes < 1, or factor <= 1 with min_bytes < max_bytes.
    """
    if min_bytes < 1:
        raise ValueError(f"minimum size -b {min_bytes} must be at least 1 byte")
    if min_bytes > max_bytes:
        raise ValueError(f"minimum size -b {min_bytes} exceeds maximum size -e {max_bytes}")
    if min_bytes < max_bytes and not factor > 1:
        raise ValueError(f"factor -f {factor} must be > 1 when -b {min_bytes} < -e {max_bytes}")
    sizes, s = [], float(min_bytes)
    while s <= max_bytes:
        sizes.append(int(s))
        if factor <= 1:
            break
        s *= factor
    return sizes


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth S / t in GB/s (1e9 B/s). Raises ValueError for t <= 0."""
    if not seconds > 0:
        raise ValueError(f"time {seconds} s must be positive to compute a bandwidth")
    return size_bytes / seconds / 1e9


def busbw_gbps(size_bytes: int, seconds: float, nranks: int) -> float:
    """Bus bandwidth of an all-reduce: algbw * 2(n-1)/n in GB/s (0 for a single rank)."""
    if nranks < 1:
        raise ValueError(f"number of ranks {nranks} must be >= 1")
    return algbw_gbps(size_bytes, seconds) * 2 * (nranks - 1) / nranks


def summarize_times(per_rank_seconds) -> dict:
    """{min, avg, max} in microseconds of the per-rank per-iteration times (seconds)."""
    ts = [float(t) for t in per_rank_seconds]
    if not ts:
        raise ValueError("no per-rank times to summarise")
    return {"min": min(ts) * 1e6, "avg": sum(ts) / len(ts) * 1e6, "max": max(ts) * 1e6}


@dataclasses.dataclass(frozen=True)
class Row:
    """One (strategy, size) result, as printed and as written to the JSON.

    Attributes:
        strategy: ``torus``, ``ring``, ``mpi-torus`` or ``mpi``.
        size_bytes: bytes all-reduced per rank (count * itemsize).
        count: elements.
        dtype: element type (``float32`` ...).
        time_us: {"min", "avg", "max"} over ranks of the per-iteration time, microseconds.
        algbw_gbps, busbw_gbps: from time_us["avg"] (see the module docstring).
        wrong: elements that differ from the exact expected sum, summed over ranks; None if unchecked.
        algorithm: what ran: ``torus`` (three phases) or ``flat`` (one all-reduce: Horovod's, a bare
            ``MPI_Allreduce``, or the torus' flat call below its crossover), ``""`` for a user strategy.
            Older files also hold ``ring`` (Horovod) and ``mpi`` (MPI_Allreduce).
        column: the column phase's algorithm of a ``torus`` row (``ring``, ``MPI_Allreduce``,
            ``hvd.allreduce``, ``none``), else ``""``.
        iters: timed iterations behind ``time_us`` (0 in files written before it was recorded).
    """

    strategy: str
    size_bytes: int
    count: int
    dtype: str
    time_us: dict
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None
    algorithm: str = ""
    column: str = ""
    iters: int = 0

    @classmethod
    def from_times(cls, strategy, count, dtype, per_rank_seconds, wrong, algorithm: str = "",
                   column: str = "", iters: int = 0) -> "Row":
        """Build a row from every rank's per-iteration time (seconds); world size = len(times)."""
        size = count * DTYPES[dtype]
        times = summarize_times(per_rank_seconds)
        avg_s = times["avg"] / 1e6
        n = len(per_rank_seconds)
        return cls(strategy=strategy, size_bytes=size, count=count, dtype=dtype, time_us=times,
                   algbw_gbps=algbw_gbps(size, avg_s), busbw_gbps=busbw_gbps(size, avg_s, n),
                   wrong=None if wrong is None else int(wrong), algorithm=algorithm, column=column,
                   iters=int(iters))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_HEADER = (f"{'strategy':>10} {'size(B)':>12} {'count':>11} {'type':>8} {'redop':>5} "
           f"{'min(us)':>11} {'avg(us)':>11} {'max(us)':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'algo':>6}")


def format_header() -> str:
    """The two header lines of the table (time in us, bandwidths in GB/s)."""
    units = (f"{'':>10} {'':>12} {'':>11} {'':>8} {'':>5} {'':>11} {'':>11} {'':>11} "
             f"{'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'':>6}")
    return "#" + _HEADER[1:] + "\n#" + units[1:].rstrip()


def format_row(row: Row) -> str:
    """One table line, nccl-tests style; #wrong is N/A when the row was not checked."""
    t = row.time_us
    wrong = "N/A" if row.wrong is None else str(row.wrong)
    algo = (row.algorithm or "-") + (f"/{row.column}" if row.column else "")
    return (f"{row.strategy:>10} {row.size_bytes:>12} {row.count:>11} {row.dtype:>8} {'sum':>5} "
            f"{t['min']:>11.1f} {t['avg']:>11.1f} {t['max']:>11.1f} {row.algbw_gbps:>8.3f} "
            f"{row.busbw_gbps:>8.3f} {wrong:>7} {algo:>6}")


def format_table(rows) -> str:
    """Header + one line per row."""
    return "\n".join([format_header()] + [format_row(r) for r in rows])


def bench_document(rows, *, world_size: int, grid: str | None, host: dict, config: dict,
                   skipped: dict | None = None) -> dict:
    """The JSON document: rows (see :class:`Row`) plus world_size, grid, host facts, the config."""
    return {"world_size": world_size, "grid": grid, "host": host, "config": config,
            "skipped": dict(skipped or {}), "rows": [r.as_dict() for r in rows]}


def markdown_table(document: dict, sizes) -> str:
    """A Markdown table of time (avg over ranks, us) and busbw (GB/s) per strategy at ``sizes`` (bytes).

    One row per size, two columns per strategy (in the document's order); a size a strategy lacks is "-".

    Example: ``python -m horovod_torus.bench.report docs/bench_allreduce.json --sizes 4K 1M 16M 128M``.
    """
    strategies = list(dict.fromkeys(r["strategy"] for r in document["rows"]))
    cell = {(r["strategy"], r["size_bytes"]): r for r in document["rows"]}
    head = "| size | " + " | ".join(f"{s} time (us) | {s} busbw (GB/s)" for s in strategies) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(strategies))]
    for size in sizes:
        cells = []
        for s in strategies:
            r = cell.get((s, size))
            cells += ["-", "-"] if r is None else [f"{r['time_us']['avg']:,.0f}", f"{r['busbw_gbps']:.3f}"]
        lines.append(f"| {format_size(size)}B | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m horovod_torus.bench.report",
                                description="Markdown table of a benchmark JSON at chosen sizes.")
    p.add_argument("json_file")
    p.add_argument("--sizes", nargs="+", default=["4K", "1M", "16M", "128M"])
    from horovod_torus import __version__
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = p.parse_args(argv)
    with open(args.json_file) as f:
        doc = json.load(f)
    print(markdown_table(doc, [parse_size(s) for s in args.sizes]))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
