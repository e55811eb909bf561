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

Trees and the per-call cost (issue 23):

==========================  =================================================================
double binary tree          2 floor(lg p) a + 2 n b + n g. On a cluster a chain inside each node and the
(NCCL 2.4+, flat)           trees over the N nodes: 2((L-1) a_i + floor(lg N) a_e) + 2n max(b_i, b_node)
                            + n g, b_node the node's injection bandwidth over its NICs
torus, tree column          rows as above + 2 floor(lg Y) a_v + 2 (n/X) b_v per rank (the X columns of a
                            node share its NICs: 2n b_e per node on a node-per-row grid)
torus, HD column            rows as above + Rabenseifner on n/X in every column at once
recursive doubling          (floor(lg p) + 2 [p != 2^k]) (a + n b): the latency-bound all-reduce of small
                            messages (the per-call check, Horovod's coordination)
per-call overhead           ops (call_s + cycle_s + coordination per cycle) + calls call_s, + the check's
                            transfer for a torus call (:func:`call_counts`, :func:`per_call_time`)
==========================  =================================================================

Sources for the tree: NCCL's tuning model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``): tree latency
``2 * ((nRanks/nNodes-1) * intraLat + log2i(nNodes) * interLat)``, algorithm bandwidth ``busBw * .5`` for a
tree against ``busBw * nRanks / (2(nRanks-1))`` for a ring (so 2n against 2(p-1)/p n); NVIDIA's NCCL 2.4
write-up (S. Jeaugey, "Massively Scale Your Deep Learning Training with NCCL 2.4", NVIDIA developer blog,
Feb 2019): two binary trees, each rank a leaf in one and interior in the other, each carrying half the
data, full bandwidth at logarithmic latency (up to 180x less than a ring at 24,576 GPUs). The ring's
latency here is bulk-synchronous (every one of its 2(p-1) steps waits for the step's slowest hop); NCCL
counts a pipelined ring's 2(N-1) inter-node hops only (:func:`nccl_ring_latency`).

Per-call cost: Horovod 0.28.1's background thread starts a cycle every ``HOROVOD_CYCLE_TIME`` (1 ms) and
in each runs one coordination step per process set (``RunLoopOnce`` over the process set table; the step
is a bitwise-AND all-reduce of the response cache's bits, ``CacheCoordinator::sync``), so a Horovod op
that waits for the previous one pays a cycle, and the torus over process sets pays its check and three
phases (four ops) with the global, row and column sets coordinating every cycle. The fixed cost of a call
is fitted from ONE row (:data:`FITTED_CALL_S`). The per-call check (one MAX all-reduce of 20 int64 words,
160 B, :data:`CHECK_BYTES`) is a latency-bound recursive doubling over the p ranks: on the paper's ABCI
cases 0.150 ms at 2,176 ranks (``abci-v1``) and 0.150 ms at 3,456 (``abci-v2``): 2,048 + a fold both
times, 13 steps of which 3 stay in a node (3.4 us) and 10 cross (14 us). These small CPU collectives are
charged the preset's NCCL per-step alpha; MPI over InfiniBand sends such a message in a few microseconds,
so these figures are upper bounds.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from horovod_torus.signature import FIELDS
from horovod_torus.topology import TorusTopology

__all__ = ["Link", "Cluster", "ALGORITHMS", "ring_time", "halving_doubling_time", "hierarchical_time",
           "torus_time", "cluster_ring_time", "cluster_halving_doubling_time", "cluster_hierarchical_time",
           "cluster_torus_time", "torus_grids", "predict", "Prediction", "fit_alpha_beta", "calibrate",
           "model_coefficients", "PRESETS", "COLUMNS", "tree_time", "recursive_doubling_time", "cluster_tree_time",
           "cluster_recursive_doubling_time", "cluster_allgather_time", "nccl_ring_latency", "CHECK_BYTES",
           "HOROVOD_CYCLE_S", "COORDINATION_BYTES", "FITTED_CALL_S", "PLAN_ALGORITHMS", "LABELS", "TORUS_COLUMNS",
           "TRANSPORTS", "CallCost", "call_counts", "check_time", "coordination_time", "per_call_time",
           "fit_call_s", "transfer_time", "Ranked", "natural_grid", "rank_algorithms", "InitCost", "init_time",
           "PRESET_NOTES", "binomial_tree_time"]

ALGORITHMS = ("ring", "halving-doubling", "hierarchical", "torus")

#: The column all-reduce algorithms of :func:`cluster_torus_time`.
COLUMNS = ("ring", "halving-doubling", "tree")


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


def tree_time(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Double binary tree all-reduce (NCCL 2.4+, pipelined), one link class, seconds:
    2 floor(lg p) a + 2 n b + n g (0 for p = 1).

    Two complementary binary trees each reduce then broadcast half the data, every rank an interior node
    of one and a leaf of the other: depth floor(lg p) up and down (NCCL's ``log2i``); each rank sends and
    receives 2n bytes in all (NCCL's bus-to-algorithm bandwidth ratio 1/2, ``src/graph/tuning.cc``).
    """
    _check(p, n)
    if p == 1:
        return 0.0
    return 2 * (p.bit_length() - 1) * alpha + 2 * n * beta + n * gamma


def binomial_tree_time(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0, chunks: int = 1) -> float:
    """Binomial-tree reduce to one root then binomial-tree broadcast (the MPI transport's ``tree`` column,
    :func:`horovod_torus.p2p.tree_allreduce`), one link class, in ``chunks`` pieces, seconds:
    D (2 k a + 2 n b + n g), D = ceil(lg p) rounds, k = chunks (0 for p = 1).

    The root receives (and folds) the whole n bytes from each of its D children, then sends them to each:
    D n bytes each way whatever the pipelining, so cutting the data into k chunks (bounded scratch memory,
    the fold of one chunk overlapping the transfer of the next) adds k - 1 messages per round and saves no
    bandwidth in this model. The latency-bound all-reduce: 2 ceil(lg p) messages for any p, against a
    halving-doubling's 2 floor(lg p) + 3 when p is not a power of two (Thakur, Rabenseifner & Gropp 2005).
    """
    _check(p, n)
    if p == 1:
        return 0.0
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r} must be a positive integer")
    rounds = (p - 1).bit_length()
    return rounds * (2 * chunks * alpha + 2 * n * beta + n * gamma)


def recursive_doubling_time(p: int, n: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Recursive doubling all-reduce, the latency-bound algorithm of small messages, seconds:
    lg p (a + n b + n g) for p = 2^k; otherwise the p - q extra ranks (q = 2^floor(lg p)) fold into a
    neighbour first and get the result last: (lg q + 2)(a + n b) + (lg q + 1) n g."""
    _check(p, n)
    q = 1 << (p.bit_length() - 1)
    steps = (q.bit_length() - 1) + 2 * (q != p)
    return steps * (alpha + n * beta) + ((q.bit_length() - 1) + (q != p)) * n * gamma


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


@functools.lru_cache(maxsize=512)
def _butterfly_links(cluster: Cluster, groups: tuple) -> tuple:
    """The (alpha, beta) of every step of :func:`_butterfly` on ``groups`` (they do not depend on the
    bytes): (q, r, swap, up, back, links by distance). Cached: the planner asks for the same schedules
    at every size."""
    g = len(groups[0])
    q = 1 << (g.bit_length() - 1)
    r = g - q
    swap = up = back = None
    if r:
        swap = _step_link(cluster, [(grp[i], grp[i ^ 1]) for grp in groups for i in range(2 * r)])
        up = _step_link(cluster, [(grp[i + 1], grp[i]) for grp in groups for i in range(0, 2 * r, 2)])
        back = _step_link(cluster, [(grp[i], grp[i + 1]) for grp in groups for i in range(0, 2 * r, 2)])
    active = [grp[0:2 * r:2] + grp[2 * r:] for grp in groups]
    links, d = [], 1
    while d < q:
        links.append((d, _step_link(cluster, [(act[i], act[i ^ d]) for act in active for i in range(q)])))
        d *= 2
    return q, r, swap, up, back, tuple(links)


def _butterfly(cluster: Cluster, groups, fold_in, exchange, fold_out: float) -> float:
    """Concurrent butterfly schedules (the recursive halving/doubling family), one per group, seconds.

    For a group of g ranks, q = 2^floor(lg g), r = g - q, as MPICH and Open MPI run it:

    * fold (r > 0): among the first 2r ranks, the steps of ``fold_in`` ((pattern, bytes): ``"swap"``,
      neighbours i and i+1 (i even) exchange; ``"up"``, the odd one sends to the even one); the odd ones sit
      out and receive ``fold_out`` bytes from their even neighbour at the end. The q remaining ranks are
      renumbered (the evens of the first 2r, then the rest in order);
    * distance d = 1, 2, ..., q/2 in the renumbering: ``exchange(d)`` = (bytes, how many such steps) with
      the partner at index i xor d.
    """
    groups = tuple(tuple(g) for g in groups if len(g) > 1)
    if not groups:
        return 0.0
    q, r, swap, up, back, links = _butterfly_links(cluster, groups)
    t = 0.0
    if r:
        for pattern, nbytes in fold_in:
            a, b = swap if pattern == "swap" else up
            t += a + nbytes * b
        t += back[0] + fold_out * back[1]  # the full result back to the ranks that sat out
    for d, (a, b) in links:
        nbytes, steps = exchange(d)
        t += steps * (a + nbytes * b)
    return t


def _halving_doubling_groups(cluster: Cluster, groups, n: float) -> float:
    """Concurrent halving-doublings, one per group of ranks (each in its own order), seconds.

    Rabenseifner's algorithm as Open MPI (``ompi_coll_base_allreduce_intra_redscat_allgather``) and MPICH
    run it (:func:`_butterfly`): the fold exchanges half vectors and reduces, the odd one sends its reduced
    half to the even one (alpha + n/2 beta twice, n/2 gamma), the odd ones get the full result at the end
    (alpha + n beta); step k (distance d = 2^k) exchanges n / 2^(k+1) bytes (reduce-scatter by vector
    halving), the all-gather mirrors it.
    """
    groups = [list(g) for g in groups if len(g) > 1]
    if not groups:
        return 0.0
    _check(len(groups[0]), n)
    t = _butterfly(cluster, groups, [("swap", n / 2), ("up", n / 2)], lambda d: (n / (2 * d), 2), n)
    g = len(groups[0])
    q = 1 << (g.bit_length() - 1)
    fold_gamma = n / 2 * cluster.gamma if g != q else 0.0
    return t + fold_gamma + (q - 1) / q * n * cluster.gamma


def _recursive_doubling_groups(cluster: Cluster, groups, n: float, gather: bool = False) -> float:
    """Concurrent recursive doublings, one per group, seconds: the latency-bound algorithm of small
    all-reduces (MPICH's and Open MPI's choice for small messages; Thakur, Rabenseifner & Gropp 2005).

    All-reduce (``gather=False``): every step exchanges the whole n bytes and reduces them; the fold sends
    n up and the result n back: (lg q + 2 [g != q]) (a + n b) + (lg q + [g != q]) n g.
    All-gather (``gather=True``, n bytes per rank): the step at distance d exchanges the d blocks gathered
    so far (d n g/q bytes with the fold's blocks folded in), the fold-out returns all g n bytes:
    lg q a + (q-1) n g/q b on a single link (= lg p a + (p-1) n b for p = 2^k).
    """
    groups = [list(g) for g in groups if len(g) > 1]
    if not groups:
        return 0.0
    g = len(groups[0])
    _check(g, n)
    q = 1 << (g.bit_length() - 1)
    if gather:
        return _butterfly(cluster, groups, [("up", n)], lambda d: (d * n * g / q, 1), g * n)
    reductions = (q.bit_length() - 1) + (g != q)
    return _butterfly(cluster, groups, [("up", n)], lambda d: (n, 1), n) + reductions * n * cluster.gamma


def _tree_groups(cluster: Cluster, groups, n: float) -> float:
    """Concurrent double binary trees (NCCL 2.4+), one per group of ranks, n bytes each, seconds.

    NCCL's structure and tuning model (``src/graph/tuning.cc``): a group's ranks on one node form a chain,
    the N_g nodes it spans form two complementary binary trees, each reducing then broadcasting half the
    data, pipelined. Latency 2((L_g - 1) a_i + floor(lg N_g) a_e) (L_g: the group's most ranks on one
    node). Bandwidth: NCCL converts bus bandwidth to algorithm bandwidth with ratio 1/2, i.e. 2n bytes
    per participant: every node sends (and receives) 2n of the group's bytes, spread over the NICs of the
    group's ranks there (one channel each); the node's busiest NIC sets the pace (divided by
    ``exchange_efficiency``: each tree edge carries both directions at once), and a chain pays 2n on the
    intra-node link. Reduction: n gamma.
    """
    groups = [list(g) for g in groups if len(g) > 1]
    if not groups:
        return 0.0
    _check(len(groups[0]), n)
    latency, chain = 0.0, False
    load: dict[tuple[int, int], float] = {}
    for grp in groups:
        by_node: dict[int, list[int]] = {}
        for r in grp:
            by_node.setdefault(cluster.node(r), []).append(r)
        local = max(len(v) for v in by_node.values())
        chain = chain or local > 1
        steps = (local - 1) * cluster.intra.alpha
        if len(by_node) > 1:
            steps += (len(by_node).bit_length() - 1) * cluster.inter.alpha
            for node, ranks in by_node.items():
                for r in ranks:
                    key = (node, cluster.nic(r))
                    load[key] = load.get(key, 0.0) + 2 * n / len(ranks)
        latency = max(latency, 2 * steps)
    t = 2 * n * cluster.intra.beta if chain else 0.0
    if load:
        t = max(t, max(load.values()) * cluster.nics * cluster.inter.beta / cluster.exchange_efficiency)
    return latency + t + n * cluster.gamma


def cluster_halving_doubling_time(cluster: Cluster, n: float) -> float:
    """Recursive halving-doubling over all p ranks (distance 1, 2, 4, ... with n/2, n/4, ... bytes), s."""
    _check(cluster.size, n)
    return _halving_doubling_groups(cluster, [list(range(cluster.size))], n)


def cluster_hierarchical_time(cluster: Cluster, n: float) -> float:
    """Node-local reduce (intra), ring among one rank per node (inter, one flow per node), local bcast."""
    L, N = cluster.ranks_per_node, cluster.nodes
    one_nic = Link(cluster.inter.alpha, cluster.inter.bandwidth / cluster.nics)  # one flow per node: one NIC
    return hierarchical_time(N, L, n, cluster.intra, one_nic, cluster.gamma)


def cluster_tree_time(cluster: Cluster, n: float) -> float:
    """NCCL's double binary tree over all p ranks (a chain inside each node, two binary trees over the N
    nodes), seconds: 2((L-1) a_i + floor(lg N) a_e) + 2n max(b_i, b_node) + n g, where b_node is the
    node's whole injection bandwidth spread over its NICs (NCCL runs one channel per NIC); see
    :func:`_tree_groups`. One rank per node: :func:`tree_time` with the inter-node link."""
    _check(cluster.size, n)
    return _tree_groups(cluster, [list(range(cluster.size))], n)


def cluster_recursive_doubling_time(cluster: Cluster, n: float, groups=None) -> float:
    """Recursive doubling all-reduce of n bytes over ``groups`` (default: all p ranks), seconds: the
    latency-bound all-reduce of the per-call check and of Horovod's per-cycle coordination."""
    groups = [list(range(cluster.size))] if groups is None else groups
    return _recursive_doubling_groups(cluster, groups, n)


def cluster_allgather_time(cluster: Cluster, n: float) -> float:
    """Recursive doubling all-gather of n bytes per rank over all p ranks, seconds (the init agreement's
    ``allgather``, Horovod's registration checks): lg p a + (p-1) n b on one link class."""
    return _recursive_doubling_groups(cluster, [list(range(cluster.size))], n, gather=True)


def nccl_ring_latency(cluster: Cluster) -> float:
    """A flat ring's latency as NCCL's tuning model counts it (``src/graph/tuning.cc``): of its 2(p-1)
    steps, the 2(N-1) that cross a node boundary at a_e, the others at a_i (pipelined: a step waits for
    its own hop only). :func:`cluster_ring_time` charges every step the slowest hop of the step instead
    (2(p-1) a_e: all ranks send at once, bulk-synchronous, as an MPI ring runs)."""
    p, nodes = cluster.size, cluster.nodes
    return (2 * (p - 1) - 2 * (nodes - 1)) * cluster.intra.alpha + 2 * (nodes - 1) * cluster.inter.alpha


def cluster_torus_time(cluster: Cluster, grid: TorusTopology | str, n: float, column: str = "ring",
                       serial_columns: bool = False) -> float:
    """2D torus on ``grid`` (X*Y = p, rows of X consecutive ranks), seconds.

    ``column``: the column all-reduce's algorithm (one of :data:`COLUMNS`), ``"ring"`` (the torus' own
    rings, NCCL's ring, Gloo), ``"halving-doubling"`` (an MPI library's MPI_Allreduce on the column
    communicator, e.g. Horovod's MPI controller under Open MPI's default) or ``"tree"`` (NCCL's double
    binary tree on the column: :func:`_tree_groups` on the X columns at once, shard n/X; on a node-per-row
    grid 2 floor(lg Y) a_e + 2n/X per rank, the X columns sharing their node's NICs). The reduction cost
    is (XY-1)/(XY) n gamma in every case (the extra half-vector reduction of a halving-doubling fold,
    Y not a power of two, is left out).

    ``serial_columns``: the X column all-reduces run one after another, each alone on the links, instead of
    all at once: the column phase is the sum of the columns' times. That is Horovod 0.28.1's CPU operations
    under its MPI controller (the Horovod-ops torus under mpirun): one background thread per process makes
    every process set's MPI calls, and each cycle starts with a negotiation on the global set, so a rank
    blocked inside its column's ``MPI_Allreduce`` holds back the next cycle of every rank, and a column
    negotiated a cycle later starts when the first one ends (``tools/probes/horovod_columns.py``,
    docs/notes/cluster_in_a_box.md). Where the columns share their NICs (one NIC per node) it changes only
    the latency terms; on rails (a NIC per column) it doubles the column phase of a 2-column grid.
    """
    grid = TorusTopology.parse(grid) if isinstance(grid, str) else grid
    grid.check_size(cluster.size)
    if column not in COLUMNS:
        raise ValueError(f"column={column!r}: the torus' column all-reduce is 'ring', 'halving-doubling' or "
                         f"'tree'")
    a_h, b_h = _rings_link(cluster, grid.rows()) if grid.x > 1 else (0.0, 0.0)
    rows = torus_time(grid.x, 1, n, a_h, b_h, 0.0, 0.0, 0.0)
    gamma = (grid.size - 1) / grid.size * n * cluster.gamma
    if grid.y == 1:
        return rows + gamma
    no_gamma = dataclasses.replace(cluster, gamma=0.0)
    columns = [[c] for c in grid.columns()] if serial_columns else [grid.columns()]
    return rows + sum(_column_phase(no_gamma, cs, n / grid.x, column) for cs in columns) + gamma


def _column_phase(cluster: Cluster, columns, shard: float, column: str) -> float:
    """Seconds of the torus' column all-reduces of ``shard`` bytes each, ``columns`` (equal lengths Y) at
    once, by the column algorithm ``column`` (no reduction cost: :func:`cluster_torus_time` adds it).
    Ring: 2(Y-1) a_v + 2(Y-1)/Y shard b_v on the columns' shared step link."""
    if column == "ring":
        y = len(columns[0])
        a_v, b_v = _rings_link(cluster, columns)
        return 2 * (y - 1) * a_v + 2 * (y - 1) / y * shard * b_v
    groups = _halving_doubling_groups if column == "halving-doubling" else _tree_groups
    return groups(cluster, columns, shard)


def torus_grids(p: int) -> list[TorusTopology]:
    """Every X x Y grid with X*Y = p, X ascending (:meth:`TorusTopology.grids`)."""
    return TorusTopology.grids(p)


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


# ------------------------------------------------------------------ per-call cost, start-up, ranking
#: Bytes per rank of the per-call cross-rank check: ONE MAX all-reduce of the signature words and their
#: negations (:func:`horovod_torus.signature.extremes`: 2 x 10 int64 words).
CHECK_BYTES = 2 * len(FIELDS) * 8

#: Horovod's default cycle (``HOROVOD_CYCLE_TIME`` = 1 ms): its background thread starts one cycle per
#: HOROVOD_CYCLE_TIME, so each Horovod op that waits for the previous one waits a cycle.
HOROVOD_CYCLE_S = 1e-3

#: Bytes of one coordination step of Horovod's background thread: the response cache's bit vector, one
#: int64 word for a handful of cached tensors (``CacheCoordinator::sync``: a bitwise-AND all-reduce).
COORDINATION_BYTES = 8

#: The fixed cost of one library collective call (seconds), fitted by :func:`fit_call_s` from ONE row:
#: ``docs/bench_targets-small.json``, strategy ``ring`` (``hvd.allreduce``, one Horovod op), 4,096 B,
#: avg 1,098.8 us on 4 ranks of one host (2 cores, Horovod's MPI controller, cycle 1 ms), less one cycle
#: and the transfer on the host's intra-node link as the cluster bench of 2026-11-30 calibrated it
#: (``tests/unit/data/cluster_bench_one_launch.json``, the then ``docs/cluster_bench.json``). The row
#: at 10 ms cycles (``docs/bench_targets-cycle10-small.json``, 10,094 us) is predicted within 0.1 %.
#: It is this 2-core host's figure (TensorFlow op dispatch, Horovod's queue, the MPI call): pass your
#: machine's (``python -m horovod_torus.plan --call-overhead-us``).
FITTED_CALL_S = 96.1e-6

#: The algorithms :func:`rank_algorithms` compares, and their labels.
PLAN_ALGORITHMS = ("ring", "tree", "halving-doubling", "hierarchical", "torus", "torus-tree", "torus-hd")
LABELS = {"ring": "flat ring", "tree": "double binary tree", "halving-doubling": "halving-doubling",
          "hierarchical": "hierarchical", "torus": "torus, ring column", "torus-tree": "torus, tree column",
          "torus-hd": "torus, halving-doubling column"}
#: torus algorithm -> its column all-reduce (:func:`cluster_torus_time`).
TORUS_COLUMNS = {"torus": "ring", "torus-tree": "tree", "torus-hd": "halving-doubling"}
#: How the calls reach the network: ``"horovod"`` (every collective is a Horovod op: the torus over row and
#: column process sets) or ``"library"`` (straight library calls: the torus' MPI transport, NCCL).
TRANSPORTS = ("horovod", "library")


@dataclasses.dataclass(frozen=True)
class CallCost:
    """The per-call software cost that the alpha-beta terms leave out.

    Attributes:
        call_s: seconds per library collective call (default :data:`FITTED_CALL_S`); a Horovod op costs
            call_s + cycle_s + its cycle's coordination (:func:`coordination_time`).
        cycle_s: Horovod's cycle time (``HOROVOD_CYCLE_TIME``; default 1 ms).
    """

    call_s: float = FITTED_CALL_S
    cycle_s: float = HOROVOD_CYCLE_S

    def __post_init__(self):
        if not self.call_s >= 0:
            raise ValueError(f"call overhead call_s={self.call_s} s must be >= 0 (e.g. --call-overhead-us 10)")
        if not self.cycle_s >= 0:
            raise ValueError(f"cycle_s={self.cycle_s} s must be >= 0 (Horovod's HOROVOD_CYCLE_TIME, "
                             f"e.g. --cycle-ms 1)")


def _as_grid(grid):
    return TorusTopology.parse(grid) if isinstance(grid, str) else grid


def call_counts(algorithm: str, grid: TorusTopology | str | None = None,
                transport: str = "horovod") -> tuple[int, int]:
    """(Horovod ops, further library calls) of one all-reduce call of ``algorithm``.

    horovod: a flat algorithm is one op (``hvd.allreduce``), hierarchical one op that makes 3 library
    calls (HOROVOD_HIERARCHICAL_ALLREDUCE: local reduce, cross-node all-reduce, local broadcast), a torus
    call the per-call check on the global set plus one op per phase (row reduce-scatter, column all-reduce,
    row all-gather; a phase over one rank is skipped). library: the same collectives as plain calls.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport={transport!r}: use 'horovod' (Horovod ops on process sets) or 'library' "
                         f"(straight MPI/NCCL calls)")
    if algorithm in TORUS_COLUMNS:
        g = _as_grid(grid)
        if g is None:
            raise ValueError(f"algorithm {algorithm!r} needs its grid")
        calls = 1 + 2 * (g.x > 1) + (g.y > 1)
    elif algorithm == "hierarchical":
        calls = 3
    elif algorithm in PLAN_ALGORITHMS:
        calls = 1
    else:
        raise ValueError(f"algorithm={algorithm!r}: choose one of {', '.join(PLAN_ALGORITHMS)}")
    if transport == "library":
        return 0, calls
    return (calls, 0) if algorithm in TORUS_COLUMNS else (1, calls - 1)


@functools.lru_cache(maxsize=256)
def check_time(cluster: Cluster) -> float:
    """The per-call cross-rank check alone: ONE MAX all-reduce of :data:`CHECK_BYTES` (160 B) over all p
    ranks, latency-bound (recursive doubling: floor(lg p) steps, + 2 when p is not a power of two),
    seconds (:func:`cluster_recursive_doubling_time`). abci-v1 (2,176 ranks) and abci-v2 (3,456 ranks):
    0.150 ms each (13 steps: 3 inside a node at 3.4 us, 10 across nodes at 14 us)."""
    return cluster_recursive_doubling_time(cluster, CHECK_BYTES)


@functools.lru_cache(maxsize=1024)
def coordination_time(cluster: Cluster, grid: TorusTopology | str | None = None) -> float:
    """One Horovod cycle's coordination, seconds: Horovod's background thread runs one coordination step
    (an all-reduce of :data:`COORDINATION_BYTES`, latency-bound) per process set per cycle
    (``RunLoopOnce`` loops over the process set table). With a torus ``grid`` a rank is in the global set,
    its row set and its column set (the rows, and the columns, coordinate at once on their own ranks)."""
    t = cluster_recursive_doubling_time(cluster, COORDINATION_BYTES)
    g = _as_grid(grid)
    if g is not None and g.x > 1 and g.y > 1:  # a row or column equal to the global set is not registered
        t += cluster_recursive_doubling_time(cluster, COORDINATION_BYTES, g.rows())
        t += cluster_recursive_doubling_time(cluster, COORDINATION_BYTES, g.columns())
    return t


def per_call_time(cluster: Cluster, algorithm: str, grid: TorusTopology | str | None = None,
                  transport: str = "horovod", cost: CallCost = CallCost()) -> float:
    """The per-call term of one all-reduce call, seconds (add :func:`transfer_time` for the total):
    ops (call_s + cycle_s + coordination) + calls call_s (:func:`call_counts`), plus for a torus call the
    check's own transfer (:func:`check_time`)."""
    ops, calls = call_counts(algorithm, grid, transport)
    torus = algorithm in TORUS_COLUMNS
    t = calls * cost.call_s
    if ops:
        t += ops * (cost.call_s + cost.cycle_s + coordination_time(cluster, grid if torus else None))
    return t + (check_time(cluster) if torus else 0.0)


def fit_call_s(seconds: float, cluster: Cluster, nbytes: float, cycle_s: float = HOROVOD_CYCLE_S) -> float:
    """call_s from ONE measured flat ``hvd.allreduce`` (one Horovod op) of ``nbytes`` on ``cluster``:
    the time less one cycle, the cycle's coordination and the ring's transfer (seconds).

    Raises:
        ValueError: the measured time does not exceed the cycle and the transfer (no overhead to fit).
    """
    rest = seconds - cycle_s - coordination_time(cluster) - cluster_ring_time(cluster, nbytes)
    if not rest > 0:
        raise ValueError(f"a measured {seconds * 1e6:.1f} us is not above one cycle ({cycle_s * 1e6:.0f} us) plus "
                         f"the transfer: nothing left to fit (is HOROVOD_CYCLE_TIME right?)")
    return rest


def transfer_time(cluster: Cluster, algorithm: str, n: float, grid: TorusTopology | str | None = None) -> float:
    """The alpha-beta time of one all-reduce of ``algorithm`` (:data:`PLAN_ALGORITHMS`), seconds."""
    if algorithm in TORUS_COLUMNS:
        return cluster_torus_time(cluster, grid, n, column=TORUS_COLUMNS[algorithm])
    flat = {"ring": cluster_ring_time, "tree": cluster_tree_time, "halving-doubling": cluster_halving_doubling_time,
            "hierarchical": cluster_hierarchical_time}
    if algorithm not in flat:
        raise ValueError(f"algorithm={algorithm!r}: choose one of {', '.join(PLAN_ALGORITHMS)}")
    return flat[algorithm](cluster, n)


@dataclasses.dataclass(frozen=True)
class Ranked:
    """One algorithm's predicted cost of one call (seconds).

    Attributes:
        algorithm: a key of :data:`PLAN_ALGORITHMS`; label: its name in words.
        grid: the torus grid (None for the flat algorithms).
        latency_s: the alpha terms alone (the transfer of 0 bytes).
        transfer_s: the alpha-beta time; overhead_s: the per-call term (:func:`per_call_time`); total_s:
            their sum, the time of one call.
        ratio: total_s / the best total_s of the ranking (1.0 for the best).
    """

    algorithm: str
    label: str
    grid: TorusTopology | None
    latency_s: float
    transfer_s: float
    overhead_s: float
    total_s: float
    ratio: float = 1.0


def natural_grid(cluster: Cluster) -> TorusTopology | None:
    """The paper's mapping, a node per row (X = ranks per node), or None on one node or one rank per node."""
    if cluster.ranks_per_node > 1 and cluster.nodes > 1:
        return TorusTopology(cluster.ranks_per_node, cluster.nodes)
    return None


def rank_algorithms(cluster: Cluster, nbytes: float, transport: str = "horovod",
                    cost: CallCost = CallCost()) -> list[Ranked]:
    """Every algorithm of :data:`PLAN_ALGORITHMS` for one call of ``nbytes`` per rank, fastest first.

    Each torus variant appears on its best grid (least total; ties: the smaller X; degenerate 1xN/Nx1
    grids are the flat algorithms and are left out) and, when that is another grid, on the node-per-row
    grid too. ``ratio`` is each total over the best one.
    """
    entries = []

    def entry(algorithm, grid=None):
        transfer = transfer_time(cluster, algorithm, nbytes, grid)
        latency = transfer_time(cluster, algorithm, 0.0, grid)
        extra = per_call_time(cluster, algorithm, grid, transport, cost)
        return Ranked(algorithm, LABELS[algorithm], grid, latency, transfer, extra, transfer + extra)

    for a in ("ring", "tree", "halving-doubling", "hierarchical"):
        entries.append(entry(a))
    grids = [g for g in torus_grids(cluster.size) if g.x > 1 and g.y > 1]
    natural = natural_grid(cluster)
    for a in TORUS_COLUMNS:
        if not grids:
            break
        on_grid = [entry(a, g) for g in grids]
        best = min(on_grid, key=lambda e: (e.total_s, e.grid.x))
        entries.append(best)
        if natural is not None and natural != best.grid:
            entries.append(next(e for e in on_grid if e.grid == natural))
    least = min(e.total_s for e in entries)
    ranked = [dataclasses.replace(e, ratio=e.total_s / least if least > 0 else 1.0) for e in entries]
    return sorted(ranked, key=lambda e: (e.total_s, PLAN_ALGORITHMS.index(e.algorithm)))


@dataclasses.dataclass(frozen=True)
class InitCost:
    """The planner's estimate of the torus' start-up (seconds).

    Attributes:
        sets: process sets (horovod) or communicators (library) the torus makes beyond the world's.
        registration_s: making them; agreement_s: the settings agreement's all-gather.
    """

    sets: int
    registration_s: float
    agreement_s: float

    @property
    def total_s(self) -> float:
        return self.registration_s + self.agreement_s


def init_time(cluster: Cluster, grid: TorusTopology | str, agreement_bytes: float,
              transport: str = "horovod") -> InitCost:
    """Start-up of the torus on ``grid``: its communicators and the agreement exchange.

    horovod: ``hvd.init(process_sets=...)`` registers the Y row sets and the X column sets (X + Y; a set
    equal to the global one is left out). Horovod 0.28.1 initialises them one after another, each with
    three collectives over the WHOLE world (``ProcessSet::Initialize``, horovod/common/process_set.cc: an
    ``MPI_Allgather`` of one int, ``MPI_Allreduce`` MAX and MIN of the set's ranks) and a communicator
    made from the world (modelled as one more latency-bound all-reduce, the context-id agreement); the
    controller's set-up inside each set is left out. library (:meth:`horovod_torus.mpi.TorusComm.create`):
    a ``Dup`` and two ``Split``s (3 communicators: each a context-id all-reduce, a Split an all-gather
    of (color, key) too). agreement: one ``allgather`` of ``agreement_bytes`` per rank (the pickled
    settings, :mod:`horovod_torus.agreement`).
    """
    g = _as_grid(grid)
    g.check_size(cluster.size)
    if transport not in TRANSPORTS:
        raise ValueError(f"transport={transport!r}: use 'horovod' or 'library'")
    context_id = cluster_recursive_doubling_time(cluster, 4)
    if transport == "horovod":
        sizes = ([g.x] * g.y if g.x > 1 and g.y > 1 else []) + ([g.y] * g.x if g.y > 1 and g.x > 1 else [])
        per_size = {k: cluster_allgather_time(cluster, 4) + 2 * cluster_recursive_doubling_time(cluster, 4 * k)
                    + context_id for k in set(sizes)}
        registration = sum(per_size[k] for k in sizes)
        count = len(sizes)
    else:
        count = 3
        registration = context_id + 2 * (cluster_allgather_time(cluster, 8) + context_id)
    return InitCost(sets=count, registration_s=registration,
                    agreement_s=cluster_allgather_time(cluster, agreement_bytes))


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
    # The paper's two runs on ABCI (V): v1 on 2,176 V100 (544 nodes), v2 on 3,456 (864 nodes). Bandwidths
    # as "abci" (NVLink2 50 GB/s per pair; 2x IB EDR = 25 GB/s per node, one link: NCCL stripes its
    # channels over both HCAs); latencies NCCL's own per-step constants for the Simple protocol
    # (src/graph/tuning.cc hwLat: 3.4 us per NVLink ring step, 14 us per network step), the figures
    # issue 23 and NVIDIA's NCCL 2.4 comparison use.
    "abci-v1": Cluster(nodes=544, ranks_per_node=4, intra=Link(alpha=3.4e-6, bandwidth=50e9),
                       inter=Link(alpha=14e-6, bandwidth=25e9), gamma=3 / 900e9, name="abci-v1"),
    "abci-v2": Cluster(nodes=864, ranks_per_node=4, intra=Link(alpha=3.4e-6, bandwidth=50e9),
                       inter=Link(alpha=14e-6, bandwidth=25e9), gamma=3 / 900e9, name="abci-v2"),
}

#: One line per preset: what it stands for (the planner's Markdown page quotes it).
PRESET_NOTES = {
    "abci": "ABCI (V), 4 V100 per node, assumed latencies (3 us intra, 6 us inter)",
    "abci3": "ABCI 3.0 (H), 8 H100 per node, 8 NDR200 HCAs",
    "abci-v1": "the paper's v1 run: 2,176 V100 on 544 ABCI nodes (224 s), NCCL's latency constants",
    "abci-v2": "the paper's v2 run: 3,456 V100 on 864 ABCI nodes (122 s), NCCL's latency constants",
}
