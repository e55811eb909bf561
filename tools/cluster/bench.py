"""``python -m tools.cluster.bench``: the all-reduce sweep on an emulated cluster, both wirings,
with the planner's prediction beside every measurement (root; ``make cluster-bench``).

For each wiring (``node``, ``rails``): bring the cluster up, run ``python -m horovod_torus.bench`` once per
launch (:func:`tools.cluster.results.launches`: every strategy under mpirun with the torus on
Horovod's ops, each forced Open MPI algorithm, torus and ring under horovodrun --gloo), bring it down. A
one-node run (L ranks on node0, ``MPI_Allreduce``) fits the intra-node link; the node wiring's
``mpi-ring`` rows fit the inter-node link (alpha, bandwidth per NIC); the cost model then predicts every
row. Writes ``OUT/bench.json`` (rows, calibration, targets, load), ``OUT/bench.png``, the calibrated
planner descriptions ``OUT/cluster-<wiring>.json``, the raw benchmark JSONs and logs under ``OUT/raw``,
and prints the tables.

    python -m tools.cluster.bench                 # 4 nodes x 2, 200 Mbit/s, 1-64 MiB
    python -m tools.cluster.bench --wirings rails --iters 2 --maxbytes 32M
    python -m tools.cluster.bench --from-raw      # recompute tables/plot from OUT/raw
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from horovod_torus.atomic import save_figure_atomic, write_json_atomic
from horovod_torus.bench.report import parse_size
from horovod_torus.costmodel import model_coefficients
from tools.cluster import net
from tools.cluster.launch import horovodrun_argv, mpirun_argv
from tools.cluster.layout import WIRINGS, ClusterSpec, parse_rate
from tools.cluster.results import (
    OMPI_ALGORITHMS, Launch, add_predictions, fit_exchange_efficiency, fit_link, fit_or_origin, format_rows_table,
    format_targets, launches, label, make_cluster, rows_from_doc, target_ratios,
)

__all__ = ["main", "build_parser", "plot_cluster_rows"]


def _log(msg):
    print(f"[cluster-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.cluster.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--rate", default="200mbit", help="per NIC and direction (200mbit)")
    p.add_argument("--wirings", nargs="+", choices=WIRINGS, default=list(WIRINGS))
    p.add_argument("-b", "--minbytes", default="1M")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", default="2")
    p.add_argument("-n", "--iters", type=int, default=3, help="timed iterations per row (3)")
    p.add_argument("-w", "--warmup", type=int, default=1, help="warm-up iterations per row (1)")
    p.add_argument("--algorithms", nargs="*", default=["ring", "rabenseifner"],
                   help=f"forced Open MPI algorithms, each a launch: {' '.join(OMPI_ALGORITHMS)} (ring rabenseifner)")
    p.add_argument("--reference", default="node:mpi-ring",
                   help="WIRING:STRATEGY whose rows fit the inter-node link (node:mpi-ring)")
    p.add_argument("--out", default="runs/cluster_bench")
    p.add_argument("--name", default="htcb", help="cluster name (namespace prefix) (htcb)")
    p.add_argument("--launch-timeout", type=float, default=1500, help="seconds per launch (1500)")
    p.add_argument("--from-raw", action="store_true", help="no runs: recompute from OUT/raw")
    p.add_argument("--only", nargs="+", default=None, metavar="LABEL",
                   help="rerun only these launches (intra, mpirun, mpi-<algorithm>, gloo) into OUT/raw, keeping "
                        "the others' results, then recompute")
    return p


def _bench_command(python, args, grid, launch: Launch, json_path):
    return [python, "-m", "horovod_torus.bench", "-b", args.minbytes, "-e", args.maxbytes, "-f", args.stepfactor,
            "-n", str(args.iters), "-w", str(args.warmup), "-c", "1", "--grid", grid,
            "--strategies", *launch.strategies, *launch.bench_args, "--json", json_path]


def _env(python):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONWARNINGS", "ignore")
    env.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "600")
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
    _log(f"{spec.wiring}/{launch.label}: exit {rc} after {time.monotonic() - t0:.0f} s (log {log_path})")
    return rc


def run_all(args, raw) -> dict:
    """Every launch of every wiring; returns {"failed": [...], "load": [...]} facts."""
    python = sys.executable
    env = _env(python)
    rate = parse_rate(args.rate)
    n, L = args.nodes, args.ranks_per_node
    grid = f"{L}x{n}"
    failed, load = [], [{"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": os.getloadavg()}]
    for i, wiring in enumerate(args.wirings):
        spec = ClusterSpec(nodes=n, ranks_per_node=L, wiring=wiring, rate_mbit=rate, name=args.name)
        with net.cluster(spec, log=_log) as files:
            if i == 0 and L > 1 and (args.only is None or "intra" in args.only):  # intra-node link: node0
                intra = Launch("intra", "mpirun", ("mpi",))
                cmd = _bench_command(python, args, f"{L}x1", intra, os.path.join(raw, "intra.json"))
                if _run_launch(spec, files, intra, cmd, os.path.join(raw, "intra.log"), args.launch_timeout, env, np=L):
                    failed.append("intra")
            for launch in launches(args.algorithms):
                if args.only is not None and launch.label not in args.only:
                    continue
                out = os.path.join(raw, f"{wiring}-{launch.label}.json")
                cmd = _bench_command(python, args, grid, launch, out)
                if _run_launch(spec, files, launch, cmd, out[:-5] + ".log", args.launch_timeout, env):
                    failed.append(f"{wiring}-{launch.label}")
        load.append({"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "loadavg": os.getloadavg()})
    return {"failed": failed, "load": load}


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


def analyse(args, raw, facts) -> dict:
    n, L = args.nodes, args.ranks_per_node
    grid = f"{L}x{n}"
    rate = parse_rate(args.rate)
    rows, hosts = [], {}
    # every wiring with results in raw (a rerun of one wiring keeps the other's rows)
    wirings = [w for w in WIRINGS if any(os.path.exists(os.path.join(raw, f"{w}-{l.label}.json"))
                                         for l in launches(args.algorithms))]
    for wiring in wirings:
        for launch in launches(args.algorithms):
            path = os.path.join(raw, f"{wiring}-{launch.label}.json")
            if not os.path.exists(path):
                _log(f"missing {path}: its rows are left out")
                continue
            with open(path) as f:
                doc = json.load(f)
            rows += rows_from_doc(doc, wiring, launch)
            hosts[f"{wiring}-{launch.label}"] = doc.get("host", {}).get("ranks_per_host")
    ref_wiring, ref_strategy = args.reference.split(":", 1)
    ref_launcher = "horovodrun" if ref_strategy.endswith("@gloo") else "mpirun"
    ref_strategy = ref_strategy.removesuffix("@gloo")
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
    clusters = {}
    for wiring in wirings:
        spec = ClusterSpec(nodes=n, ranks_per_node=L, wiring=wiring, rate_mbit=rate, name=args.name)
        clusters[wiring] = make_cluster(n, L, spec.nics, intra, nic_link, name=f"cluster-in-a-box {wiring}",
                                        exchange_efficiency=efficiency)
        desc = spec.planner_description(inter_latency_us=nic_link.alpha * 1e6, intra_latency_us=intra.alpha * 1e6,
                                        intra_bandwidth_gbps=intra.bandwidth / 1e9)
        desc["inter"]["bandwidth_gbps"] = nic_link.bandwidth * spec.nics / 1e9
        desc["exchange_efficiency"] = efficiency
        desc["name"] += " (calibrated)"
        write_json_atomic(os.path.join(args.out, f"cluster-{wiring}.json"), desc)
    rows = add_predictions(rows, clusters, grid, (ref_wiring, ref_strategy, ref_launcher),
                           *([ex_ref] if ex_rows else []))
    calibration = {"reference": args.reference, "inter_alpha_s": nic_link.alpha,
                   "inter_bandwidth_Bps_per_nic": nic_link.bandwidth, "inter_rms_relative_residual": rms,
                   "nominal_Bps_per_nic": rate * 1e6 / 8 if rate else None,
                   "intra_alpha_s": intra.alpha, "intra_bandwidth_Bps": intra.bandwidth,
                   "intra_rms_relative_residual": intra_rms,
                   "exchange_reference": f"{ref_wiring}:mpi" if ex_rows else None,
                   "exchange_efficiency": efficiency, "exchange_rms_relative_residual": ex_rms}
    targets = {w: target_ratios(rows, w) for w in wirings}
    return {"rows": rows, "calibration": calibration, "targets": targets, "ranks_per_host": hosts, "grid": grid,
            "wirings": wirings}


def _exchange_text(c) -> str:
    if not c["exchange_reference"]:
        return "pairwise exchanges at the full link rate (no Open MPI default rows to fit them on)"
    edge = "; at the edge of the fitted range 0.05-1" if c["exchange_efficiency"] in (0.05, 1.0) else ""
    return (f"pairwise exchanges at {c['exchange_efficiency']:.2f} of the link rate (fitted on "
            f"{c['exchange_reference']}, rms residual {c['exchange_rms_relative_residual']:.1%}{edge})")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        parse_rate(args.rate), parse_size(args.minbytes), parse_size(args.maxbytes)
        ClusterSpec(nodes=args.nodes, ranks_per_node=args.ranks_per_node, name=args.name)
        launches(args.algorithms)
    except ValueError as e:
        print(f"tools.cluster.bench: error: {e}", file=sys.stderr)
        return 2
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
            facts = run_all(args, raw)
            if args.only is not None and os.path.exists(facts_path):  # keep the earlier launches' facts
                with open(facts_path) as f:
                    old = json.load(f)
                facts = {"failed": [x for x in old["failed"] if x.split("-", 1)[-1] not in args.only] + facts["failed"],
                         "load": old["load"] + facts["load"], "reruns": old.get("reruns", []) + [
                             {"wirings": args.wirings, "only": args.only, "load": facts["load"]}]}
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
           "config": {k: v for k, v in vars(args).items() if k not in ("from_raw", "only", "wirings")},
           **result, "failed_launches": facts["failed"], "load": facts["load"]}
    write_json_atomic(os.path.join(args.out, "bench.json"), doc)
    plot_cluster_rows(result["rows"], os.path.join(args.out, "bench.png"), doc["description"])
    c = result["calibration"]
    print(f"\ninter-node link fitted on {c['reference']}: alpha {c['inter_alpha_s'] * 1e6:.0f} us, "
          f"{c['inter_bandwidth_Bps_per_nic'] * 8 / 1e6:.0f} Mbit/s per NIC (nominal "
          f"{(c['nominal_Bps_per_nic'] or 0) * 8 / 1e6:.0f}), rms residual {c['inter_rms_relative_residual']:.1%}; "
          f"intra-node: alpha {c['intra_alpha_s'] * 1e6:.0f} us, {c['intra_bandwidth_Bps'] / 1e9:.2f} GB/s; "
          f"{_exchange_text(c)}")
    for w in result["wirings"]:
        print(f"\n## {w} wiring: time per all-reduce in s, slowest rank (model's prediction)\n")
        print(format_rows_table(result["rows"], w))
    for w in result["wirings"]:
        print(f"\n## targets, {w} wiring\n")
        print(format_targets(result["targets"][w]))
    from horovod_torus import plan

    for w in result["wirings"]:
        print(f"\n## planner on the calibrated {w} cluster\n")
        plan.main(["--cluster", os.path.join(args.out, f"cluster-{w}.json"), "--bytes", "8M", "32M", "--top", "3"])
    print(f"\nwrote {os.path.join(args.out, 'bench.json')} and bench.png; failed launches: {facts['failed'] or 'none'}")
    return 1 if facts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
