"""``python -m horovod_torus.plan``: choose the torus grid and compare all-reduce algorithms before booking nodes.

Examples::

    python -m horovod_torus.plan --preset abci --nodes 544            # ResNet-50 gradients, fp32 and fp16
    python -m horovod_torus.plan --cluster mycluster.json --bytes 64M
    python -m horovod_torus.plan --calibrate bench.json --strategy mpi  # fit alpha/beta from a benchmark run
    python -m horovod_torus.plan --preset abci --calibrate abci_bench.json --strategy mpi --calibrate-link inter
    python -m horovod_torus.plan --preset abci-v1 abci-v2 --markdown  # docs/planner.md: the paper's two cases

Every run also ranks flat ring, double binary tree, halving-doubling, hierarchical and the torus with a ring,
tree or halving-doubling column by their time per call, the per-call cost included (library calls,
Horovod's cycles and coordination, the torus' per-call check: :func:`horovod_torus.costmodel.per_call_time`),
with each one's ratio to the best, and estimates the torus' start-up (process sets registered, agreement
exchange) and its per-call check at the cluster's size. The recommendation (the ``recommended:`` line, the
JSON's ``recommended``, ``--print-grid``) is the first of that ranking for the first ``--transport``: a
torus and its grid, or a flat all-reduce (Horovod's own; ``--print-grid`` prints ``ring``).

A cluster description (JSON) has the keys of the CLI flags: ``{"name": "mine", "nodes": 64,
"ranks_per_node": 8, "intra": {"latency_us": 2, "bandwidth_gbps": 150}, "inter": {"latency_us": 5,
"bandwidth_gbps": 50}, "gamma_ps_per_byte": 4, "nics_per_node": 1}`` (bandwidth in GB/s = 1e9 B/s; inter
bandwidth per node, all its NICs together; ``nics_per_node`` K > 1: K NICs of bandwidth/K each, local rank l
on NIC l mod K, NIC k of every node on rail k; optional, default 1; ``exchange_efficiency`` in (0, 1]: the
share of the link rate each direction of a pairwise exchange gets, optional, default 1 = full duplex).
See :mod:`horovod_torus.costmodel` for the model.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import pickle
import shlex

from horovod_torus.costmodel import (
    ALGORITHMS, CHECK_BYTES, HOROVOD_CYCLE_S, FITTED_CALL_S, PRESET_NOTES, PRESETS, TRANSPORTS, CallCost, Cluster,
    Link, calibrate, check_time, coordination_time, init_time, nccl_ring_latency, natural_grid, predict,
    rank_algorithms,
)
from horovod_torus.settings import TorusSettings
from horovod_torus import __version__
from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.report import parse_size

__all__ = ["main", "build_parser", "cluster_from_args", "format_prediction", "ranking_rows", "startup_rows",
           "agreement_bytes", "markdown_page", "CLUSTER_KEYS"]

#: ResNet-50's 25,583,592 trainable parameters as fp32 and fp16 gradients (bytes).
RESNET50_BYTES = (25_583_592 * 4, 25_583_592 * 2)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m horovod_torus.plan",
                                description="Alpha-beta predictions of ring, halving-doubling, hierarchical "
                                            "and 2D-torus all-reduce, a ranking with trees and the per-call "
                                            "cost, and the recommended algorithm: the ranking's fastest.")
    p.add_argument("--preset", nargs="+", choices=sorted(PRESETS), metavar="PRESET",
                   help=f"start from a known cluster ({', '.join(sorted(PRESETS))}); several: one report each "
                        "(plain or --markdown output)")
    p.add_argument("--cluster", metavar="FILE.json", help="cluster description (see the module docstring)")
    p.add_argument("--nodes", type=int)
    p.add_argument("--ranks-per-node", type=int)
    for side in ("intra", "inter"):
        p.add_argument(f"--{side}-latency-us", type=float, help=f"{side}-node alpha, microseconds")
        p.add_argument(f"--{side}-bandwidth-gbps", type=float,
                       help=f"{side}-node bandwidth, GB/s" + (" per node (shared)" if side == "inter" else ""))
    p.add_argument("--gamma-ps-per-byte", type=float, help="reduction cost, picoseconds per byte")
    p.add_argument("--nics-per-node", type=int, help="NICs per node sharing the inter bandwidth; local rank l "
                                                     "uses NIC l mod K (rails); default 1")
    p.add_argument("--bytes", nargs="+", default=None, metavar="N",
                   help="message bytes per rank (K/M/G binary suffixes; default: ResNet-50 gradients, "
                        f"{RESNET50_BYTES[0]} B fp32 and {RESNET50_BYTES[1]} B fp16)")
    p.add_argument("--calibrate", metavar="BENCH.json", help="fit alpha/beta from a benchmark JSON")
    p.add_argument("--strategy", default="mpi", help="benchmark rows to fit: ring|mpi|torus|mpi-torus (mpi)")
    p.add_argument("--min-bytes", default="0", help="ignore benchmark rows below this size (0)")
    p.add_argument("--calibrate-link", choices=("intra", "inter", "both"), default=None,
                   help="which link the fit replaces (default: both for a single-node benchmark without "
                        "--preset/--cluster, else intra when the benchmark ran on one node, inter otherwise)")
    p.add_argument("--top", type=int, default=5, help="how many torus grids to list (5)")
    p.add_argument("--transport", nargs="+", choices=TRANSPORTS, default=["horovod"], metavar="TRANSPORT",
                   help="how the calls reach the network, for the per-call cost: horovod (Horovod ops; the torus "
                        "on row/column process sets) and/or library (straight MPI/NCCL calls); default horovod")
    p.add_argument("--call-overhead-us", type=float, default=None,
                   help=f"fixed cost of one library call, us (default {FITTED_CALL_S * 1e6:.1f}, fitted on this "
                        "project's 2-core host: see horovod_torus.costmodel.FITTED_CALL_S)")
    p.add_argument("--cycle-ms", type=float, default=None,
                   help=f"Horovod's HOROVOD_CYCLE_TIME, ms (default {HOROVOD_CYCLE_S * 1e3:g})")
    p.add_argument("--markdown", action="store_true",
                   help="print the ranking as a Markdown page (docs/planner.md is this output)")
    p.add_argument("--json", metavar="FILE", help="write the predictions as JSON")
    p.add_argument("--print-grid", action="store_true",
                   help="print only the choice for the first message size and the first --transport: the "
                        "grid XxY of the ranking's fastest algorithm when it is a torus, or 'ring' (Horovod's "
                        "own all-reduce) when a flat all-reduce is predicted faster or no grid XxY with X, Y > 1 "
                        "exists (for job scripts)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def grid_choice(ranked) -> str:
    """What a job script passes on (the app offers the torus and Horovod's own all-reduce), from a ranking
    of :func:`horovod_torus.costmodel.rank_algorithms` (fastest first, trees and the per-call cost
    included): the grid ``"XxY"`` when the fastest is a torus, else ``"ring"`` (a flat all-reduce,
    Horovod's own, is predicted faster; the ranking has no torus on a degenerate 1xN/Nx1 grid, so a world
    without a grid XxY with X, Y > 1 gets ``"ring"`` too). Agrees with :func:`recommendation`."""
    return str(ranked[0].grid) if ranked[0].grid is not None else "ring"


def recommendation(ranked) -> str:
    """The planner's recommendation in words: the fastest algorithm of a ranking of
    :func:`horovod_torus.costmodel.rank_algorithms` (trees and the per-call cost included), e.g.
    ``"torus on grid 64x34 (tree column)"`` or ``"double binary tree (Horovod's own all-reduce)"`` (which
    flat algorithm Horovod's all-reduce runs is its library's choice: NCCL's ring or tree, MPI's
    algorithm). :func:`grid_choice` passes the same choice on to job scripts."""
    best = ranked[0]
    if best.grid is not None:
        return f"torus on grid {best.grid} ({best.label.split(', ', 1)[1]})"
    how = ", HOROVOD_HIERARCHICAL_ALLREDUCE=1" if best.algorithm == "hierarchical" else ""
    return f"{best.label} (Horovod's own all-reduce{how})"


#: The keys of a cluster description (JSON), and what each one holds (for error messages).
CLUSTER_KEYS = {"name": "a label", "nodes": "number of nodes, e.g. 544", "ranks_per_node": "ranks (GPUs) per node, e.g. 4",
                "intra": '{"latency_us": 3.4, "bandwidth_gbps": 50}', "inter": '{"latency_us": 14, "bandwidth_gbps": 25}',
                "gamma_ps_per_byte": "reduction cost, e.g. 3.3", "nics_per_node": "NICs per node, e.g. 2",
                "exchange_efficiency": "in (0, 1], 1 = full duplex"}


def _number(spec: dict, key: str, what: str, kind=float, default=None):
    """``spec[key]`` (or ``default`` when given and the key is absent) as ``kind``; a missing or
    non-numeric value raises ValueError naming it and the fix."""
    if key not in spec and default is not None:
        return kind(default)
    if key not in spec:
        raise ValueError(f"cluster description: {what} has no {key!r} (add e.g. \"{key}\": "
                         f"{CLUSTER_KEYS.get(key, '1').split('e.g. ')[-1]})")
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        wanted = "an integer" if kind is int else "a number"
        raise ValueError(f"cluster description: {what} {key}={value!r} is not {wanted} ({CLUSTER_KEYS.get(key, key)})")
    return kind(value)


def _link(spec: dict, what: str) -> Link:
    if not isinstance(spec, dict):
        raise ValueError(f"cluster description: {what}={spec!r} must be an object like {CLUSTER_KEYS[what]}")
    for key in ("latency_us", "bandwidth_gbps"):
        if key not in spec:
            raise ValueError(f"cluster description: {what} needs latency_us and bandwidth_gbps (missing {key!r}; "
                             f"e.g. \"{what}\": {CLUSTER_KEYS[what]})")
    latency, bandwidth = _number(spec, "latency_us", what), _number(spec, "bandwidth_gbps", what)
    if not bandwidth > 0:
        raise ValueError(f"cluster description: {what} bandwidth_gbps={bandwidth:g} must be > 0 (GB/s, "
                         f"e.g. {CLUSTER_KEYS[what]})")
    if not latency >= 0:
        raise ValueError(f"cluster description: {what} latency_us={latency:g} must be >= 0 (microseconds per message)")
    return Link(alpha=latency / 1e6, bandwidth=bandwidth * 1e9)


def _load_json(path: str, flag: str):
    """json.load of ``path``; a file that is not JSON raises ValueError naming the flag and the path."""
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{flag} {path}: not a JSON file ({e})") from None


def _cluster_from_spec(spec, label: str) -> Cluster:
    """A :class:`Cluster` from a cluster description; every bad value is named with its fix."""
    if not isinstance(spec, dict):
        raise ValueError(f"{label}: a cluster description is a JSON object with the keys {', '.join(CLUSTER_KEYS)}")
    unknown = sorted(set(spec) - set(CLUSTER_KEYS))
    if unknown:
        raise ValueError(f"{label}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
                         f"{', '.join(CLUSTER_KEYS)}")
    return _checked(lambda: Cluster(
        nodes=_number(spec, "nodes", "the cluster", int), ranks_per_node=_number(spec, "ranks_per_node", "the cluster", int),
        intra=_link(spec.get("intra"), "intra"), inter=_link(spec.get("inter"), "inter"),
        gamma=_number(spec, "gamma_ps_per_byte", "the cluster", default=0.0) / 1e12, name=str(spec.get("name", label)),
        nics=_number(spec, "nics_per_node", "the cluster", int, default=1),
        exchange_efficiency=_number(spec, "exchange_efficiency", "the cluster", default=1.0)), label)


#: A phrase of a :class:`Cluster` / :class:`Link` error -> the flag and JSON key that fix it.
_FIXES = (("ranks_per_node=", '--ranks-per-node L or "ranks_per_node": L'), ("nodes=", '--nodes N or "nodes": N'),
          ("nics=", '--nics-per-node K or "nics_per_node": K'), ("gamma=", '--gamma-ps-per-byte G or "gamma_ps_per_byte": G'),
          ("exchange_efficiency=", '"exchange_efficiency": 1.0 (full duplex)'),
          ("link latency", "--intra-latency-us / --inter-latency-us (microseconds, >= 0)"),
          ("link bandwidth", "--intra-bandwidth-gbps / --inter-bandwidth-gbps (GB/s, > 0)"))


def _checked(make, label: str):
    """``make()``; a ValueError of :class:`Cluster` or :class:`Link` is raised again with ``label`` and the
    flag or key that fixes it."""
    try:
        return make()
    except ValueError as exc:
        text = str(exc)
        if text.startswith("cluster description"):
            raise
        fix = next((f for phrase, f in _FIXES if phrase in text), None)
        raise ValueError(f"{label}: {text}" + (f"; set it with {fix}" if fix else "")) from None


def cluster_from_args(args, bench_doc: dict | None = None, preset: str | None = None) -> Cluster:
    """Preset (``preset``, else the first of ``--preset``), then the --cluster file, then single flags; a
    single-node cluster from the benchmark JSON when neither preset nor file is given. Raises ValueError
    naming what is missing or wrong and the flag or key that fixes it."""
    base = None
    preset = preset or (args.preset[0] if isinstance(args.preset, list) else args.preset)
    if preset:
        base = PRESETS[preset]
    if args.cluster:
        base = _cluster_from_spec(_load_json(args.cluster, "--cluster"), args.cluster)
    if base is None and bench_doc is not None:
        nodes = int(bench_doc.get("host", {}).get("nodes", 1))
        rpn = int(bench_doc["world_size"]) // nodes
        placeholder = Link(alpha=1e-6, bandwidth=1e9)  # replaced by the calibration
        base = Cluster(nodes=nodes, ranks_per_node=rpn, intra=placeholder, inter=placeholder, name="benchmark host")
    if base is None:
        if args.nodes is None or args.ranks_per_node is None or None in (
                args.intra_latency_us, args.intra_bandwidth_gbps, args.inter_latency_us, args.inter_bandwidth_gbps):
            raise ValueError("no cluster given: use --preset abci, --cluster FILE.json, --calibrate BENCH.json, or "
                             "all of --nodes --ranks-per-node --intra-latency-us --intra-bandwidth-gbps "
                             "--inter-latency-us --inter-bandwidth-gbps")
        base = _checked(lambda: Cluster(
            nodes=args.nodes, ranks_per_node=args.ranks_per_node,
            intra=Link(args.intra_latency_us / 1e6, args.intra_bandwidth_gbps * 1e9),
            inter=Link(args.inter_latency_us / 1e6, args.inter_bandwidth_gbps * 1e9)), "the cluster flags")
    changes = {}
    if args.nodes is not None:
        changes["nodes"] = args.nodes
    if args.ranks_per_node is not None:
        changes["ranks_per_node"] = args.ranks_per_node
    for side in ("intra", "inter"):
        link = getattr(base, side)
        lat, bw = getattr(args, f"{side}_latency_us"), getattr(args, f"{side}_bandwidth_gbps")
        if lat is not None or bw is not None:
            changes[side] = _checked(lambda: Link(link.alpha if lat is None else lat / 1e6,
                                                  link.bandwidth if bw is None else bw * 1e9), f"--{side}-* flags")
    if args.gamma_ps_per_byte is not None:
        changes["gamma"] = args.gamma_ps_per_byte / 1e12
    if getattr(args, "nics_per_node", None) is not None:
        changes["nics"] = args.nics_per_node
    return _checked(lambda: dataclasses.replace(base, **changes), "the cluster flags")


def _ms(t):
    return f"{t * 1e3:10.3f}"


def describe_cluster(c: Cluster) -> str:
    return (f"cluster {c.name}: {c.nodes} nodes x {c.ranks_per_node} ranks = {c.size} ranks; intra-node "
            f"{c.intra.alpha * 1e6:.2f} us, {c.intra.bandwidth / 1e9:.3g} GB/s per pair; inter-node "
            f"{c.inter.alpha * 1e6:.2f} us, {c.inter.bandwidth / 1e9:.3g} GB/s per node"
            + (f" ({c.nics} NICs of {c.inter.bandwidth / c.nics / 1e9:.3f} GB/s, one rail each)" if c.nics > 1 else "")
            + f"; gamma {c.gamma * 1e12:.2f} ps/B")


def format_prediction(pred, top: int = 5, *, ranked) -> str:
    """A table of predicted times (ms) for one message size (``pred``: :func:`horovod_torus.costmodel.predict`,
    alpha-beta only), the ``top`` torus grids, and the recommendation: the fastest of ``ranked`` (the
    ranking of :func:`horovod_torus.costmodel.rank_algorithms` the output prints after it;
    :func:`recommendation`)."""
    ring = pred.times["ring"]
    lines = [f"message {int(pred.nbytes)} B ({pred.nbytes / 1e6:.1f} MB) per rank",
             f"  {'algorithm':<26} {'time (ms)':>10} {'vs ring':>8}"]
    for a in ALGORITHMS:
        label = f"torus {pred.best_grid} (best grid)" if a == "torus" else a
        lines.append(f"  {label:<26} {_ms(pred.times[a])} {ring / pred.times[a] if pred.times[a] else 0:>7.2f}x")
    if pred.natural_grid is not None:
        lines.append(f"  {'torus ' + str(pred.natural_grid) + ' (node per row)':<26} {_ms(pred.natural_time)} "
                     f"{ring / pred.natural_time:>7.2f}x")
    grids = sorted(pred.grid_times, key=lambda gt: gt[1])[:top]
    lines.append("  best torus grids: " + ", ".join(f"{g} {t * 1e3:.3f} ms" for g, t in grids))
    lines.append(f"  recommended: {recommendation(ranked)}")
    return "\n".join(lines)


def agreement_bytes(grid, size: int, transport: str = "horovod") -> int:
    """Bytes per rank of init's agreement exchange: the pickled settings each rank sends (mpi4py's
    ``allgather`` pickles with the highest protocol), as ``horovod_torus.tensorflow.init`` (horovod) or
    :meth:`horovod_torus.mpi.TorusComm.create` (library) build them, with default settings."""
    if transport == "horovod":
        settings = TorusSettings.resolve(size=size, grid=grid, transport="horovod", environ={})
        payload = {**settings.agreement(), "size": size, "process_sets": []}
    else:
        fields = ("grid", "column_algorithm", "stall_seconds")
        shown = TorusSettings.resolve(size=size, grid=grid, environ={}, fields=fields).agreement()
        payload = {k: shown[k] for k in fields}
    return len(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


RANKING_HEADER = ("rank", "algorithm", "grid", "latency (ms)", "transfer (ms)", "overhead (ms)", "per call (ms)",
                  "x best")


def ranking_rows(ranked) -> list[tuple[str, ...]]:
    """One row of strings per :class:`horovod_torus.costmodel.Ranked`, in :data:`RANKING_HEADER`'s columns."""
    return [(str(i), e.label, str(e.grid) if e.grid else "", f"{e.latency_s * 1e3:.3f}", f"{e.transfer_s * 1e3:.3f}",
             f"{e.overhead_s * 1e3:.3f}", f"{e.total_s * 1e3:.3f}", f"{e.ratio:.2f}") for i, e in enumerate(ranked, 1)]


