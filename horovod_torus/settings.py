"""``TorusSettings``: every setting of the torus, resolved once, agreed across ranks, passed explicitly.

Each setting comes from, in this order: the argument (``init(...)``, ``TorusComm.create(...)``), else its
environment variable, else its default. :meth:`TorusSettings.resolve` is the only place of the package
that reads these variables; no module writes one for another to read (``init`` still exports Horovod's
own stall variables, which Horovod reads only from the environment). The configuration reference
(``docs/configuration.md``) lists every argument and variable.

- ``grid``: ``HOROVOD_TORUS_GRID`` (``XxY``); default: a node's ranks in one row, else the most square grid;
- ``transport``: ``HOROVOD_TORUS_TRANSPORT`` (``HOROVOD_TORUS_BACKEND``: deprecated alias); default ``auto``;
- ``min_torus_bytes``: ``HOROVOD_TORUS_MIN_BYTES``; default ``auto`` (calibrated, :mod:`horovod_torus.crossover`);
- ``cache_dir``: ``HOROVOD_TORUS_CACHE_DIR``; default ``~/.cache/horovod_torus`` (``off``: no cache file);
- ``column_algorithm``: ``HOROVOD_TORUS_COLUMN_ALGORITHM`` (``HOROVOD_TORUS_COLUMN_RING``: deprecated alias,
  ``1`` = ``ring``, ``0`` = ``mpi``); default ``auto``;
- ``stall_seconds``: ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`` (Horovod's own); default 300 s (0 or inf: never;
  NaN and negative numbers raise).
"""
from __future__ import annotations

import dataclasses
import math
import os
import warnings

from horovod_torus.topology import TorusTopology

__all__ = ["TorusSettings", "TRANSPORTS", "TRANSPORT_CHOICES", "ENVIRONMENT", "DEFAULT_STALL_SECONDS",
           "COLUMN_ALGORITHMS", "COLUMN_CHOICES", "DEFAULT_CACHE_DIR"]

#: The transports a torus can move data with (``"auto"`` resolves to one of them at ``init``).
TRANSPORTS = ("horovod", "mpi")
TRANSPORT_CHOICES = ("auto",) + TRANSPORTS

#: The MPI transport's column all-reduce algorithms (phase 2; :mod:`horovod_torus.columns`); ``"auto"``
#: picks one per call from the cost model.
COLUMN_ALGORITHMS = ("mpi", "ring", "halving-doubling", "tree")
COLUMN_CHOICES = ("auto",) + COLUMN_ALGORITHMS

#: Seconds a collective may wait for the other ranks before the job is stopped (Horovod's stall shutdown,
#: the MPI transport's deadline).
DEFAULT_STALL_SECONDS = 300.0

#: Where the calibrated crossover is cached (``~`` expanded when used; ``off`` turns the cache off).
DEFAULT_CACHE_DIR = "~/.cache/horovod_torus"

#: setting -> the environment variables read for it, the first set one wins.
ENVIRONMENT = {
    "grid": ("HOROVOD_TORUS_GRID",),
    "transport": ("HOROVOD_TORUS_TRANSPORT", "HOROVOD_TORUS_BACKEND"),
    "min_torus_bytes": ("HOROVOD_TORUS_MIN_BYTES",),
    "column_algorithm": ("HOROVOD_TORUS_COLUMN_ALGORITHM", "HOROVOD_TORUS_COLUMN_RING"),
    "stall_seconds": ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",),
    "cache_dir": ("HOROVOD_TORUS_CACHE_DIR",),
}

#: Deprecated variables -> the variable to use instead (still read, with a DeprecationWarning).
DEPRECATED = {"HOROVOD_TORUS_BACKEND": "HOROVOD_TORUS_TRANSPORT",
              "HOROVOD_TORUS_COLUMN_RING": "HOROVOD_TORUS_COLUMN_ALGORITHM (1: ring, 0: mpi)"}

#: The deprecated ``column_ring`` values (argument or HOROVOD_TORUS_COLUMN_RING) -> the column algorithm.
_COLUMN_RING = {"auto": "auto", "1": "ring", "0": "mpi", True: "ring", False: "mpi"}


