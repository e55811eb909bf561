"""``python -m horovod_torus.plan``: choose the torus grid and compare all-reduce algorithms before booking nodes.

Examples::

    python -m horovod_torus.plan --preset abci --nodes 544            # ResNet-50 gradients, fp32 and fp16
    python -m horovod_torus.plan --cluster mycluster.json --bytes 64M
    python -m horovod_torus.plan --calibrate bench.json --strategy mpi  # fit alpha/beta from a benchmark run
    python -m horovod_torus.plan --preset abci --calibrate abci_bench.json --strategy mpi --calibrate-link inter

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
import sys

from horovod_torus.costmodel import ALGORITHMS, PRESETS, Cluster, Link, calibrate, predict
from horovod_torus import __version__
from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.report import parse_size

__all__ = ["main", "build_parser", "cluster_from_args", "format_prediction"]

#: ResNet-50's 25,583,592 trainable parameters as fp32 and fp16 gradients (bytes).
RESNET50_BYTES = (25_583_592 * 4, 25_583_592 * 2)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m horovod_torus.plan",
                                description="Alpha-beta predictions of ring, halving-doubling, hierarchical "
                                            "and 2D-torus all-reduce, and the recommended torus grid.")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a known cluster")
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
    p.add_argument("--json", metavar="FILE", help="write the predictions as JSON")
    p.add_argument("--print-grid", action="store_true",
                   help="print only the choice for the first message size: the best torus grid XxY, or "
                        "'ring' when the ring is faster or the best grid is 1xN/Nx1 (for job scripts)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def grid_choice(pred) -> str:
    """What a job script passes on (the app offers the torus and the ring): ``"ring"`` when the ring is
    predicted faster than the best torus grid, or when that grid is degenerate (1xN or Nx1: one flat
    all-reduce, which Horovod's own ring does with less overhead); else the grid ``"XxY"``."""
    g = pred.best_grid
    if pred.times["torus"] > pred.times["ring"] or g.x == 1 or g.y == 1:
        return "ring"
    return str(g)


def _link(spec: dict, what: str) -> Link:
    try:
        return Link(alpha=float(spec["latency_us"]) / 1e6, bandwidth=float(spec["bandwidth_gbps"]) * 1e9)
    except KeyError as e:
        raise ValueError(f"cluster description: {what} needs latency_us and bandwidth_gbps (missing {e})") from None


def _load_json(path: str, flag: str):
    """json.load of ``path``; a file that is not JSON raises ValueError naming the flag and the path."""
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{flag} {path}: not a JSON file ({e})") from None


def cluster_from_args(args, bench_doc: dict | None = None) -> Cluster:
    """Preset, then the --cluster file, then single flags; a single-node cluster from the benchmark JSON
    when neither preset nor file is given. Raises ValueError naming what is missing."""
    base = None
    if args.preset:
        base = PRESETS[args.preset]
    if args.cluster:
        spec = _load_json(args.cluster, "--cluster")
        base = Cluster(nodes=int(spec["nodes"]), ranks_per_node=int(spec["ranks_per_node"]),
                       intra=_link(spec["intra"], "intra"), inter=_link(spec["inter"], "inter"),
                       gamma=float(spec.get("gamma_ps_per_byte", 0.0)) / 1e12, name=spec.get("name", args.cluster),
                       nics=int(spec.get("nics_per_node", 1)),
                       exchange_efficiency=float(spec.get("exchange_efficiency", 1.0)))
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
        base = Cluster(nodes=args.nodes, ranks_per_node=args.ranks_per_node,
                       intra=Link(args.intra_latency_us / 1e6, args.intra_bandwidth_gbps * 1e9),
                       inter=Link(args.inter_latency_us / 1e6, args.inter_bandwidth_gbps * 1e9))
    changes = {}
    if args.nodes is not None:
        changes["nodes"] = args.nodes
    if args.ranks_per_node is not None:
        changes["ranks_per_node"] = args.ranks_per_node
    for side in ("intra", "inter"):
        link = getattr(base, side)
        lat, bw = getattr(args, f"{side}_latency_us"), getattr(args, f"{side}_bandwidth_gbps")
        if lat is not None or bw is not None:
            changes[side] = Link(link.alpha if lat is None else lat / 1e6, link.bandwidth if bw is None else bw * 1e9)
    if args.gamma_ps_per_byte is not None:
        changes["gamma"] = args.gamma_ps_per_byte / 1e12
    if getattr(args, "nics_per_node", None) is not None:
        changes["nics"] = args.nics_per_node
    return dataclasses.replace(base, **changes)


def _ms(t):
    return f"{t * 1e3:10.3f}"


def describe_cluster(c: Cluster) -> str:
    return (f"cluster {c.name}: {c.nodes} nodes x {c.ranks_per_node} ranks = {c.size} ranks; intra-node "
            f"{c.intra.alpha * 1e6:.2f} us, {c.intra.bandwidth / 1e9:.3g} GB/s per pair; inter-node "
            f"{c.inter.alpha * 1e6:.2f} us, {c.inter.bandwidth / 1e9:.3g} GB/s per node"
            + (f" ({c.nics} NICs of {c.inter.bandwidth / c.nics / 1e9:.3f} GB/s, one rail each)" if c.nics > 1 else "")
            + f"; gamma {c.gamma * 1e12:.2f} ps/B")


def format_prediction(pred, top: int = 5) -> str:
    """A table of predicted times (ms) for one message size."""
    ring = pred.times["ring"]
    lines = [f"message {int(pred.nbytes)} B ({pred.nbytes / 1e6:.1f} MB) per rank",
             f"  {'algorithm':<26} {'time (ms)':>10} {'vs ring':>8}"]
    for a in ALGORITHMS:
        label = f"torus {pred.best_grid} (best grid)" if a == "torus" else a
        lines.append(f"  {label:<26} {_ms(pred.times[a])} {ring / pred.times[a] if pred.times[a] else 0:>7.2f}x")
    if pred.natural_grid is not None:
        lines.append(f"  {'torus ' + str(pred.natural_grid) + ' (node per row)':<26} {_ms(pred.natural_time)} "
                     f"{ring / pred.natural_time:>7.2f}x")
    ranked = sorted(pred.grid_times, key=lambda gt: gt[1])[:top]
    lines.append("  best torus grids: " + ", ".join(f"{g} {t * 1e3:.3f} ms" for g, t in ranked))
    lines.append(f"  recommended: {pred.recommended}" + (f" on grid {pred.best_grid}" if pred.recommended == "torus" else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        doc = None
        if args.calibrate:
            doc = _load_json(args.calibrate, "--calibrate")
        cluster = cluster_from_args(args, doc)
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
            out["cluster"] = dataclasses.asdict(cluster)
            out["calibration"] = {"file": args.calibrate, "strategy": args.strategy, "alpha_s": link.alpha,
                                  "bandwidth_Bps": link.bandwidth, "rms_relative_residual": rms, "link": which}
        sizes = [parse_size(b) for b in args.bytes] if args.bytes else list(RESNET50_BYTES)
    except (ValueError, OSError, KeyError) as e:
        print(f"horovod_torus.plan: error: {e}", file=sys.stderr)
        return 2
    if args.print_grid:
        print(grid_choice(predict(cluster, sizes[0])))
        return 0
    print(describe_cluster(cluster))
    for n in sizes:
        pred = predict(cluster, n)
        print(format_prediction(pred, args.top))
        out["predictions"].append({"bytes": n, "times_s": pred.times, "best_grid": str(pred.best_grid),
                                   "natural_grid": str(pred.natural_grid) if pred.natural_grid else None,
                                   "natural_time_s": pred.natural_time, "recommended": pred.recommended})
    if args.json:
        write_json_atomic(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