def startup_rows(cluster: Cluster, ranked) -> list[tuple[str, str]]:
    """(what, estimate) rows: the per-call check, Horovod's coordination per cycle, the torus' start-up on
    the node-per-row grid and on every torus grid of ``ranked``, and the flat ring's latency as NCCL counts it."""
    p = cluster.size
    rows = [(f"per-call check: one MAX all-reduce of {CHECK_BYTES} B over {p:,} ranks (latency-bound)",
             f"{check_time(cluster) * 1e3:.3f} ms")]
    grids = [e.grid for e in ranked if e.grid is not None]
    natural = natural_grid(cluster)
    grids = list(dict.fromkeys(([natural] if natural else []) + grids))
    if grids:
        g = grids[0]
        rows.append((f"Horovod coordination per cycle: global set only / with the row and column sets of {g}",
                     f"{coordination_time(cluster) * 1e3:.3f} / {coordination_time(cluster, g) * 1e3:.3f} ms"))
    for g in grids:
        init = init_time(cluster, g, agreement_bytes(g, p, "horovod"), "horovod")
        rows.append((f"init on {g} over Horovod process sets: {init.sets} sets registered (Y rows + X columns = "
                     f"{g.y} + {g.x})", f"{init.registration_s * 1e3:.3f} ms"))
    if grids:
        g = grids[0]
        nbytes = agreement_bytes(g, p, "horovod")
        init = init_time(cluster, g, nbytes, "horovod")
        rows.append((f"init agreement exchange: allgather of {nbytes} B per rank (the pickled settings)",
                     f"{init.agreement_s * 1e3:.3f} ms"))
        lib = init_time(cluster, g, agreement_bytes(g, p, "library"), "library")
        rows.append((f"init on {g}, MPI transport (TorusComm.create): agreement + {lib.sets} communicators",
                     f"{lib.total_s * 1e3:.3f} ms"))
    rows.append(("flat ring latency as NCCL's tuning model counts it (2(N-1) hops at the inter-node alpha)",
                 f"{nccl_ring_latency(cluster) * 1e3:.3f} ms"))
    return rows


