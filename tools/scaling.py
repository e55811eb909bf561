"""``python -m tools.scaling``: training throughput and scaling efficiency over rank counts.

For each round, each rank count N of ``--ranks`` and each strategy (their order alternating between
rounds), one launch of ``mpirun -np N python -m horovod_torus.bench.train`` (ResNet-50 on synthetic data,
the optimizer path ``fit`` uses, the most square grid for N: 2x1, 2x2, 3x2). Then, per (N, strategy), the median images/s
with min-max over the rounds, and

- scaling efficiency = images/s at N / (N x images/s at 1 rank) (the paper's definition, s.4: 91.62 % on
  1,088 GPUs), from the medians;
- the CPU ceiling = min(1, cores / N): N ranks on a host of ``cores`` cores share them, so on 2 cores 4
  ranks cannot exceed 0.5 whatever the communication does;
- the planner's prediction for the same grid: the cost model's all-reduce time of this gradient size
  (``horovod_torus.costmodel.model_coefficients`` with alpha/beta fitted by ``costmodel.calibrate`` on an
  all-reduce benchmark JSON of this host, ``--calibrate``) and the efficiency it implies when only the
  communication is added to the one-rank step, T1 / (T1 + t_sync) (no overlap, no core sharing).

Writes ``--json`` (``docs/scaling.json``): ``rows`` (per N and strategy: ``ranks``, ``strategy``, ``grid``,
``images_per_s`` {median, min, max, runs}, ``step_s`` median, ``efficiency``, ``cpu_ceiling``,
``predicted_sync_s``, ``predicted_efficiency``), the settings and host; and prints a Markdown table.
Each launch's own JSON is kept in ``--out``.

Raises SystemExit (before any launch) for a rank count < 1, a list without 1 (efficiency needs the
one-rank throughput), or fewer than 1 round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from horovod_torus.atomic import write_json_atomic
from horovod_torus.launchers import launcher_command
from horovod_torus.topology import TorusTopology

__all__ = ["square_grid", "launch_command", "efficiency_rows", "markdown_table", "main", "RANK_ENV"]

#: set on every rank of every launch (``mpirun -x``): no TensorFlow info lines, no Python warnings.
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore"}


def square_grid(ranks: int) -> str:
    """The most square X x Y grid with X >= Y, as ``"XxY"`` (1 -> 1x1, 2 -> 2x1, 4 -> 2x2, 6 -> 3x2, 8 -> 4x2):
    :meth:`TorusTopology.from_world` without a node size. Raises ValueError for ``ranks`` < 1."""
    return str(TorusTopology.from_world(ranks))


def launch_command(ranks: int, strategy: str, json_path: str, args) -> list[str]:
    """mpirun -np N python -m horovod_torus.bench.train ... for one measurement, every rank on this machine
    (:func:`horovod_torus.launchers.launcher_command`, :data:`RANK_ENV` set on the ranks; grid:
    ``args.grids``: ``square`` -> :func:`square_grid`, ``default`` -> horovod_torus' default grid)."""
    program = [sys.executable, "-m", "horovod_torus.bench.train", "--strategy", strategy,
               "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
               "--steps", str(args.steps), "--warmup-steps", "2", "--sync-iters", "3",
               "--model", args.model, "--json", json_path] + (
                   ["--grid", square_grid(ranks)] if args.grids == "square" else [])
    return launcher_command("mpirun", ranks, program, local=True, env=RANK_ENV)


def _predict(calibration: dict | None, strategy: str, ranks: int, grid: str, grad_bytes: int):
    """Predicted all-reduce seconds of ``grad_bytes`` for ``strategy`` on ``ranks`` (None: no calibration)."""
    from horovod_torus.costmodel import model_coefficients

    if ranks == 1:
        return 0.0
    if not calibration or strategy not in calibration:
        return None
    link = calibration[strategy]
    a, b = model_coefficients(strategy, ranks, grid if strategy == "torus" else None)
    return a * link["alpha"] + b * grad_bytes / link["bandwidth"]


def efficiency_rows(results: dict, cores: int, calibration: dict | None = None) -> list[dict]:
    """Aggregate ``{(ranks, strategy): [bench.train JSON, ...]}`` into table rows (see module docstring).

    Raises ValueError when a strategy has no one-rank result."""
    rows = []
    base = {}
    for (ranks, strategy), docs in sorted(results.items()):
        ips = [d["images_per_s"] for d in docs]
        med = statistics.median(ips)
        if ranks == 1:
            base[strategy] = (med, statistics.median(d["step_time_s"]["avg"] for d in docs))
    for (ranks, strategy), docs in sorted(results.items()):
        if strategy not in base:
            raise ValueError(f"strategy {strategy!r} has no 1-rank result: efficiency needs it")
        ips = [d["images_per_s"] for d in docs]
        med = statistics.median(ips)
        one_ips, one_step = base[strategy]
        grid = docs[0]["grid"]
        sync = _predict(calibration, strategy, ranks, grid, docs[0]["gradient_bytes"])
        rows.append({"ranks": ranks, "strategy": strategy, "grid": grid,
                     "images_per_s": {"median": med, "min": min(ips), "max": max(ips), "runs": len(ips)},
                     "step_s": statistics.median(d["step_time_s"]["avg"] for d in docs),
                     "sync_s": statistics.median(d["sync_time_s"]["avg"] for d in docs),
                     "efficiency": med / (ranks * one_ips), "cpu_ceiling": min(1.0, cores / ranks),
                     "predicted_sync_s": sync,
                     "predicted_efficiency": None if sync is None else one_step / (one_step + sync)})
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = ["| ranks | grid | strategy | images/s median [min-max] | scaling efficiency | CPU ceiling | "
             "planner: sync (ms) / efficiency |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        i = r["images_per_s"]
        pred = ("n/a" if r["predicted_sync_s"] is None else
                f"{r['predicted_sync_s'] * 1e3:.1f} / {r['predicted_efficiency']:.1%}")
        lines.append(f"| {r['ranks']} | {r['grid']} | {r['strategy']} | {i['median']:.1f} [{i['min']:.1f}-"
                     f"{i['max']:.1f}] | {r['efficiency']:.1%} | {r['cpu_ceiling']:.0%} | {pred} |")
    return "\n".join(lines)


def _calibration(path: str | None) -> dict | None:
    if not path:
        return None
    from horovod_torus.costmodel import calibrate

    doc = json.load(open(path))
    out = {}
    for strategy in ("ring", "torus"):
        link, rms = calibrate(doc, strategy)
        out[strategy] = {"alpha": link.alpha, "bandwidth": link.bandwidth, "rms": rms}
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.scaling",
                                description="ResNet-50 images/s and scaling efficiency over rank counts")
    p.add_argument("--ranks", default="1,2,4,6", help="rank counts, comma-separated; must include 1")
    p.add_argument("--strategies", default="torus,ring")
    p.add_argument("--runs", type=int, default=3, help="rounds (>= 3 for a median with spread)")
    p.add_argument("--model", default="resnet50", choices=("resnet50", "tiny"))
    p.add_argument("--batch-size", type=int, default=8, help="per-rank batch (8)")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=5, help="timed steps per launch")
    p.add_argument("--grids", default="square", choices=("square", "default"),
                   help="square: the most square grid per rank count (2x2, 3x2); default: init's default")
    p.add_argument("--calibrate", default="docs/bench_allreduce.json",
                   help="all-reduce benchmark JSON of this host for the planner's alpha/beta ('' for none)")
    p.add_argument("--out", default="runs/scaling")
    p.add_argument("--json", default="docs/scaling.json")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        ranks = sorted({int(x) for x in args.ranks.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--ranks {args.ranks!r}: integers, comma-separated (e.g. 1,2,4)") from None
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    if not ranks or ranks[0] < 1 or 1 not in ranks:
        raise SystemExit(f"--ranks {args.ranks!r}: rank counts >= 1 including 1 (the efficiency baseline)")
    if args.runs < 1:
        raise SystemExit(f"--runs {args.runs} must be >= 1")
    calibration = _calibration(args.calibrate)
    os.makedirs(args.out, exist_ok=True)
    results: dict = {}
    for k in range(1, args.runs + 1):
        order = strategies if k % 2 else strategies[::-1]
        for n in ranks:
            for s in order:
                path = os.path.join(args.out, f"train-{n}-{s.replace(':', '_')}-{k}.json")
                print(f"== round {k}/{args.runs}: {n} rank(s), {s}", flush=True)
                t0 = time.perf_counter()
                rc = subprocess.call(launch_command(n, s, path, args), stdout=subprocess.DEVNULL)
                if rc != 0:
                    raise SystemExit(f"the launch of {n} rank(s), strategy {s} failed (exit {rc})")
                doc = json.load(open(path))
                results.setdefault((n, s), []).append(doc)
                print(f"   {doc['images_per_s']:.1f} images/s, grid {doc['grid']} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = efficiency_rows(results, os.cpu_count() or 1, calibration)
    first = next(iter(results.values()))[0]
    write_json_atomic(args.json, {
        "command": "python -m tools.scaling " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {"ranks": ranks, "strategies": strategies, "runs": args.runs, "model": args.model,
                     "grids": args.grids,
                     "per_rank_batch": args.batch_size, "image_size": args.image_size, "steps": args.steps,
                     "gradient_bytes": first["gradient_bytes"], "calibration_source": args.calibrate or None},
        "calibration": calibration, "host": {"cpus": os.cpu_count(), **first.get("host", {})},
        "paper": {"gpus": 1088, "scaling_efficiency": 0.9162, "source": "Mikami et al. arXiv 1811.05233 v1"},
        "rows": rows})
    print(markdown_table(rows))
    print(f"# wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
