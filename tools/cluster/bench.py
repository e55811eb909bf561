"""``python -m tools.cluster.bench``: the all-reduce sweep on an emulated cluster, both wirings,
with the planner's prediction beside every measurement (root; ``make cluster-bench``).

For each wiring (``node``, ``rails``): bring the cluster up, run ``python -m horovod_torus.bench`` once per
launch group (:func:`tools.cluster.results.launches`: every strategy under mpirun with the torus on
Horovod's ops, each forced Open MPI algorithm, torus and ring under horovodrun --gloo) over the whole
sweep, then ``--repeats`` - 1 more times at the ``--repeat-sizes`` only (``--repeat-iters`` timed
iterations), the order of the launch groups (and of the strategies in each) reversed in every other
repeat; bring it down. Rows at the repeated sizes are the median over the launches with their min-max
(:mod:`tools.cluster.aggregate`). A one-node run (L ranks on node0, ``MPI_Allreduce``) fits the
intra-node link; the node wiring's ``mpi-ring`` rows fit the inter-node link (alpha, bandwidth per NIC);
the cost model then predicts every row. The torus' crossover (``--min-torus-bytes``, default ``auto``) is
calibrated by the first launch of each launch group and wiring and cached for its repeats in
``OUT/cache/<wiring>-<group>`` (``HOROVOD_TORUS_CACHE_DIR``). Writes ``OUT/bench.json`` (rows,
calibration, targets, planner pass counts, load, elapsed time), ``OUT/bench.png``, the calibrated planner
descriptions ``OUT/cluster-<wiring>.json``, every launch's JSON and log under ``OUT/raw``
(``<wiring>-<group>-r<repeat>.json``), and prints the tables.

    python -m tools.cluster.bench                 # 4 nodes x 2, 200 Mbit/s, 1-32 MiB, 8 and 32 MiB x 3
    python -m tools.cluster.bench --estimate      # the expected wall time, from docs/cluster_bench.json
    python -m tools.cluster.bench --wirings rails --repeats 1 --maxbytes 16M
    python -m tools.cluster.bench --from-raw      # recompute tables/plot from OUT/raw
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from horovod_torus.atomic import save_figure_atomic, write_json_atomic
from horovod_torus.bench.report import format_size, parse_size, sweep_sizes
from horovod_torus.costmodel import model_coefficients
from tools.cluster import net
from tools.cluster.aggregate import aggregate_launches, format_planner_counts, planner_check, planner_counts
from tools.cluster.budget import estimate_seconds, heavy_groups
from tools.cluster.launch import horovodrun_argv, mpirun_argv
from tools.cluster.layout import WIRINGS, ClusterSpec, parse_rate
from tools.cluster.rounds import clear_raw, launch_plan, raw_launch_files, raw_name
from tools.cluster.results import (
    OMPI_ALGORITHMS, TARGET_SIZES, Launch, add_predictions, fit_exchange_efficiency, fit_link, fit_or_origin,
    format_rows_table, format_targets, launches, label, make_cluster, rows_from_doc, target_ratios,
)

__all__ = ["main", "build_parser", "plot_cluster_rows", "PREVIOUS"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The earlier run whose timestamps ``--estimate`` scales (the committed results).
PREVIOUS = os.path.join(ROOT, "docs", "cluster_bench.json")


def _log(msg):
    print(f"[cluster-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.cluster.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--rate", default="200mbit", help="per NIC and direction (200mbit)")
    p.add_argument("--wirings", nargs="+", choices=WIRINGS, default=list(WIRINGS))
    p.add_argument("-b", "--minbytes", default="1M")
    p.add_argument("-e", "--maxbytes", default="32M")
    p.add_argument("-f", "--stepfactor", default="2")
    p.add_argument("-n", "--iters", type=int, default=2, help="timed iterations per row of the main sweep (2)")
    p.add_argument("-w", "--warmup", type=int, default=1, help="warm-up iterations per row (1)")
    p.add_argument("--repeat-sizes", nargs="*", default=["8M", "32M"], metavar="SIZE",
                   help="sizes of the main sweep that every launch group runs again (8M 32M; none: no repeats)")
    p.add_argument("--repeats", type=int, default=5,
                   help="launches per row at the repeated sizes, the main sweep's included (5)")
    p.add_argument("--repeat-iters", type=int, default=1, help="timed iterations per row of a repeat launch (1)")
    p.add_argument("--min-torus-bytes", default="auto",
                   help="HOROVOD_TORUS_MIN_BYTES of every launch: auto (the calibrated crossover, cached per "
                        "launch group) or bytes (0: always the torus) (auto)")
    p.add_argument("--algorithms", nargs="*", default=["ring", "rabenseifner"],
                   help=f"forced Open MPI algorithms, each a launch: {' '.join(OMPI_ALGORITHMS)} (ring rabenseifner)")
    p.add_argument("--reference", default="node:mpi-ring",
                   help="WIRING:STRATEGY whose rows fit the inter-node link (node:mpi-ring)")
    p.add_argument("--out", default="runs/cluster_bench")
    p.add_argument("--name", default="htcb", help="cluster name (namespace prefix) (htcb)")
    p.add_argument("--launch-timeout", type=float, default=1500, help="seconds per launch (1500)")
    p.add_argument("--from-raw", action="store_true", help="no runs: recompute from OUT/raw")
    p.add_argument("--rescore", metavar="BENCH.json", default=None,
                   help="no runs: make the predictions, targets and planner counts of an earlier bench.json "
                        "(e.g. docs/cluster_bench.json) again with the current cost model, from its own "
                        "calibration and rows; writes OUT/bench.json and prints the tables")
    p.add_argument("--estimate", action="store_true",
                   help="no runs: print the expected wall time, scaled from --previous's timestamps")
    p.add_argument("--previous", default=PREVIOUS, help="the earlier bench.json --estimate scales "
                                                          "(docs/cluster_bench.json)")
    p.add_argument("--only", nargs="+", default=None, metavar="LABEL",
                   help="rerun only these launches (intra, mpirun, mpi-<algorithm>, gloo) into OUT/raw, keeping "
                        "the others' results, then recompute")
    return p


def _bench_command(python, args, grid, launch: Launch, json_path, repeat: int = 0):
    if repeat == 0:
        sizes = ["-b", args.minbytes, "-e", args.maxbytes, "-f", args.stepfactor, "-n", str(args.iters)]
    else:
        sizes = ["--sizes", ",".join(str(parse_size(x)) for x in args.repeat_sizes), "-n", str(args.repeat_iters)]
    return [python, "-m", "horovod_torus.bench", *sizes, "-w", str(args.warmup), "-c", "1", "--grid", grid,
            "--strategies", *launch.strategies, *launch.bench_args, "--json", json_path]


def _env(python, args):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONWARNINGS", "ignore")
    env.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "600")
    env["HOROVOD_TORUS_MIN_BYTES"] = str(args.min_torus_bytes)
    env["PYTHON"] = python
    return env


def _run_launch(spec, files, launch, command, log_path, timeout, env, np=None):
    if launch.launcher == "mpirun":
        argv = mpirun_argv(spec, files, command, np=np, mca=launch.mca, environ=env)
    else:
        argv = horovodrun_argv(spec, files, command, start_timeout=300)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        rc = net.launch(spec, files, argv, timeout=timeout, env=env, log=_log, stdout=log)
    seconds = time.monotonic() - t0
    _log(f"{spec.wiring}/{os.path.basename(log_path)[:-4]}: exit {rc} after {seconds:.0f} s (log {log_path})")
    return rc, seconds


def run_all(args, raw) -> dict:
    """Every launch of every wiring; returns {"failed", "load", "launch_log", "elapsed_s"} facts."""
    python = sys.executable
    env = _env(python, args)
    rate = parse_rate(args.rate)
    n, L = args.nodes, args.ranks_per_node
    grid = f"{L}x{n}"
    cache = os.path.abspath(os.path.join(args.out, "cache"))
    clear_raw(raw, cache, args.wirings, args.only)
    t0 = time.monotonic()
    failed, log = [], []
    load = [{"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": os.getloadavg()}]
    groups = [g for g in launches(args.algorithms) if args.only is None or g.label in args.only]
    for i, wiring in enumerate(args.wirings):
        spec = ClusterSpec(nodes=n, ranks_per_node=L, wiring=wiring, rate_mbit=rate, name=args.name)
        with net.cluster(spec, log=_log) as files:
            if i == 0 and L > 1 and (args.only is None or "intra" in args.only):  # intra-node link: node0
                intra = Launch("intra", "mpirun", ("mpi",))
                cmd = _bench_command(python, args, f"{L}x1", intra, os.path.join(raw, "intra.json"))
                rc, _ = _run_launch(spec, files, intra, cmd, os.path.join(raw, "intra.log"), args.launch_timeout,
                                    env, np=L)
                failed += ["intra"] if rc else []
            for repeat, launch in launch_plan(groups, args.repeats, args.repeat_sizes):
                out = os.path.join(raw, raw_name(wiring, launch.label, repeat))
                cmd = _bench_command(python, args, grid, launch, out, repeat)
                launch_env = {**env, "HOROVOD_TORUS_CACHE_DIR": os.path.join(cache, f"{wiring}-{launch.label}")}
                start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                rc, seconds = _run_launch(spec, files, launch, cmd, out[:-5] + ".log", args.launch_timeout,
                                          launch_env)
                log.append({"wiring": wiring, "group": launch.label, "repeat": repeat, "utc": start,
                            "seconds": round(seconds, 1), "exit": rc})
                failed += [f"{wiring}-{launch.label}-r{repeat}"] if rc else []
        load.append({"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": os.getloadavg()})
    return {"failed": failed, "load": load, "launch_log": log, "elapsed_s": round(time.monotonic() - t0, 1)}


def plot_cluster_rows(rows, path, title):
    """Measured time (solid, markers) and prediction (dashed) against size, one panel per wiring."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wirings = [w for w in WIRINGS if any(r["wiring"] == w for r in rows)]
    fig, axes = plt.subplots(1, len(wirings), figsize=(6.5 * len(wirings), 5), squeeze=False, sharey=True)
    keys = list(dict.fromkeys(label(r) for r in rows))
    colors = dict(zip(keys, list(plt.cm.tab10.colors) + list(plt.cm.Dark2.colors)))
    for ax, wiring in zip(axes[0], wirings):
        for key in keys:
            sel = sorted((r for r in rows if r["wiring"] == wiring and label(r) == key), key=lambda r: r["size_bytes"])
            if not sel:
                continue
            x = [r["size_bytes"] / 1024 ** 2 for r in sel]
            ax.plot(x, [r["time_s"] for r in sel], "o-", color=colors[key], label=key, markersize=3)
            if all(r.get("predicted_s") is not None for r in sel):
                ax.plot(x, [r["predicted_s"] for r in sel], "--", color=colors[key], alpha=0.7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message per rank (MiB)")
        ax.set_title(f"{wiring} wiring")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("time per all-reduce (s, slowest rank); dashed: model")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)


