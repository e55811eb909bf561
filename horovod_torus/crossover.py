"""The crossover between the flat all-reduce and the torus: calibrated once, agreed, cached in a file.

Below some buffer size one flat all-reduce (``MPI_Allreduce``, Horovod's own call) beats the three phases
of the torus: latency dominates and three collectives cost more than one. The setting ``min_torus_bytes``
(:class:`horovod_torus.settings.TorusSettings`) holds that size; its default ``"auto"`` is resolved here:

1. **the key** (:class:`CrossoverKey`): world size, grid, launcher, the hosts in rank order, transport,
   the transport's variant (the column algorithm) and the package version;
2. **the cache**: rank 0 reads ``<cache_dir>/crossover-<digest>.json`` (:func:`read_cache`) and broadcasts
   what it found, so every rank takes the same branch; a missing file means "measure", and a file that is
   not valid JSON, of another format or another key, or holds a bad value, is ignored with a
   :class:`CrossoverCacheWarning`;
3. **the calibration** (:func:`calibrate`, collective, when the cache has nothing): sizes from the largest
   down; per size up to ``rounds`` rounds of both algorithms, their order alternating between rounds,
   each algorithm ``calls`` timed calls (median; one call from :data:`LARGE_BYTES`); every rank's
   per-round medians reduced with MAX over the ranks (a collective ends when its slowest rank does, and
   after the reduction every rank holds the same numbers, so every rank takes the same decision); the
   torus wins a size when the median over the rounds of torus / flat is at most :data:`MARGIN` (when in
   doubt, the flat call); the rounds stop as soon as that median is decided (more than half of them on
   one side). The scan stops at the first size the torus loses (on one host: usually the first, the
   largest), after one more size between it and the last win (:func:`midpoint`: 8 MiB between 4 and
   16 MiB), so that the crossover is found to a factor of 2, not of the sizes' 4. The crossover is the
   smallest size from which the torus wins at every larger measured size; :data:`NEVER` when it loses at
   the largest;
4. rank 0 writes the result atomically (:func:`horovod_torus.atomic.write_json_atomic`); a directory that
   cannot be written gives a warning, not an error.

The transports supply the collectives (:func:`resolve`'s callbacks): the numpy API
(:meth:`horovod_torus.mpi.TorusComm.create`) uses mpi4py, the TensorFlow torus
(:meth:`horovod_torus.tensorflow.torus.TorusAllreduce.resolve_crossover`) Horovod's ops. Pure Python +
numpy: everything here is unit-tested without MPI.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import statistics
import time
import warnings
from typing import Callable

import numpy as np

from horovod_torus.atomic import write_json_atomic

__all__ = ["CrossoverKey", "Calibration", "CrossoverCacheWarning", "host_runs", "cache_path", "read_cache",
           "write_cache", "decide", "calibrate", "midpoint", "resolve", "show", "NEVER", "FORMAT", "DEFAULT_SIZES",
           "ROUNDS", "CALLS", "LARGE_BYTES", "MARGIN"]

#: ``min_torus_bytes`` that means "always the flat all-reduce" (no buffer is that large).
NEVER = 2 ** 62
#: Version of the cache file's layout; a file of another format is ignored.
FORMAT = 1
#: Buffer sizes measured (bytes, float32): 4 KiB .. 16 MiB, x4.
DEFAULT_SIZES = tuple(4096 * 4 ** k for k in range(7))
#: Rounds per size at most (the algorithms' order alternates between rounds), and timed calls per algorithm
#: and round below LARGE_BYTES (one call from it: the round is the repetition).
ROUNDS, CALLS, LARGE_BYTES = 5, 3, 1 << 20
#: The torus is chosen at a size only when the median over rounds of torus / flat time is at most this.
MARGIN = 0.95


class CrossoverCacheWarning(UserWarning):
    """A cache file was ignored (unreadable, corrupt, of another format or key) or could not be written."""


def host_runs(hostnames) -> tuple:
    """The hosts of the ranks in rank order as runs: ``["a", "a", "b"]`` -> ``(("a", 2), ("b", 1))``."""
    runs: list = []
    for h in hostnames:
        if runs and runs[-1][0] == h:
            runs[-1][1] += 1
        else:
            runs.append([str(h), 1])
    return tuple((h, n) for h, n in runs)


@dataclasses.dataclass(frozen=True)
class CrossoverKey:
    """What a calibration depends on; two jobs with equal keys share a cache file.

    Attributes:
        world_size: ranks (int). ``grid``: ``"XxY"``. ``launcher``: a
            :data:`horovod_torus.launch.LAUNCHERS` name.
        hosts: :func:`host_runs` of the ranks' host names in rank order.
        transport: ``"mpi"`` / ``"horovod"`` (the TensorFlow torus) or ``"numpy"`` (the numpy API).
        variant: the transport's detail that changes the torus' speed (e.g. ``"column=auto;model=..."``: the column setting and model), or ``""``.
        version: ``horovod_torus.__version__``.
    """

    world_size: int
    grid: str
    launcher: str
    hosts: tuple
    transport: str
    variant: str = ""
    version: str = ""

    def as_dict(self) -> dict:
        """The JSON-able key (hosts as lists)."""
        d = dataclasses.asdict(self)
        d["hosts"] = [[h, int(n)] for h, n in self.hosts]
        return d

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the key's canonical JSON (the file name's part)."""
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The outcome of :func:`calibrate`.

    Attributes:
        min_torus_bytes: the crossover (bytes; :data:`NEVER`: always flat).
        ratios: {size in bytes: median over rounds of torus / flat time} for every measured size.
        rounds, calls: as measured. ``seconds``: wall time the calibration took on this rank.
    """

    min_torus_bytes: int
    ratios: dict
    rounds: int
    calls: int
    seconds: float


def cache_path(directory: str, key: CrossoverKey) -> str:
    """``<directory>/crossover-<key digest>.json``."""
    return os.path.join(os.path.expanduser(directory), f"crossover-{key.digest()}.json")


def _ignore(path: str, why: str) -> None:
    warnings.warn(f"horovod_torus: ignoring the crossover cache {path} ({why}); measuring again "
                  f"(delete the file, or set HOROVOD_TORUS_CACHE_DIR to another directory)",
                  CrossoverCacheWarning, stacklevel=3)


def read_cache(directory: str | None, key: CrossoverKey) -> int | None:
    """The cached ``min_torus_bytes`` for ``key``, or None: no directory, no file, or a file that is ignored
    with a :class:`CrossoverCacheWarning` (unreadable, not JSON, another format or key, a value that is not
    an integer >= 0). Never raises for the file's content."""
    if not directory:
        return None
    path = cache_path(directory, key)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _ignore(path, f"unreadable: {exc}")
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        _ignore(path, f"format {doc.get('format') if isinstance(doc, dict) else None!r}, expected {FORMAT}")
        return None
    if doc.get("key") != key.as_dict():
        _ignore(path, "written for another key")
        return None
    value = doc.get("min_torus_bytes")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        _ignore(path, f"min_torus_bytes={value!r} is not an integer >= 0")
        return None
    return value