def _text_table(header, rows, indent="  ") -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: indent + "  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w)  # noqa: E731
                                        for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), *map(line, rows)])


def _md_table(header, rows) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(r) + " |" for r in rows)])


def size_label(n: int) -> str:
    """``n`` with ResNet-50's gradient sizes named."""
    names = {RESNET50_BYTES[0]: "ResNet-50 gradients, fp32", RESNET50_BYTES[1]: "ResNet-50 gradients, fp16"}
    return f"{names[n]}: {n:,} B per rank" if n in names else f"{n:,} B per rank"


def _cost_line(transport: str, cost: CallCost) -> str:
    return (f"per-call cost on the {transport} transport: {cost.call_s * 1e6:.1f} us per library call, Horovod "
            f"cycle {cost.cycle_s * 1e3:g} ms")


def markdown_page(clusters, sizes, transports, cost: CallCost, command: str) -> str:
    """The planner's ranking as a Markdown page (``docs/planner.md`` is this function's output)."""
    out = ["# Planner: which all-reduce on the paper's clusters", "",
           f"Generated by `{command}`; do not edit: `tests/unit/test_plan.py` checks that this page is the "
           "command's output.", "",
           "The predicted time of one all-reduce call for each algorithm, fastest first, and its ratio to the "
           "fastest (`horovod_torus/costmodel.py`). *latency*: the alpha terms alone (a call of 0 bytes); "
           "*transfer*: the alpha-beta time on the cluster's links (a step costs its slowest link, flows leaving "
           "a node share its NICs); *overhead*: library calls, Horovod's cycles and their coordination (one step "
           "per process set per cycle), and the torus' per-call check; *per call* = transfer + overhead. "
           "A training step makes one fused call per dtype (ResNet-50's gradients fit one buffer of Horovod's "
           "default fusion threshold), so *per call* is the step's communication. Each torus variant is listed "
           "on its best grid and on the node-per-row grid (X = GPUs per node). The *horovod* transport runs "
           "every collective as a Horovod op (the torus on its row and column process sets: the check and three "
           "phases, four ops, each waiting a cycle); the *library* transport makes the same collectives as "
           "plain MPI/NCCL calls (the torus' MPI transport).", "",
           f"Per-call cost: {cost.call_s * 1e6:.1f} us per library call (`costmodel.FITTED_CALL_S`, fitted on one "
           f"measured row of this project's 2-core host, see its docstring; `--call-overhead-us` sets your "
           f"machine's), Horovod cycle {cost.cycle_s * 1e3:g} ms.", ""]
    for cluster in clusters:
        out += [f"## {cluster.name}" + (f": {PRESET_NOTES[cluster.name]}" if cluster.name in PRESET_NOTES else ""), "",
                describe_cluster(cluster) + ".", ""]
        first = None
        for transport in transports:
            for n in sizes:
                ranked = rank_algorithms(cluster, n, transport, cost)
                first = first or ranked
                out += [f"### {size_label(n)}, {transport} transport", "",
                        _md_table(RANKING_HEADER, ranking_rows(ranked)), ""]
        out += [f"### Start-up and the per-call check at {cluster.size:,} ranks", "",
                _md_table(("estimate", "time"), startup_rows(cluster, first)), ""]
    return "\n".join(out).rstrip("\n") + "\n"