#: The facts of the machine the emulated nodes share, each from the first launch's benchmark JSON (``host``) with it:
#: the CPU model goes with every speed figure.
MACHINE_FACTS = ("cpu_model", "cpu_count", "platform", "python", "numpy", "tensorflow", "horovod", "mpi4py",
                 "mpi_library")


def reference(text: str) -> tuple[str, str, str]:
    """``WIRING:STRATEGY`` (``@gloo``: under horovodrun) -> (wiring, strategy, launcher)."""
    wiring, strategy = text.split(":", 1)
    launcher = "horovodrun" if strategy.endswith("@gloo") else "mpirun"
    return wiring, strategy.removesuffix("@gloo"), launcher


def analyse(args, raw, facts) -> dict:
    n, L = args.nodes, args.ranks_per_node
    grid = f"{L}x{n}"
    rate = parse_rate(args.rate)
    files, groups = raw_launch_files(raw), {g.label: g for g in launches(args.algorithms)}
    # every wiring with results in raw (a rerun of one wiring keeps the other's rows)
    wirings = [w for w in WIRINGS if any(key[0] == w and key[1] in groups for key in files)]
    launch_rows, hosts, machine = [], {}, {}
    for (wiring, group, repeat), path in sorted(files.items()):
        if wiring not in wirings or group not in groups:
            continue
        with open(path) as f:
            doc = json.load(f)
        launch_rows += rows_from_doc(doc, wiring, groups[group], repeat)
        hosts[f"{wiring}-{group}"] = doc.get("host", {}).get("ranks_per_host")
        for k in MACHINE_FACTS:   # each fact from the first launch that recorded it
            if k in doc.get("host", {}):
                v = doc["host"][k]
                machine.setdefault(k, v.replace("\x00", "").strip() if isinstance(v, str) else v)  # mpi_library ends in NUL
    for wiring in wirings:
        for group in groups:
            if (wiring, group, 0) not in files:
                _log(f"missing {os.path.join(raw, raw_name(wiring, group, 0))}: its rows are left out")
    rows = aggregate_launches(launch_rows)
    ref_wiring, ref_strategy, ref_launcher = reference(args.reference)
    ref_rows = [r for r in rows if (r["wiring"], r["strategy"], r["launcher"]) == (ref_wiring, ref_strategy, ref_launcher)]
    if not ref_rows:
        raise ValueError(f"--reference {args.reference}: no such rows (have "
                         f"{sorted({(r['wiring'], r['strategy']) for r in rows})})")
    nic_link, rms = fit_link(ref_rows, n * L)
    intra_path = os.path.join(raw, "intra.json")
    from horovod_torus.costmodel import Link

    intra, intra_rms = Link(alpha=1e-6, bandwidth=1e9), None
    if os.path.exists(intra_path):
        with open(intra_path) as f:
            idoc = json.load(f)
        a, b = model_coefficients("mpi", L)
        irows = idoc["rows"]
        intra, intra_rms = fit_or_origin([r["size_bytes"] for r in irows], [r["time_us"]["max"] * 1e-6 for r in irows],
                                         a, b)
    # the pairwise-exchange efficiency: fitted on Open MPI's default flat all-reduce (Rabenseifner's
    # exchanges) in the reference's wiring, with the links above
    ex_ref = (ref_wiring, "mpi", "mpirun")
    ex_rows = [r for r in rows if (r["wiring"], r["strategy"], r["launcher"]) == ex_ref]
    efficiency, ex_rms = 1.0, None
    if ex_rows:
        ref_spec = ClusterSpec(nodes=n, ranks_per_node=L, wiring=ref_wiring, rate_mbit=rate, name=args.name)
        efficiency, ex_rms = fit_exchange_efficiency(
            ex_rows, make_cluster(n, L, ref_spec.nics, intra, nic_link, name="reference"))
    specs = _wiring_clusters(n, L, wirings, rate, args.name, intra, nic_link, efficiency)
    clusters = {wiring: cluster for wiring, (_, cluster) in specs.items()}
    for wiring, (spec, _) in specs.items():
        desc = spec.planner_description(inter_latency_us=nic_link.alpha * 1e6, intra_latency_us=intra.alpha * 1e6,
                                        intra_bandwidth_gbps=intra.bandwidth / 1e9)
        desc["inter"]["bandwidth_gbps"] = nic_link.bandwidth * spec.nics / 1e9
        desc["exchange_efficiency"] = efficiency
        desc["name"] += " (calibrated)"
        write_json_atomic(os.path.join(args.out, f"cluster-{wiring}.json"), desc)
    scored = score(rows, clusters, grid, (ref_wiring, ref_strategy, ref_launcher), *([ex_ref] if ex_rows else []))
    calibration = {"reference": args.reference, "inter_alpha_s": nic_link.alpha,
                   "inter_bandwidth_Bps_per_nic": nic_link.bandwidth, "inter_rms_relative_residual": rms,
                   "nominal_Bps_per_nic": rate * 1e6 / 8 if rate else None,
                   "intra_alpha_s": intra.alpha, "intra_bandwidth_Bps": intra.bandwidth,
                   "intra_rms_relative_residual": intra_rms,
                   "exchange_reference": f"{ref_wiring}:mpi" if ex_rows else None,
                   "exchange_efficiency": efficiency, "exchange_rms_relative_residual": ex_rms}
    return {**scored, "calibration": calibration, "host": machine, "ranks_per_host": hosts, "grid": grid,
            "wirings": wirings}