def write_cache(directory: str | None, key: CrossoverKey, calibration: Calibration) -> str | None:
    """Write ``calibration`` for ``key`` atomically; returns the path, or None (no directory, or an OSError,
    reported as a :class:`CrossoverCacheWarning`: a cache that cannot be written costs a calibration at
    the next start, nothing else)."""
    if not directory:
        return None
    path = cache_path(directory, key)
    doc = {"format": FORMAT, "key": key.as_dict(), "min_torus_bytes": int(calibration.min_torus_bytes),
           "ratios": {str(k): round(float(v), 4) for k, v in calibration.ratios.items()},
           "rounds": calibration.rounds, "calls": calibration.calls, "seconds": round(calibration.seconds, 3),
           "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        warnings.warn(f"horovod_torus: could not write the crossover cache {path} ({exc}); the next start "
                      f"measures again (set HOROVOD_TORUS_CACHE_DIR to a writable directory)",
                      CrossoverCacheWarning, stacklevel=2)
        return None
    return path


def decide(ratios: dict, margin: float = MARGIN) -> int:
    """The crossover from {size: torus/flat ratio}: the smallest size from which every larger measured
    size has a ratio <= ``margin``; :data:`NEVER` when the largest size's ratio is above it."""
    crossover = NEVER
    for size in sorted(ratios, reverse=True):
        if not ratios[size] <= margin:  # NaN counts as a loss
            break
        crossover = size
    return crossover


