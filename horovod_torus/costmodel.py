"""Alpha-beta (Hockney) cost model of all-reduce algorithms, the grid planner, and calibration.

Notation: p ranks, n bytes per rank, alpha (s per message), beta (s per byte), gamma (s per byte
reduced). Textbook costs (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009; Mikami et al.
2018, arXiv 1811.05233, section 3.2):

==========================  =================================================================
ring                        2(p-1) a + 2(p-1)/p n b + (p-1)/p n g
recursive halving-doubling  2 lg q a + 2(q-1)/q n b + (q-1)/q n g        (q = 2^floor(lg p); the
                            r = p - q extra ranks fold into a neighbour: + 3 a + 2 n b + n/2 g)
hierarchical                local reduce 2(L-1) a_i + 2(L-1)/L n b_i + (L-1)/L n g, ring over the
                            N nodes 2(N-1) a_e + 2(N-1)/N n b_e + (N-1)/N n g, local broadcast
                            2(L-1) a_i + 2(L-1)/L n b_i (reduce/broadcast = scatter + gather rings)
2D torus X x Y              2(X-1) a_h + 2(X-1)/X n b_h  +  2(Y-1) a_v + 2(Y-1)/(XY) n b_v
                            + (XY-1)/(XY) n g
==========================  =================================================================

On a cluster (:class:`Cluster`: N nodes of L ranks, rank r on node r // L) each ring step or
halving-doubling exchange costs ``max`` over the links it uses at once: a message between two ranks of a
node costs the intra-node link (alpha_i, 1/B_i, not shared); a message that leaves a node costs the
inter-node alpha_e and shares the node's injection bandwidth B_e with every other message leaving that
node in the same step (k concurrent flows: beta = k / B_e). So the flat ring pays inter-node alpha on all
2(p-1) steps, and the torus' X concurrent column rings share their node's network bandwidth.

A pairwise exchange (two ranks on different nodes sending to each other in the same step: every
inter-node step of halving-doubling, a 2-rank ring) runs at ``Cluster.exchange_efficiency`` of the link
bandwidth in each direction: 1.0 on a full-duplex fabric (the default and every preset); fitted on the
emulated cluster, where Open MPI's exchanges ran at about 0.6 of the rate of its ring steps
(:mod:`tools.cluster.results`). Halving-doubling follows Rabenseifner's algorithm as MPICH and Open
MPI implement it (``allreduce_intra_redscat_allgather``): the distance doubles (partner r xor 1, 2, 4, ...)
while the vector halves, so the largest exchange (n/2) is with the nearest rank, inside a node when ranks
are placed node by node (measured with NIC counters on 4 nodes x 2, rails: 0.75 n left each NIC, as the
torus).

A node may have several NICs (``Cluster.nics`` = K, each B_e / K; rank r uses NIC (r mod L) mod K, as a
rail-optimised cluster where NIC k of every node is on rail k): then the flows of a step share the NIC
they leave by and the NIC they arrive at (k flows on one NIC in either direction: beta = k K / B_e). With
K = L the torus' column rings run on separate rails in parallel, while a flat ring's one flow per node
boundary gets a single NIC: bandwidth terms 2(N-1)/N (n/L) against 2(p-1)/p n, e.g. 0.43 for 4 nodes x 2.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from horovod_torus.topology import TorusTopology

__all__ = ["Link", "Cluster", "ALGORITHMS", "ring_time", "halving_doubling_time", "hierarchical_time",
           "torus_time", "cluster_ring_time", "cluster_halving_doubling_time", "cluster_hierarchical_time",
           "cluster_torus_time", "torus_grids", "predict", "Prediction", "fit_alpha_beta", "calibrate",
           "model_coefficients", "PRESETS"]

ALGORITHMS = ("ring", "halving-doubling", "hierarchical", "torus")


@dataclasses.dataclass(frozen=True)
class Link:
    """A link class. alpha: seconds per message (latency); bandwidth: bytes per second (> 0)."""

    alpha: float
    bandwidth: float

    def __post_init__(self):
        if not self.alpha >= 0:
            raise ValueError(f"link latency alpha={self.alpha} s must be >= 0")
        if not self.bandwidth > 0:
            raise ValueError(f"link bandwidth {self.bandwidth} B/s must be > 0")

    @property
    def beta(self) -> float:
        """Seconds per byte, 1 / bandwidth."""
        return 1.0 / self.bandwidth


@dataclasses.dataclass(frozen=True)
class Cluster:
    """N nodes x L ranks per node; rank r lives on node r // L.

    Attributes:
        nodes: N >= 1.
        ranks_per_node: L >= 1 (e.g. GPUs per node).
        intra: the link between two ranks of one node (per pair, not shared).
        inter: a node's network: alpha per message, bandwidth = the node's injection bandwidth (all NICs),
            shared by the messages that leave the node at the same time.
        gamma: seconds per byte reduced (0 ignores reduction cost).
        name: a label.
        nics: NICs per node K >= 1, each with inter.bandwidth / K; local rank l uses NIC l mod K
            (K = ranks_per_node: one NIC per rank, rail-optimised). 1: one NIC shared by the node.
        exchange_efficiency: in (0, 1]: the fraction of the inter-node bandwidth each direction of a
            pairwise exchange gets (1.0: full duplex; see the module docstring).
    """

    nodes: int
    ranks_per_node: int
    intra: Link
    inter: Link
    gamma: float = 0.0
    name: str = "custom"
    nics: int = 1
    exchange_efficiency: float = 1.0

    def __post_init__(self):
        for f in ("nodes", "ranks_per_node", "nics"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"cluster {f}={v!r} must be a positive integer")
        if not self.gamma >= 0:
            raise ValueError(f"gamma={self.gamma} s/B must be >= 0")
        if not 0 < self.exchange_efficiency <= 1:
            raise ValueError(f"exchange_efficiency={self.exchange_efficiency} must be in (0, 1] (1: full duplex)")

    @property
    def size(self) -> int:
        """p = nodes * ranks_per_node."""
        return self.nodes * self.ranks_per_node

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def nic(self, rank: int) -> int:
        """The NIC (rail) that ``rank``'s inter-node messages use: local rank mod nics."""
        return (rank % self.ranks_per_node) % self.nics


