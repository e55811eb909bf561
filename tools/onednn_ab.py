"""``python -m tools.onednn_ab``: the demo's own configuration with TensorFlow's oneDNN kernels off and on.

Each round launches ``bash mpi_scripts/run_local.sh NP --preset fashion_mnist_demo --grid GRID`` twice, once
with ``TF_ENABLE_ONEDNN_OPTS=0`` and once with ``=1`` (the order alternates between rounds), each a short
run of ``--epochs 2`` epochs of ``--train-examples`` images at one global batch (``--batch``); the figure
of a launch is its last epoch's training images/s (all ranks; the first epoch holds the graph tracing),
read from the run's ``summary.json`` (:class:`keras_app.report.EpochRecorder`), and the oneDNN state that
TensorFlow reported there must be the one asked for. Everything else (ranks, thread pools, data, model,
torus) is the preset's, the same on both sides.

With ``--isa AVX2`` each round adds a third launch: oneDNN on, capped by oneDNN's own ``ONEDNN_MAX_CPU_ISA``
at that instruction set (the kernels it JIT-compiles for an AVX2-only CPU), an estimate on this CPU of an
older CPU's oneDNN speed; TensorFlow's other kernels are the wheel's either way. Clock, cores and memory stay
this machine's, so the estimate is not a measurement of another CPU.

Writes ``--json`` (``docs/onednn_demo.json``): ``command``, ``settings``, ``host`` (rank 0's:
:func:`keras_app.report.run_host`), ``rows`` (per state: ``onednn``, ``max_cpu_isa`` (None: oneDNN's own
choice), ``images_per_s`` {median, min, max, runs}) and ``speedup`` (on / off per round: median, min, max;
with ``--isa`` also ``speedup_isa``, capped / off); prints a Markdown table. Raises SystemExit
before any launch for fewer than 1 round or a batch not divisible by NP; RuntimeError when a launch fails
or ran with the other oneDNN state.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from horovod_torus.atomic import write_json_atomic

__all__ = ["launch_args", "summarise", "markdown_table", "main", "ISA_VAR"]

#: oneDNN's environment variable that caps the instruction set its kernels are JIT-compiled for
#: (oneDNN's documentation, "CPU dispatcher control").
ISA_VAR = "ONEDNN_MAX_CPU_ISA"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch_args(args, out_dir: str) -> list[str]:
    """The ``run_local.sh`` command line of one launch (the same for both oneDNN states)."""
    return ["bash", "mpi_scripts/run_local.sh", str(args.np), "--preset", "fashion_mnist_demo",
            "--grid", args.grid, "--output-dir", out_dir, "--epochs", "2",
            "--train-examples", str(args.train_examples), "--batch-schedule", f"0:{args.batch}",
            "--val-examples", "512", "--verbose", "2", "--keep-checkpoints", "1"]


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def summarise(runs: dict, isa: str | None = None) -> tuple[list[dict], dict, dict | None]:
    """``(rows, speedup, speedup_isa)`` from ``{state: [images/s per round]}`` with states ``False`` (off),
    ``True`` (on) and, when ``isa`` is given, ``"isa"`` (on, capped at ``isa``), rounds in launch order and
    every state the same count: a row per state, on/off per round, and capped/off per round (None without
    ``isa``)."""
    states = (False, True) + (("isa",) if isa else ())
    rows = [{"onednn": state is not False, "max_cpu_isa": isa if state == "isa" else None,
             "images_per_s": _stats(runs[state])} for state in states]
    speedup = _stats([on / off for on, off in zip(runs[True], runs[False])])
    speedup_isa = _stats([c / off for c, off in zip(runs["isa"], runs[False])]) if isa else None
    return rows, speedup, speedup_isa


def markdown_table(doc: dict) -> str:
    """The JSON's table: images/s per oneDNN state (median [min-max], rounds) and the speed-ups."""
    lines = ["| TensorFlow oneDNN | training images/s (all ranks) | rounds |", "|---|---|---|"]
    isa = None
    for row in doc["rows"]:
        s = row["images_per_s"]
        label = "on" if row["onednn"] else "off"
        if row.get("max_cpu_isa"):
            isa = row["max_cpu_isa"]
            label = f"on, capped at {isa} (`{ISA_VAR}={isa}`)"
        lines.append(f"| {label} | {s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}] | {len(s['runs'])} |")
    sp = doc["speedup"]
    lines.append(f"| on / off | {sp['median']:.2f}x [{sp['min']:.2f}-{sp['max']:.2f}] | |")
    if doc.get("speedup_isa"):
        sp = doc["speedup_isa"]
        lines.append(f"| capped at {isa} / off | {sp['median']:.2f}x [{sp['min']:.2f}-{sp['max']:.2f}] | |")
    return "\n".join(lines)