def calibrate(measure: Callable, agree_max: Callable, sizes=DEFAULT_SIZES, rounds: int = ROUNDS,
              calls: int = CALLS, margin: float = MARGIN) -> Calibration:
    """Measure flat against torus and return the agreed :class:`Calibration`. Collective: every rank calls
    it with the same arguments.

    Per size, from the largest down: round r times both algorithms (``flat`` first in even rounds,
    ``torus`` first in odd ones; one untimed call each in round 0), ``calls`` timed calls each below
    :data:`LARGE_BYTES` and one from it; each rank's medians are reduced with ``agree_max`` and the round's
    ratio is torus / flat. The rounds stop once more than half of ``rounds`` fall on one side of
    ``margin`` (the median is then decided), else after ``rounds``; the size's ratio is the median. The
    sizes stop at the first the torus loses, after the :func:`midpoint` between it and the smallest size
    the torus won (when there is one): that size is measured the same way.

    Args:
        measure: ``measure(nbytes, algorithm, calls, warmup) -> list of seconds``: ``calls`` timed calls of
            the transport's all-reduce of a buffer of ``nbytes`` with ``algorithm`` ``"flat"`` or
            ``"torus"`` after ``warmup`` untimed ones (collective).
        agree_max: ``agree_max(float64 array) -> array``: the element-wise maximum over the ranks
            (collective).
        sizes: buffer sizes in bytes (any order).
        rounds, calls: as :data:`ROUNDS`, :data:`CALLS`. ``margin``: as :data:`MARGIN`.

    Raises:
        ValueError: no sizes, rounds or calls < 1.
    """
    if not sizes or rounds < 1 or calls < 1:
        raise ValueError(f"calibrate needs sizes (got {list(sizes)}), rounds >= 1 (got {rounds}) and calls >= 1 "
                         f"(got {calls})")
    start = time.perf_counter()

    def ratio_at(nbytes: int) -> float:
        count = calls if nbytes < LARGE_BYTES else 1
        per_round = []
        for r in range(rounds):
            local = np.empty(2, np.float64)  # (flat, torus): this rank's medians
            for algorithm in (("flat", "torus") if r % 2 == 0 else ("torus", "flat")):
                local[("flat", "torus").index(algorithm)] = statistics.median(
                    measure(nbytes, algorithm, count, 1 if r == 0 else 0))
            flat, torus = np.asarray(agree_max(local), np.float64)
            per_round.append(float(torus / flat) if flat > 0 else float("nan"))
            wins = sum(x <= margin for x in per_round)
            if max(wins, len(per_round) - wins) > rounds // 2:
                break
        return float(statistics.median(per_round))

    ratios: dict = {}
    won = None  # the smallest size the torus won so far
    for nbytes in sorted(set(int(s) for s in sizes), reverse=True):
        ratios[nbytes] = ratio_at(nbytes)
        if not ratios[nbytes] <= margin:
            between = midpoint(nbytes, won)
            if between is not None:  # the crossover lies between: one more size halves the gap
                ratios[between] = ratio_at(between)
            break
        won = nbytes
    return Calibration(min_torus_bytes=decide(ratios, margin), ratios=ratios, rounds=rounds, calls=calls,
                       seconds=time.perf_counter() - start)


def midpoint(lost: int, won: int | None) -> int | None:
    """The size :func:`calibrate` measures between a size the torus ``lost`` and the next larger one it
    ``won`` (bytes): their geometric mean, a multiple of 4 bytes (one float32), or None when there is no
    larger win or no such size strictly between them (e.g. 8 MiB between 4 and 16 MiB)."""
    if won is None:
        return None
    mid = int(round((lost * won) ** 0.5 / 4)) * 4
    return mid if lost < mid < won else None


def resolve(key: CrossoverKey, *, rank: int, cache_dir: str | None, broadcast: Callable,
            run_calibration: Callable[[], Calibration]) -> tuple[int, str]:
    """The agreed ``min_torus_bytes`` for ``key``: rank 0's cache file, else a calibration. Collective.

    Args:
        key: the job's :class:`CrossoverKey` (only rank 0's is used).
        rank: this rank. ``cache_dir``: the cache directory (only rank 0's is used; None: no cache).
        broadcast: ``broadcast(obj) -> rank 0's obj`` (collective).
        run_calibration: runs :func:`calibrate` with the transport's callbacks (collective).

    Returns:
        (min_torus_bytes, source): source ``"cache"`` or ``"measured"``.
    """
    found = read_cache(cache_dir, key) if rank == 0 else None
    found = broadcast(found)
    if found is not None:
        return int(found), "cache"
    calibration = run_calibration()
    if rank == 0:
        write_cache(cache_dir, key, calibration)
    return int(calibration.min_torus_bytes), "measured"


def show(directory: str) -> list[dict]:
    """The cache files in ``directory`` (parsed JSON, each with its ``path``), oldest first; files that are
    not valid JSON are listed with an ``error``."""
    directory = os.path.expanduser(directory)
    out = []
    names = sorted(n for n in os.listdir(directory) if n.startswith("crossover-") and n.endswith(".json")) \
        if os.path.isdir(directory) else []
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            out.append({"path": path, **(doc if isinstance(doc, dict) else {"error": "not a JSON object"})})
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            out.append({"path": path, "error": str(exc)})
    return sorted(out, key=lambda d: str(d.get("utc", "")))
