"""The logical 2D-torus grid: a pure value object (no TensorFlow, no Horovod, no MPI).

Source: Mikami et al., "ImageNet/ResNet-50 Training in 224 Seconds" (arXiv 1811.05233), section 3.2.
The N = X * Y ranks form a grid of Y rows ("horizontal" rings) with X ranks each. Rank ``r`` sits at
row ``r // X`` and column ``r % X``, so consecutive ranks (the GPUs of one node, when the launcher
places ranks by node) share a row and talk over the fast intra-node links.

Example::

    >>> g = TorusTopology(x=4, y=2)
    >>> g.coords(5), g.row_members(5), g.column_members(5)
    ((1, 1), (4, 5, 6, 7), (1, 5))
    >>> TorusTopology.from_world(size=8, local_size=4)
    TorusTopology(x=4, y=2)
"""
from __future__ import annotations

import dataclasses
import math
import re

__all__ = ["TorusTopology", "parse_grid"]

_GRID_RE = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*$")


@dataclasses.dataclass(frozen=True)
class TorusTopology:
    """An X x Y grid of ranks.

    Attributes:
        x: ranks per row (the reduce-scatter / all-gather ring), >= 1.
        y: rows, i.e. ranks per column (the all-reduce ring on 1/x of the data), >= 1.

    Raises:
        ValueError: a dimension that is not a positive integer (the message names it).
    """

    x: int
    y: int

    def __post_init__(self):
        for name in ("x", "y"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"torus grid dimension {name}={value!r} is invalid: both dimensions must be "
                    f"positive integers (e.g. TorusTopology(x=4, y=2) or HOROVOD_TORUS_GRID=4x2)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def parse(cls, text: str) -> "TorusTopology":
        """Parse ``"XxY"`` (e.g. ``"4x2"``: 4 ranks per row, 2 rows). Raises ValueError naming the text."""
        return cls(*parse_grid(text))

    @classmethod
    def from_world(cls, size: int, local_size: int | None = None) -> "TorusTopology":
        """The default grid for ``size`` ranks with ``local_size`` ranks per node.

        A node's ranks form one row (X = local_size) when local_size divides size and 1 < local_size
        < size; otherwise the most square factorisation X * Y = size with X >= Y (X = size for a prime).

        Raises:
            ValueError: size < 1, or local_size < 1.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"world size {size!r} is invalid: it must be a positive integer")
        if local_size is not None:
            if isinstance(local_size, bool) or not isinstance(local_size, int) or local_size < 1:
                raise ValueError(f"local_size {local_size!r} is invalid: it must be a positive integer")
            if 1 < local_size < size and size % local_size == 0:
                return cls(x=local_size, y=size // local_size)
        y = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
        return cls(x=size // y, y=y)

    @classmethod
    def grids(cls, size: int) -> list["TorusTopology"]:
        """Every grid of ``size`` ranks, X ascending: ``grids(4)`` is 1x4, 2x2, 4x1."""
        cls.from_world(size)  # ValueError for a size that is not a positive integer
        return [cls(x, size // x) for x in range(1, size + 1) if size % x == 0]

    def check_size(self, size: int, *, flag: str | None = None) -> "TorusTopology":
        """Return self if x * y == size, else raise ValueError naming the grid, the product, the size, the
        grids that fit and how to pass one: ``flag`` (a command-line option such as ``"--grid"``), or by
        default ``init``'s argument and the variable."""
        if self.size != size:
            fits = TorusTopology.from_world(size)
            how = f"{flag} {fits}" if flag else f'hvd.init(grid="{fits}") or HOROVOD_TORUS_GRID={fits}'
            raise ValueError(
                f"torus grid {self} has {self.x}x{self.y}={self.size} ranks but the world size is "
                f"{size}: choose X and Y with X*Y={size} ({', '.join(map(str, self.grids(size)))}; e.g. {how})"
                f", or launch {self.size} ranks")
        return self

    # ------------------------------------------------------------------ queries
    @property
    def size(self) -> int:
        """Total number of ranks, x * y."""
        return self.x * self.y

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside the torus grid {self} (ranks 0..{self.size - 1})")

    def coords(self, rank: int) -> tuple[int, int]:
        """(row, column) of ``rank``: (rank // x, rank % x)."""
        self._check_rank(rank)
        return divmod(rank, self.x)

    def row_members(self, rank: int) -> tuple[int, ...]:
        """The x ranks of ``rank``'s row, ascending."""
        row, _ = self.coords(rank)
        return tuple(range(row * self.x, (row + 1) * self.x))

    def column_members(self, rank: int) -> tuple[int, ...]:
        """The y ranks of ``rank``'s column, ascending."""
        _, col = self.coords(rank)
        return tuple(range(col, self.size, self.x))

    def rows(self) -> list[tuple[int, ...]]:
        """All y rows, in row order (the registration order of the row process sets)."""
        return [self.row_members(r * self.x) for r in range(self.y)]

    def columns(self) -> list[tuple[int, ...]]:
        """All x columns, in column order (the registration order of the column process sets)."""
        return [self.column_members(c) for c in range(self.x)]

    def steps(self) -> int:
        """Sequential ring steps: 2(X-1) + 2(Y-1) (paper, section 3.2), against 2(XY-1) for one ring."""
        return 2 * (self.x - 1) + 2 * (self.y - 1)

    def __str__(self) -> str:
        return f"{self.x}x{self.y}"


def parse_grid(text: str) -> tuple[int, int]:
    """``"4x2"`` -> (4, 2). Raises ValueError naming the text and the expected form."""
    m = _GRID_RE.match(str(text))
    if not m:
        raise ValueError(
            f"torus grid {text!r} is malformed: expected XxY with positive integers, e.g. '4x2' "
            f"(4 ranks per row, 2 rows)")
    return int(m.group(1)), int(m.group(2))