# ------------------------------------------------------------------ textbook formulas (one link class)
def _check(p, n):
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"number of ranks p={p!r} must be a positive integer")
    if n < 0:
        raise ValueError(f"message size n={n} bytes must be >= 0")


def ring_time(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Ring all-reduce (reduce-scatter + all-gather rings): 2(p-1)a + 2(p-1)/p n b + (p-1)/p n g (s)."""
    _check(p, n)
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def halving_doubling_time(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Rabenseifner's recursive halving (reduce-scatter) + doubling (all-gather), seconds.

    p = 2^k: 2k a + 2(p-1)/p n b + (p-1)/p n g. Otherwise (q = 2^floor(lg p)) the p - q extra ranks fold
    into a neighbour first, as Open MPI and MPICH do: a half-vector exchange, the reduced half sent on, and
    the full result returned at the end: + 3 a + 2 n b + n/2 g on top of the q-rank cost.
    """
    _check(p, n)
    q = 1 << (p.bit_length() - 1)
    t = 2 * math.log2(q) * alpha + 2 * (q - 1) / q * n * beta + (q - 1) / q * n * gamma
    if q != p:
        t += 3 * alpha + 2 * n * beta + n / 2 * gamma
    return t


def hierarchical_time(nodes: int, local: int, n: float, intra: Link, inter: Link, gamma: float = 0.0) -> float:
    """Node-local reduce + all-reduce among one rank per node (ring) + node-local broadcast, seconds."""
    _check(nodes * local, n)
    li = 2 * (local - 1) * intra.alpha + 2 * (local - 1) / local * n * intra.beta
    reduce_local = li + (local - 1) / local * n * gamma
    across = ring_time(nodes, n, inter.alpha, inter.beta, gamma)
    return reduce_local + across + li


def torus_time(x: int, y: int, n: float, alpha_h: float, beta_h: float, alpha_v: float, beta_v: float,
               gamma: float = 0.0) -> float:
    """2D-torus all-reduce (paper, section 3.2), seconds.

    Row reduce-scatter + all-gather: 2(X-1) a_h + 2(X-1)/X n b_h; column all-reduce on n/X:
    2(Y-1) a_v + 2(Y-1)/(XY) n b_v; reduction (XY-1)/(XY) n g.
    """
    _check(x * y, n)
    p = x * y
    return (2 * (x - 1) * alpha_h + 2 * (x - 1) / x * n * beta_h
            + 2 * (y - 1) * alpha_v + 2 * (y - 1) / p * n * beta_v + (p - 1) / p * n * gamma)


# ------------------------------------------------------------------ on a cluster
def _step_link(cluster: Cluster, pairs) -> tuple[float, float]:
    """(alpha, beta) of one communication step in which every (src, dst) of ``pairs`` sends at once.

    Inter-node flows share the NIC they leave by and the NIC they arrive at (full duplex): beta is the
    most flows on one NIC in one direction times the NIC's 1 / (B_e / nics), divided by
    ``cluster.exchange_efficiency`` when any inter-node flow's reverse is in the same step (an exchange;
    the patterns modelled here are all-exchange or exchange-free, so the step is charged as a whole).
    """
    leaving: dict[tuple[int, int], int] = {}
    arriving: dict[tuple[int, int], int] = {}
    local = False
    pairs = list(pairs)
    present = set(pairs)
    exchange = False
    for s, d in pairs:
        ns, nd = cluster.node(s), cluster.node(d)
        if ns == nd:
            local = True
        else:
            leaving[ns, cluster.nic(s)] = leaving.get((ns, cluster.nic(s)), 0) + 1
            arriving[nd, cluster.nic(d)] = arriving.get((nd, cluster.nic(d)), 0) + 1
            exchange = exchange or (d, s) in present
    alpha, beta = 0.0, 0.0
    if local:
        alpha, beta = cluster.intra.alpha, cluster.intra.beta
    if leaving:
        flows = max(max(leaving.values()), max(arriving.values()))
        alpha = max(alpha, cluster.inter.alpha)
        efficiency = cluster.exchange_efficiency if exchange else 1.0
        beta = max(beta, flows * cluster.nics * cluster.inter.beta / efficiency)
    return alpha, beta


def _rings_link(cluster: Cluster, rings) -> tuple[float, float]:
    """(alpha, beta) of a step of the concurrent rings (each ring: ranks in ring order)."""
    pairs = [(r[i], r[(i + 1) % len(r)]) for r in rings if len(r) > 1 for i in range(len(r))]
    return _step_link(cluster, pairs)


def cluster_ring_time(cluster: Cluster, n: float) -> float:
    """Flat ring over all p ranks in rank order (Horovod/NCCL/MPI ring), seconds."""
    p = cluster.size
    if p == 1:
        return 0.0
    a, b = _rings_link(cluster, [list(range(p))])
    return ring_time(p, n, a, b, cluster.gamma)


def _halving_doubling_groups(cluster: Cluster, groups, n: float) -> float:
    """Concurrent halving-doublings, one per group of ranks (each in its own order), seconds.

    Rabenseifner's algorithm as Open MPI (``ompi_coll_base_allreduce_intra_redscat_allgather``) and MPICH
    run it, for a group of g ranks, q = 2^floor(lg g), r = g - q:

    * fold (r > 0): among the first 2r ranks, neighbours i and i+1 (i even) exchange half their vectors
      and reduce, the odd one sends its reduced half to the even one (alpha + n/2 beta twice, n/2 gamma);
      the odd ones sit out and receive the full result at the end (alpha + n beta). The q remaining ranks
      are renumbered (the evens of the first 2r, then the rest in order);
    * step k (distance d = 2^k = 1, 2, ..., q/2 in the renumbering) exchanges n / 2^(k+1) bytes with the
      partner at index i xor d (reduce-scatter by vector halving); the all-gather mirrors it.
    """
    groups = [list(g) for g in groups if len(g) > 1]
    if not groups:
        return 0.0
    g = len(groups[0])
    _check(g, n)
    q = 1 << (g.bit_length() - 1)
    r = g - q
    t = 0.0
    if r:
        a, b = _step_link(cluster, [(grp[i], grp[i ^ 1]) for grp in groups for i in range(2 * r)])
        t += a + n / 2 * b
        a, b = _step_link(cluster, [(grp[i + 1], grp[i]) for grp in groups for i in range(0, 2 * r, 2)])
        t += a + n / 2 * b + n / 2 * cluster.gamma
        a, b = _step_link(cluster, [(grp[i], grp[i + 1]) for grp in groups for i in range(0, 2 * r, 2)])
        t += a + n * b  # the full result back to the ranks that sat out
    active = [grp[0:2 * r:2] + grp[2 * r:] for grp in groups]
    d = 1
    while d < q:
        a, b = _step_link(cluster, [(act[i], act[i ^ d]) for act in active for i in range(q)])
        t += 2 * (a + n / (2 * d) * b)  # one halving step (n / 2d bytes) and its mirror doubling step
        d *= 2
    return t + (q - 1) / q * n * cluster.gamma


def cluster_halving_doubling_time(cluster: Cluster, n: float) -> float:
    """Recursive halving-doubling over all p ranks (distance 1, 2, 4, ... with n/2, n/4, ... bytes), s."""
    _check(cluster.size, n)
    return _halving_doubling_groups(cluster, [list(range(cluster.size))], n)


def cluster_hierarchical_time(cluster: Cluster, n: float) -> float:
    """Node-local reduce (intra), ring among one rank per node (inter, one flow per node), local bcast."""
    L, N = cluster.ranks_per_node, cluster.nodes
    one_nic = Link(cluster.inter.alpha, cluster.inter.bandwidth / cluster.nics)  # one flow per node: one NIC
    return hierarchical_time(N, L, n, cluster.intra, one_nic, cluster.gamma)


def cluster_torus_time(cluster: Cluster, grid: TorusTopology | str, n: float, column: str = "ring") -> float:
    """2D torus on ``grid`` (X*Y = p, rows of X consecutive ranks), seconds.

    ``column``: the column all-reduce's algorithm, ``"ring"`` (the torus' own rings, NCCL, Gloo) or
    ``"halving-doubling"`` (an MPI library's MPI_Allreduce on the column communicator, e.g. Horovod's MPI
    controller under Open MPI's default). The reduction cost is (XY-1)/(XY) n gamma in both cases (the
    extra half-vector reduction of a halving-doubling fold, Y not a power of two, is left out).
    """
    grid = TorusTopology.parse(grid) if isinstance(grid, str) else grid
    grid.check_size(cluster.size)
    if column not in ("ring", "halving-doubling"):
        raise ValueError(f"column={column!r}: the torus' column all-reduce is 'ring' or 'halving-doubling'")
    a_h, b_h = _rings_link(cluster, grid.rows()) if grid.x > 1 else (0.0, 0.0)
    if column == "ring" or grid.y == 1:
        a_v, b_v = _rings_link(cluster, grid.columns()) if grid.y > 1 else (0.0, 0.0)
        return torus_time(grid.x, grid.y, n, a_h, b_h, a_v, b_v, cluster.gamma)
    rows = torus_time(grid.x, 1, n, a_h, b_h, 0.0, 0.0, 0.0)
    shard = n / grid.x
    gamma = (grid.size - 1) / grid.size * n * cluster.gamma
    no_gamma = dataclasses.replace(cluster, gamma=0.0)
    return rows + _halving_doubling_groups(no_gamma, grid.columns(), shard) + gamma


def torus_grids(p: int) -> list[TorusTopology]:
    """Every X x Y grid with X*Y = p, X ascending."""
    return [TorusTopology(x, p // x) for x in range(1, p + 1) if p % x == 0]


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted all-reduce times of ``nbytes`` on a cluster (seconds).

    Attributes:
        nbytes: message size per rank.
        times: algorithm name -> seconds for ring, halving-doubling, hierarchical, torus (best grid).
        best_grid: the torus grid of least time (ties: the smaller X).
        natural_grid: the paper's mapping, a node per row (X = ranks per node), or None if L = 1.
        natural_time: its time (None when natural_grid is None).
        grid_times: every grid's time, X ascending.
        recommended: the algorithm of least time.
    """

    nbytes: float
    times: dict
    best_grid: TorusTopology
    natural_grid: TorusTopology | None
    natural_time: float | None
    grid_times: list
    recommended: str


def predict(cluster: Cluster, nbytes: float) -> Prediction:
    """Predict every algorithm's time for ``nbytes`` per rank and choose the torus grid and algorithm."""
    grid_times = [(g, cluster_torus_time(cluster, g, nbytes)) for g in torus_grids(cluster.size)]
    best_grid, best = min(grid_times, key=lambda gt: (gt[1], gt[0].x))
    times = {"ring": cluster_ring_time(cluster, nbytes),
             "halving-doubling": cluster_halving_doubling_time(cluster, nbytes),
             "hierarchical": cluster_hierarchical_time(cluster, nbytes),
             "torus": best}
    natural = None
    if 1 < cluster.ranks_per_node and cluster.nodes > 1:
        natural = TorusTopology(cluster.ranks_per_node, cluster.nodes)
    natural_time = dict((str(g), t) for g, t in grid_times)[str(natural)] if natural else None
    recommended = min(ALGORITHMS, key=lambda a: times[a])
    return Prediction(nbytes=nbytes, times=times, best_grid=best_grid, natural_grid=natural,
                      natural_time=natural_time, grid_times=grid_times, recommended=recommended)


# ------------------------------------------------------------------ calibration
def model_coefficients(strategy: str, world_size: int, grid: TorusTopology | str | None = None):
    """(A, B) with time = A * alpha + B * n * beta for a benchmark strategy on one link class.

    ring / mpi: A = 2(p-1), B = 2(p-1)/p. torus / mpi-torus on X x Y: A = 2(X-1) + 2(Y-1),
    B = 2(X-1)/X + 2(Y-1)/(XY). (The reduction cost gamma is folded into beta.)

    Raises:
        ValueError: an unknown strategy, p = 1 (nothing to fit), or a torus strategy without a grid.
    """
    p = world_size
    if p < 2:
        raise ValueError(f"a benchmark on {p} rank(s) moves no data: calibrate from a run with >= 2 ranks")
    if strategy in ("ring", "mpi"):
        return 2.0 * (p - 1), 2.0 * (p - 1) / p
    if strategy in ("torus", "mpi-torus"):
        if grid is None:
            raise ValueError(f"strategy {strategy} needs the grid of the run to calibrate")
        g = TorusTopology.parse(grid) if isinstance(grid, str) else grid
        g.check_size(p)
        return 2.0 * (g.x - 1) + 2.0 * (g.y - 1), 2.0 * (g.x - 1) / g.x + 2.0 * (g.y - 1) / p
    raise ValueError(f"cannot calibrate from strategy {strategy!r}: use ring, mpi, torus or mpi-torus")


def fit_alpha_beta(sizes, seconds, a_coef: float, b_coef: float) -> tuple[Link, float]:
    """Least-squares fit of t_i = A alpha + B n_i beta, weighted by 1/t_i (relative error).

    Args:
        sizes: message bytes n_i; seconds: measured times t_i (> 0); a_coef, b_coef: A and B of
            :func:`model_coefficients`.

    Returns:
        (Link(alpha, 1/beta), rms relative residual).

    Raises:
        ValueError: fewer than 2 distinct sizes, a non-positive time, or a fit with beta <= 0.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or len(np.unique(n)) < 2:
        raise ValueError("calibration needs times for at least 2 distinct message sizes")
    if np.any(t <= 0):
        raise ValueError("calibration times must be positive")
    design = np.stack([np.full_like(n, a_coef), b_coef * n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if not beta > 0:
        raise ValueError(f"fitted beta={beta} s/B is not positive: the timings do not grow with size")
    alpha = max(alpha, 0.0)
    pred = a_coef * alpha + b_coef * n * beta
    rms = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    return Link(alpha=float(alpha), bandwidth=float(1.0 / beta)), rms


def calibrate(document: dict, strategy: str, min_bytes: int = 0) -> tuple[Link, float]:
    """Fit alpha and beta from a benchmark JSON (``python -m horovod_torus.bench --json``).

    Uses the rows of ``strategy`` with size >= min_bytes and the avg time over ranks.

    Raises:
        ValueError: no rows for the strategy (the message lists those present), or see fit_alpha_beta.
    """
    rows = [r for r in document["rows"] if r["strategy"] == strategy and r["size_bytes"] >= min_bytes]
    if not rows:
        present = sorted({r["strategy"] for r in document["rows"]})
        raise ValueError(f"the benchmark JSON has no rows for strategy {strategy!r} (it has {present})")
    a, b = model_coefficients(strategy, int(document["world_size"]), document.get("grid"))
    return fit_alpha_beta([r["size_bytes"] for r in rows], [r["time_us"]["avg"] * 1e-6 for r in rows], a, b)


# ------------------------------------------------------------------ presets
#: ABCI Compute Node (V): 4 V100 SXM2 with NVLink2 (2 links x 25 GB/s per GPU pair), 2 InfiniBand EDR
#: HCAs (2 x 12.5 GB/s) per node. The bandwidths are the nominal link rates; the latencies (3 us intra,
#: 6 us inter per message) and gamma (3 bytes of HBM2 traffic at 900 GB/s per byte reduced) are
#: assumptions: calibrate them on the real machine (``python -m horovod_torus.plan --calibrate``).
PRESETS = {
    "abci": Cluster(nodes=544, ranks_per_node=4, intra=Link(alpha=3e-6, bandwidth=50e9),
                    inter=Link(alpha=6e-6, bandwidth=25e9), gamma=3 / 900e9, name="abci"),
    # ABCI 3.0 Compute Node (H): 8 H100 SXM5 with NVLink 4 through NVSwitch (450 GB/s per direction per
    # GPU; 100 GB/s per pair assumed for ring traffic), 8 InfiniBand NDR200 HCAs (8 x 25 GB/s = 200 GB/s
    # per node). Nominal rates; latencies and gamma (3 bytes at 3.35 TB/s HBM3) are assumptions.
    "abci3": Cluster(nodes=766, ranks_per_node=8, intra=Link(alpha=3e-6, bandwidth=100e9),
                     inter=Link(alpha=5e-6, bandwidth=200e9), gamma=3 / 3350e9, name="abci3"),
}