@dataclasses.dataclass(frozen=True)
class TorusSettings:
    """The torus settings of one job (a frozen value; equal on every rank after ``agree``).

    Attributes:
        grid: the X x Y TorusTopology (X*Y = world size).
        transport: ``"auto"``, ``"horovod"`` (Horovod ops on the row/column process sets) or ``"mpi"``
            (mpi4py row/column communicators); ``auto`` is resolved at ``init`` (needs Horovod).
        min_torus_bytes: fused buffers below this many bytes take the flat all-reduce; ``"auto"`` (the
            default): calibrated at ``init`` / ``TorusComm.create``, or read from the cache
            (:mod:`horovod_torus.crossover`); 0: always the three phases.
        column_algorithm: phase 2 on the MPI transport, one of :data:`COLUMN_CHOICES`: ``"mpi"``
            (``MPI_Allreduce``), ``"ring"``, ``"halving-doubling"``, ``"tree"`` (non-blocking
            point-to-point, :mod:`horovod_torus.columns`) or ``"auto"`` (one per call from the cost model).
        stall_seconds: seconds a collective may wait for the other ranks before the job stops: a finite
            number > 0, or None (forever: given as 0 or inf).
        cache_dir: the directory of the crossover cache files (None: no cache). Only rank 0's value is
            used (rank 0 reads and writes the file), so it is not compared across ranks.
    """

    grid: TorusTopology
    transport: str = "auto"
    min_torus_bytes: int | str = "auto"
    column_algorithm: str = "auto"
    stall_seconds: float | None = DEFAULT_STALL_SECONDS
    cache_dir: str | None = DEFAULT_CACHE_DIR

    @classmethod
    def resolve(cls, *, size: int, local_size: int | None = None, grid=None, transport=None,
                min_torus_bytes=None, column_algorithm=None, stall_seconds=None, cache_dir=None, environ=None,
                fields=None, column_ring=None, names=None) -> "TorusSettings":
        """The settings of a world of ``size`` ranks (``local_size`` per node): each argument, else its
        variable (:data:`ENVIRONMENT`), else its default. Local: no communication.

        Args:
            grid: a TorusTopology, ``"XxY"`` or None.
            transport: one of :data:`TRANSPORT_CHOICES` or None.
            min_torus_bytes: an int >= 0 (bytes), ``"auto"`` or None.
            column_algorithm: one of :data:`COLUMN_CHOICES` or None.
            stall_seconds: seconds > 0, 0 or inf (never), or None; NaN and negative numbers raise.
            cache_dir: a directory, ``"off"`` (no cache), or None.
            environ: the environment (``os.environ``).
            fields: the settings this caller uses (default: all); the others keep their defaults and
                their variables are not read (the training app's early grid check, the calibration
                CLI's cache directory, ``init``'s stall deadline before an elastic Horovod starts). ``init``
                and ``TorusComm.create`` resolve all, so both reject the same malformed values.
            column_ring: deprecated alias of ``column_algorithm`` (DeprecationWarning): True = ``"ring"``,
                False = ``"mpi"``, ``"auto"``; an error when both are given.
            names: the caller's name of an argument where it differs from the setting's, for the
                messages (``init``: ``{"stall_seconds": "stall_shutdown_seconds"}``).

        Raises:
            ValueError: a malformed value, naming the argument or variable it came from and the fix; a
                grid whose X*Y is not ``size``.
            TypeError: a grid that is neither a TorusTopology, a string nor None.
        """
        environ = os.environ if environ is None else environ
        if fields is not None:
            environ = {k: v for k, v in environ.items()
                       if not any(k in ENVIRONMENT[f] for f in set(ENVIRONMENT) - set(fields))}

        def pick(setting, argument):
            return _pick(setting, argument, environ, names or {})

        source, value = pick("grid", grid)
        the_grid = _grid(source, value) or TorusTopology.from_world(size, local_size)
        try:
            the_grid.check_size(size)
        except ValueError as exc:
            raise ValueError(f"{source}={value!r}: {exc}" if value is not None else str(exc)) from None
        return cls(grid=the_grid, transport=_transport(*pick("transport", transport)),
                   min_torus_bytes=_min_bytes(*pick("min_torus_bytes", min_torus_bytes)),
                   column_algorithm=_column_algorithm(*pick("column_algorithm",
                                                            _column_argument(column_algorithm, column_ring))),
                   stall_seconds=_stall(*pick("stall_seconds", stall_seconds)),
                   cache_dir=_cache_dir(*pick("cache_dir", cache_dir)))

    def agreement(self) -> dict:
        """The JSON-able dict the ranks compare (:func:`horovod_torus.agreement.agree`); ``cache_dir`` is
        not in it (only rank 0's is used)."""
        return {"grid": str(self.grid), "transport": self.transport, "min_torus_bytes": self.min_torus_bytes,
                "column_algorithm": self.column_algorithm,
                "stall_seconds": self.stall_seconds}