#: The largest world the planner evaluates: the cost model walks every link of every step, rank by rank
#: (measured: 8,000 ranks 6 s, 80,000 ranks 95 s on a 2-core host), and the ranking changes slowly with scale.
MAX_RANKS = 32768
#: The largest message per rank it takes (bytes): 1 PiB, far beyond any gradient.
MAX_BYTES = 2 ** 50

_FLOAT_FLAGS = ("intra_latency_us", "intra_bandwidth_gbps", "inter_latency_us", "inter_bandwidth_gbps",
                "gamma_ps_per_byte", "call_overhead_us", "cycle_ms")


def _check_flags(args) -> None:
    """ValueError naming a ``--top`` below 1 or a numeric flag that is infinite (NaN and the ranges are the
    cluster's own checks)."""
    if args.top < 1:
        raise ValueError(f"--top {args.top} must be >= 1 (how many torus grids to list)")
    for name in _FLOAT_FLAGS:
        value = getattr(args, name)
        if value is not None and math.isinf(value):
            raise ValueError(f"--{name.replace('_', '-')} {value} must be a finite number")


def _check_scale(clusters, sizes) -> None:
    """ValueError for a world above :data:`MAX_RANKS` ranks or a message above :data:`MAX_BYTES` bytes."""
    for cluster in clusters:
        if cluster.size > MAX_RANKS:
            raise ValueError(f"{cluster.nodes} nodes x {cluster.ranks_per_node} ranks = {cluster.size} ranks: the planner "
                             f"evaluates the model link by link and takes minutes above {MAX_RANKS} ranks; plan a "
                             f"cluster of at most {MAX_RANKS} ranks (the ranking changes slowly with scale)")
    for n in sizes:
        if n > MAX_BYTES:
            raise ValueError(f"--bytes {n} is more than {MAX_BYTES} (1 PiB) per rank: give the gradient bytes per rank")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        presets = args.preset or [None]
        if len(presets) > 1 and (args.calibrate or args.print_grid or args.json or args.cluster):
            raise ValueError(f"{len(presets)} presets given: --calibrate, --cluster, --print-grid and --json take one "
                             f"(pass a single --preset)")
        _check_flags(args)
        cost = CallCost(call_s=FITTED_CALL_S if args.call_overhead_us is None else args.call_overhead_us / 1e6,
                        cycle_s=HOROVOD_CYCLE_S if args.cycle_ms is None else args.cycle_ms / 1e3)
        doc = None
        if args.calibrate:
            doc = _load_json(args.calibrate, "--calibrate")
        clusters = [cluster_from_args(args, doc, preset) for preset in presets]
        cluster = clusters[0]
        out = {"cluster": dataclasses.asdict(cluster), "predictions": []}
        if doc is not None:
            link, rms = calibrate(doc, args.strategy, parse_size(args.min_bytes))
            one_node = int(doc.get("host", {}).get("nodes", 1)) == 1
            which = args.calibrate_link or (
                "both" if not (args.preset or args.cluster) else "intra" if one_node else "inter")
            if not args.print_grid:
                print(f"calibrated from {args.calibrate} ({args.strategy}, {doc['world_size']} ranks, grid "
                      f"{doc.get('grid')}): alpha = {link.alpha * 1e6:.2f} us, bandwidth = {link.bandwidth / 1e9:.3f} "
                      f"GB/s (beta = {link.beta * 1e12:.1f} ps/B), rms relative residual {rms:.1%}; applied to {which}")
            sides = ("intra", "inter") if which == "both" else (which,)
            # a benchmark's flat ring sends one flow per node boundary through ONE NIC: the node has nics x it
            node_link = Link(link.alpha, link.bandwidth * cluster.nics)
            cluster = dataclasses.replace(cluster, **{s: node_link if s == "inter" else link for s in sides})
            clusters = [cluster]
            out["cluster"] = dataclasses.asdict(cluster)
            out["calibration"] = {"file": args.calibrate, "strategy": args.strategy, "alpha_s": link.alpha,
                                  "bandwidth_Bps": link.bandwidth, "rms_relative_residual": rms, "link": which}
        sizes = [parse_size(b) for b in args.bytes] if args.bytes else list(RESNET50_BYTES)
        _check_scale(clusters, sizes)
    except (ValueError, OSError, KeyError) as e:
        print(f"horovod_torus.plan: error: {e}", file=sys.stderr)
        return 2
    if args.print_grid:
        print(grid_choice(rank_algorithms(cluster, sizes[0], args.transport[0], cost)))
        return 0
    if args.markdown:
        command = "python -m horovod_torus.plan " + " ".join(shlex.quote(a) for a in argv)
        print(markdown_page(clusters, sizes, args.transport, cost, command), end="")
        return 0
    for cluster in clusters:
        print(describe_cluster(cluster))
        first = None
        for n in sizes:
            pred = predict(cluster, n)
            rankings = {t: rank_algorithms(cluster, n, t, cost) for t in args.transport}
            best = rankings[args.transport[0]][0]  # the recommendation: the first transport's fastest
            print(format_prediction(pred, args.top, ranked=rankings[args.transport[0]]))
            entry = {"bytes": n, "times_s": pred.times, "best_grid": str(pred.best_grid),
                     "natural_grid": str(pred.natural_grid) if pred.natural_grid else None,
                     "natural_time_s": pred.natural_time, "recommended": best.algorithm,
                     "recommended_grid": str(best.grid) if best.grid else None, "ranking": {}}
            for transport in args.transport:
                ranked = rankings[transport]
                first = first or ranked
                print(f"  ranking with trees and the per-call cost ({_cost_line(transport, cost)}):")
                print(_text_table(RANKING_HEADER, ranking_rows(ranked), indent="    "))
                entry["ranking"][transport] = [
                    {"algorithm": e.algorithm, "grid": str(e.grid) if e.grid else None, "latency_s": e.latency_s,
                     "transfer_s": e.transfer_s, "overhead_s": e.overhead_s, "per_call_s": e.total_s,
                     "ratio": e.ratio} for e in ranked]
            out["predictions"].append(entry)
        print(f"start-up and the per-call check at {cluster.size} ranks:")
        print("\n".join(f"  {what}: {value}" for what, value in startup_rows(cluster, first)))
    if args.json:
        write_json_atomic(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