def _wiring_clusters(n: int, L: int, wirings, rate_mbit, name: str, intra, nic_link, efficiency: float) -> dict:
    """``{wiring: (ClusterSpec, costmodel cluster)}`` of the emulated ``n`` nodes x ``L`` ranks in each of
    ``wirings``, with the calibrated links (``intra``, ``nic_link``: :class:`horovod_torus.costmodel.Link`,
    seconds and bytes/s) and the pairwise-exchange efficiency: the one place :func:`analyse` and
    :func:`rescore` build the clusters they predict with."""
    specs = {}
    for wiring in wirings:
        spec = ClusterSpec(nodes=n, ranks_per_node=L, wiring=wiring, rate_mbit=rate_mbit, name=name)
        specs[wiring] = spec, make_cluster(n, L, spec.nics, intra, nic_link, name=f"cluster-in-a-box {wiring}",
                                           exchange_efficiency=efficiency)
    return specs


#: The keys :func:`score` adds to a row.
SCORE_KEYS = ("model", "predicted_s", "calibration", "planner_ratio", "planner_ok")


def score(rows, clusters: dict, grid: str, *references) -> dict:
    """``{"rows", "targets", "planner_passes"}``: the measured ``rows`` with the cost model's prediction
    and its check (:func:`tools.cluster.results.add_predictions`, ``planner_check``; ``references``: the
    (wiring, strategy, launcher) the links were fitted on), the target ratios and the planner's pass
    counts, for every wiring in ``clusters``."""
    rows = planner_check(add_predictions(rows, clusters, grid, *references))
    return {"rows": rows, "targets": {w: target_ratios(rows, w) for w in clusters},
            "planner_passes": {"all sizes": planner_counts(rows), "8 and 32 MiB": planner_counts(rows, TARGET_SIZES)}}