def _one(args, state, out_dir: str) -> tuple[float, dict]:
    """One launch in ``state`` (False: off, True: on, ``"isa"``: on, capped at ``args.isa``): its last
    epoch's images/s and rank 0's host facts."""
    env = {k: v for k, v in os.environ.items() if k != ISA_VAR}
    env["TF_ENABLE_ONEDNN_OPTS"] = "0" if state is False else "1"
    if state == "isa":
        env[ISA_VAR] = args.isa
    cmd = launch_args(args, out_dir)
    cap = f" {ISA_VAR}={args.isa}" if state == "isa" else ""
    print(f"onednn_ab: TF_ENABLE_ONEDNN_OPTS={env['TF_ENABLE_ONEDNN_OPTS']}{cap} {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"launch failed (exit {done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    with open(os.path.join(out_dir, "summary.json")) as fh:
        summary = json.load(fh)
    if summary["host"]["onednn"] is not (state is not False):
        raise RuntimeError(f"asked for oneDNN {state is not False}, TensorFlow reported {summary['host']['onednn']}")
    return float(summary["epochs"][-1]["images_per_sec"]), summary["host"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.onednn_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=4, help="ranks (4, the demo's)")
    p.add_argument("--grid", default="2x2", help="torus grid (2x2, the demo's)")
    p.add_argument("--batch", type=int, default=512, help="global batch (512, the demo's after epoch 1)")
    p.add_argument("--train-examples", type=int, default=4096, help="images per epoch (4096: 8 steps at 512)")
    p.add_argument("--rounds", type=int, default=3, help="launches per state, alternated (3)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per launch before it counts as failed")
    p.add_argument("--out", default="runs/onednn_ab", help="the launches' output directories")
    p.add_argument("--json", default="docs/onednn_demo.json")
    p.add_argument("--isa", default=None, choices=("AVX2", "AVX", "SSE41", "AVX512_CORE", "AVX512_CORE_VNNI"),
                   help=f"add a third state per round: oneDNN on with {ISA_VAR}=ISA (e.g. AVX2, an estimate of "
                        "an AVX2-only CPU's oneDNN kernels on this one)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: give at least 1")
    if args.batch % args.np:
        raise SystemExit(f"--batch {args.batch} is not divisible by --np {args.np}: give a multiple of {args.np}")
    states = (False, True) + (("isa",) if args.isa else ())
    runs: dict = {state: [] for state in states}
    names = {False: "off", True: "on", "isa": f"on-{args.isa}"}
    host = None
    for r in range(args.rounds):
        for state in (states if r % 2 == 0 else states[::-1]):
            ips, host = _one(args, state, os.path.join(args.out, f"round{r}-onednn-{names[state]}"))
            runs[state].append(ips)
            print(f"onednn_ab: round {r + 1}, oneDNN {names[state]}: {ips:.1f} images/s", flush=True)
    rows, speedup, speedup_isa = summarise(runs, args.isa)
    host = {**{k: v for k, v in host.items() if k not in ("onednn", "TF_ENABLE_ONEDNN_OPTS")},
            "onednn": "off and on: one row each"}
    doc = {"command": "python -m tools.onednn_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
           "settings": {k: v for k, v in vars(args).items() if k not in ("out", "json", "timeout")},
           "launch": " ".join(launch_args(args, "OUT")), "host": host, "rows": rows, "speedup": speedup}
    if speedup_isa:
        doc["speedup_isa"] = speedup_isa
    write_json_atomic(args.json, doc)
    print(markdown_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