def _pick(setting: str, argument, environ, names):
    """(source, value): the argument (named as ``names`` says, else as the setting) when given, else the
    first set variable, else (setting, None)."""
    if argument is not None:
        return names.get(setting, setting), argument
    for name in ENVIRONMENT[setting]:
        text = str(environ.get(name, "")).strip()
        if text:
            if name in DEPRECATED:
                warnings.warn(f"{name} is deprecated: export {DEPRECATED[name]} instead", DeprecationWarning,
                              stacklevel=5)
            return name, text
    return setting, None


def _grid(source, value):
    if value is None or isinstance(value, TorusTopology):
        return value
    if isinstance(value, str):
        try:
            return TorusTopology.parse(value)
        except ValueError as exc:
            raise ValueError(f"{source}={value!r}: {exc}") from None
    raise TypeError(f"grid={value!r} must be a TorusTopology, an 'XxY' string or None (pass the communicator "
                    f"as comm=, the first positional parameter, as in horovod.tensorflow.init)")


def _transport(source, value):
    value = "auto" if value is None else value
    if value not in TRANSPORT_CHOICES:
        raise ValueError(f"{source}={value!r} is not a torus transport: choose one of "
                         f"{', '.join(TRANSPORT_CHOICES)}")
    return value


def _min_bytes(source, value):
    if value is None or value == "auto":
        return "auto"
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if number < 0 or isinstance(value, (bool, float)):
        raise ValueError(f"{source}={value!r} must be 'auto' or an integer number of bytes >= 0 (0: always "
                         f"the torus)")
    return number


def _column_argument(column_algorithm, column_ring):
    """The column algorithm argument, or the deprecated ``column_ring`` argument translated."""
    if column_ring is None:
        return column_algorithm
    warnings.warn("column_ring= is deprecated: pass column_algorithm='ring' (True) or 'mpi' (False)",
                  DeprecationWarning, stacklevel=4)
    key = column_ring.strip().lower() if isinstance(column_ring, str) else column_ring
    if key not in _COLUMN_RING:
        raise ValueError(f"column_ring={column_ring!r} must be one of auto, 1, 0 (or True/False/None); it is "
                         f"deprecated: pass column_algorithm= (one of {', '.join(COLUMN_CHOICES)})")
    if column_algorithm is not None and column_algorithm != _COLUMN_RING[key]:
        raise ValueError(f"column_ring={column_ring!r} and column_algorithm={column_algorithm!r} disagree: pass "
                         f"column_algorithm= only")
    return _COLUMN_RING[key]


def _column_algorithm(source, value):
    if value is None:
        return "auto"
    if source == "HOROVOD_TORUS_COLUMN_RING":
        key = value.strip().lower()
        if key not in _COLUMN_RING:
            raise ValueError(f"HOROVOD_TORUS_COLUMN_RING={value!r} must be one of auto, 1, 0 (deprecated: export "
                             f"HOROVOD_TORUS_COLUMN_ALGORITHM, one of {', '.join(COLUMN_CHOICES)})")
        return _COLUMN_RING[key]
    key = value.strip().lower() if isinstance(value, str) else value
    if key not in COLUMN_CHOICES:
        raise ValueError(f"{source}={value!r} is not a column algorithm: choose one of {', '.join(COLUMN_CHOICES)}")
    return key


def _stall(source, value):
    """Seconds > 0, or None for never (0 or inf: Horovod takes 0, the MPI transport a blocking wait). NaN is
    rejected here, where its source is known: it would pass ``< 0`` and then fail the ranks' comparison
    (NaN != NaN) as a bogus mismatch, and Horovod would get ``int(max(1, nan))`` = 1 s."""
    if value is None:
        return DEFAULT_STALL_SECONDS
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not seconds >= 0 or isinstance(value, bool):  # NaN fails every comparison
        raise ValueError(f"{source}={value!r} must be a number of seconds >= 0 (0: wait forever)")
    return None if seconds in (0.0, math.inf) else seconds


def _cache_dir(source, value):
    if value is None:
        return DEFAULT_CACHE_DIR
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise ValueError(f"{source}={value!r} must be a directory or 'off' (no crossover cache file)")
    text = str(value).strip()
    return None if text.lower() == "off" else text