def rescore(doc: dict) -> dict:
    """An earlier ``bench.json`` (``doc``) with its predictions, targets and planner counts made again by the
    current cost model from its own calibration (links, exchange efficiency) and measured rows; the rows'
    times, the launches and the facts are kept; ``rescored_utc`` says when. Raises ValueError for a file
    without a calibration."""
    from horovod_torus.costmodel import Link

    c, cfg = doc.get("calibration"), doc.get("config", {})
    if not c or "inter_alpha_s" not in c:
        raise ValueError("--rescore: the file has no calibration (write it with python -m tools.cluster.bench)")
    n, L = cfg["nodes"], cfg["ranks_per_node"]
    nic_link = Link(alpha=c["inter_alpha_s"], bandwidth=c["inter_bandwidth_Bps_per_nic"])
    intra = Link(alpha=c["intra_alpha_s"], bandwidth=c["intra_bandwidth_Bps"])
    clusters = {wiring: cluster for wiring, (_, cluster) in _wiring_clusters(
        n, L, doc["wirings"], parse_rate(cfg["rate"]), cfg.get("name", "htcb"), intra, nic_link,
        c["exchange_efficiency"]).items()}

    refs = [reference(c["reference"])] + ([reference(c["exchange_reference"])] if c.get("exchange_reference") else [])
    rows = [{k: v for k, v in r.items() if k not in SCORE_KEYS} for r in doc["rows"]]
    return {**doc, **score(rows, clusters, doc["grid"], *refs),
            "rescored_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _exchange_text(c) -> str:
    if not c["exchange_reference"]:
        return "pairwise exchanges at the full link rate (no Open MPI default rows to fit them on)"
    edge = "; at the edge of the fitted range 0.05-1" if c["exchange_efficiency"] in (0.05, 1.0) else ""
    return (f"pairwise exchanges at {c['exchange_efficiency']:.2f} of the link rate (fitted on "
            f"{c['exchange_reference']}, rms residual {c['exchange_rms_relative_residual']:.1%}{edge})")


def _check(args) -> None:
    """Every flag's value, before anything runs. Raises ValueError naming the value and the fix."""
    from horovod_torus.settings import TorusSettings

    parse_rate(args.rate)
    ClusterSpec(nodes=args.nodes, ranks_per_node=args.ranks_per_node, name=args.name)
    launches(args.algorithms)
    for flag, value, least in (("--iters", args.iters, 1), ("--warmup", args.warmup, 0),
                               ("--repeats", args.repeats, 1), ("--repeat-iters", args.repeat_iters, 1)):
        if value < least:
            raise ValueError(f"{flag} {value} must be >= {least}")
    try:
        TorusSettings.resolve(size=args.nodes * args.ranks_per_node, min_torus_bytes=args.min_torus_bytes,
                              environ={})
    except ValueError as e:
        raise ValueError(f"--min-torus-bytes {args.min_torus_bytes}: {e}") from None
    sweep = sweep_sizes(parse_size(args.minbytes), parse_size(args.maxbytes), float(args.stepfactor))
    for text in args.repeat_sizes:
        if parse_size(text) not in sweep:
            raise ValueError(f"--repeat-sizes {text} is not a size of the main sweep "
                             f"({', '.join(format_size(x) for x in sweep)}): pick among those, or widen "
                             f"--minbytes/--maxbytes")


def _estimate(args) -> dict | None:
    """estimate_seconds for ``args`` from ``args.previous`` (None, with a log line, when it cannot)."""
    try:
        with open(args.previous) as f:
            previous = json.load(f)
        sweep = sweep_sizes(parse_size(args.minbytes), parse_size(args.maxbytes), float(args.stepfactor))
        groups = launches(args.algorithms)
        return estimate_seconds(previous, previous_groups=heavy_groups(launches(previous["config"]["algorithms"])),
                                groups=heavy_groups(groups), wirings=args.wirings, sizes=sweep,
                                repeat_sizes=[parse_size(x) for x in args.repeat_sizes], repeats=args.repeats,
                                iters=args.iters, warmup=args.warmup, repeat_iters=args.repeat_iters,
                                heavy_labels=[g.label for g in groups if heavy_groups([g])])
    except (OSError, KeyError, ValueError) as e:
        _log(f"no time estimate from {args.previous}: {e}")
        return None


def _estimate_text(estimate, previous) -> str:
    parts = ", ".join(f"{w} {s / 60:.0f}" for w, s in estimate.items() if w != "total")
    return (f"expected {estimate['total'] / 60:.0f} min ({parts}), scaled from the earlier run {previous} "
            f"(without the crossover's first calibrations, 1-2 min per wiring)")


def _merge_facts(old, new, only) -> dict:
    """The facts of a --only rerun: the earlier launches' facts, those of the rerun groups replaced."""
    def kept(name):
        return name.split("-", 1)[-1].rsplit("-r", 1)[0] not in only and name not in only

    return {"failed": [x for x in old["failed"] if kept(x)] + new["failed"], "load": old["load"] + new["load"],
            "launch_log": [x for x in old.get("launch_log", []) if x["group"] not in only] + new["launch_log"],
            "elapsed_s": old.get("elapsed_s"), "estimate_s": old.get("estimate_s"),
            "reruns": old.get("reruns", []) + [{"wirings": new.get("wirings"), "only": only, "load": new["load"],
                                                 "elapsed_s": new["elapsed_s"]}]}


def main(argv=None) -> int:
    started = time.monotonic()
    args = build_parser().parse_args(argv)
    try:
        _check(args)
    except ValueError as e:
        print(f"tools.cluster.bench: error: {e}", file=sys.stderr)
        return 2
    estimate = _estimate(args)
    if args.estimate:
        if estimate is None:
            print(f"tools.cluster.bench: error: no estimate: {args.previous} has no usable timestamps",
                  file=sys.stderr)
            return 2
        print(_estimate_text(estimate, args.previous))
        return 0
    if args.rescore is not None:
        try:
            with open(args.rescore) as f:
                doc = rescore(json.load(f))
        except (OSError, ValueError, KeyError) as e:
            print(f"tools.cluster.bench: error: --rescore {args.rescore}: {e!r}", file=sys.stderr)
            return 2
        os.makedirs(args.out, exist_ok=True)
        write_json_atomic(os.path.join(args.out, "bench.json"), doc)
        plot_cluster_rows(doc["rows"], os.path.join(args.out, "bench.png"), doc["description"])
        report(doc)
        print(f"\nwrote {os.path.join(args.out, 'bench.json')} and bench.png: {args.rescore} rescored (no launches)")
        return 0
    net.interrupt_on_sigterm()
    raw = os.path.join(args.out, "raw")
    os.makedirs(raw, exist_ok=True)
    facts_path = os.path.join(raw, "facts.json")
    try:
        if args.from_raw:
            with open(facts_path) as f:
                facts = json.load(f)
        else:
            net.require_root()
            if estimate is not None:
                _log(_estimate_text(estimate, args.previous))
            facts = {**run_all(args, raw), "wirings": args.wirings,
                     "estimate_s": None if estimate is None else round(estimate["total"], 1)}
            if args.only is not None and os.path.exists(facts_path):  # keep the earlier launches' facts
                with open(facts_path) as f:
                    facts = _merge_facts(json.load(f), facts, args.only)
            write_json_atomic(facts_path, facts)
        result = analyse(args, raw, facts)
    except (ValueError, OSError, net.ClusterError) as e:
        print(f"tools.cluster.bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tools.cluster.bench: interrupted (the cluster was removed)", file=sys.stderr)
        return 130
    doc = {"description": f"all-reduce on an emulated cluster: {args.nodes} nodes x {args.ranks_per_node} ranks, "
                          f"{args.rate} per NIC and direction, float32, grid {result['grid']}",
           "config": {k: v for k, v in vars(args).items()
                      if k not in ("from_raw", "only", "wirings", "estimate", "previous", "rescore")},
           **result, "failed_launches": facts["failed"], "load": facts["load"],
           "launch_log": facts.get("launch_log", []), "elapsed_s": facts.get("elapsed_s"),
           "estimate_s": facts.get("estimate_s")}
    write_json_atomic(os.path.join(args.out, "bench.json"), doc)
    plot_cluster_rows(result["rows"], os.path.join(args.out, "bench.png"), doc["description"])
    report(doc, args.out)
    ran = f"launches took {doc['elapsed_s'] / 60:.1f} min" if doc["elapsed_s"] is not None else "launch time unknown"
    print(f"\nwrote {os.path.join(args.out, 'bench.json')} and bench.png; failed launches: {facts['failed'] or 'none'}; "
          f"{ran}; this command {(time.monotonic() - started) / 60:.1f} min"
          + (f" (expected {doc['estimate_s'] / 60:.0f} min)" if doc["estimate_s"] else ""))
    return 1 if facts["failed"] else 0


def report(doc: dict, out: str | None = None) -> None:
    """Print a bench.json's calibration, tables, targets and planner counts, and (``out``: the folder of its
    calibrated ``cluster-<wiring>.json``) the planner's ranking on each calibrated cluster."""
    c = doc["calibration"]
    print(f"\ninter-node link fitted on {c['reference']}: alpha {c['inter_alpha_s'] * 1e6:.0f} us, "
          f"{c['inter_bandwidth_Bps_per_nic'] * 8 / 1e6:.0f} Mbit/s per NIC (nominal "
          f"{(c['nominal_Bps_per_nic'] or 0) * 8 / 1e6:.0f}), rms residual {c['inter_rms_relative_residual']:.1%}; "
          f"intra-node: alpha {c['intra_alpha_s'] * 1e6:.0f} us, {c['intra_bandwidth_Bps'] / 1e9:.2f} GB/s; "
          f"{_exchange_text(c)}")
    for w in doc["wirings"]:
        print(f"\n## {w} wiring: time per all-reduce in s, slowest rank, median [min-max] over launches "
              f"(model's prediction)\n")
        print(format_rows_table(doc["rows"], w))
    for w in doc["wirings"]:
        print(f"\n## targets, {w} wiring (ratio of the medians [per-launch min-max])\n")
        print(format_targets(doc["targets"][w]))
    print()
    for what, counts in doc["planner_passes"].items():
        print(format_planner_counts(counts, what))
    if out is None:
        return
    from horovod_torus import plan

    for w in doc["wirings"]:
        print(f"\n## planner on the calibrated {w} cluster\n")
        plan.main(["--cluster", os.path.join(out, f"cluster-{w}.json"), "--bytes", "8M", "32M", "--top", "3"])


if __name__ == "__main__":
    sys.exit(main())
