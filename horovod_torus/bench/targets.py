"""``python -m horovod_torus.bench.targets DIR RUNS [--json FILE]``: the ratios of ``mpi_scripts/bench_targets.sh``.

Reads ``DIR/allreduce-K.json`` (and, when present, ``DIR/allreduce-gloo-K.json`` and
``DIR/train-{torus,horovod}-K.json``) for K = 1..RUNS and prints, per comparison and size, the median ratio
over the rounds with its min-max, the algorithm that ran in each round (``flat``/``torus``, from the
benchmark rows), the target and pass/miss. Ratios are of average times (over ranks, as in the benchmark
rows): a torus strategy over Horovod's flat call of the same launch (``horovod``; ``ring`` in older files),
``mpi-torus`` over a bare ``MPI_Allreduce``. The targets are those of issue 23 for one host, 4 ranks 2x2,
default settings:

- torus strategies / Horovod's flat call: <= 1.10 at every size, and where the torus is not faster
  (median ratio > 1) the flat call must be the algorithm that ran in every round;
- ``mpi-torus`` / ``MPI_Allreduce``: <= 2.2 below 1 MiB (the one O(1) signature check + the flat call), <=
  1.10 from 1 MiB.

``--json FILE`` writes the summary (:func:`summary_document`), which ``python -m tools.docs_results`` turns
into the results page when it is ``docs/bench_targets.json`` (:func:`markdown_table`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from horovod_torus.bench.report import format_size

__all__ = ["COMPARISONS", "target_of", "ratios", "summarize", "compare", "summary_document", "markdown_table",
           "main", "STEP_TARGET"]

FLAT = ("horovod", "ring")   # Horovod's flat call, current name first
#: (label, numerator strategy, denominator strategies (the first present counts), which file: "" or "gloo")
COMPARISONS = (
    ("torus:horovod / horovod (mpirun)", "torus:horovod", FLAT, ""),
    ("torus:mpi / horovod (mpirun)", "torus:mpi", FLAT, ""),
    ("torus / horovod (mpirun)", "torus", FLAT, ""),
    ("torus / horovod (horovodrun --gloo)", "torus", FLAT, "gloo"),
    ("mpi-torus / MPI_Allreduce (mpirun)", "mpi-torus", ("mpi",), ""),
)
#: ResNet-50 training step, torus / Horovod (only when the script ran the training launches).
STEP_TARGET = 0.9


def target_of(numerator: str, size: int) -> float:
    """The target ratio of ``numerator`` over its flat call at ``size`` bytes (issue 23, one host)."""
    if numerator == "mpi-torus":
        return 2.2 if size < (1 << 20) else 1.10
    return 1.10


def _times(doc, strategy):
    return {r["size_bytes"]: r for r in doc["rows"] if r["strategy"] == strategy}


def ratios(docs, num, den, size):
    """One ratio per round: average time of ``num`` over ``den`` at ``size`` bytes (rounds lacking either are
    left out). ``den``: a strategy name or a tuple of names, the first present in a round counts."""
    dens = (den,) if isinstance(den, str) else tuple(den)
    out = []
    for doc in docs:
        t = {(r["strategy"], r["size_bytes"]): r["time_us"]["avg"] for r in doc["rows"]}
        d = next((name for name in dens if (name, size) in t), None)
        if (num, size) in t and d is not None:
            out.append(t[(num, size)] / t[(d, size)])
    return out


def summarize(values):
    """(median, min, max) of a non-empty list."""
    return statistics.median(values), min(values), max(values)


def compare(docs, label, num, dens) -> list[dict]:
    """One entry per size that ``num`` and a flat strategy share in ``docs``: the per-round ratios, their
    median/min/max, the algorithms ``num`` ran (one per round), the target and whether it is met."""
    sizes = sorted({s for d in docs for s in _times(d, num)})
    out = []
    for size in sizes:
        values = ratios(docs, num, dens, size)
        if not values:
            continue
        med, lo, hi = summarize(values)
        algorithms = [_times(d, num)[size].get("algorithm", "") for d in docs if size in _times(d, num)]
        target = target_of(num, size)
        named = med <= 1.0 or all(a == "flat" for a in algorithms)
        out.append({"comparison": label, "numerator": num, "size_bytes": size, "ratios": [round(v, 4) for v in values],
                    "median": round(med, 4), "min": round(lo, 4), "max": round(hi, 4), "algorithms": algorithms,
                    "target": target, "flat_named_where_slower": named, "met": bool(med <= target and named)})
    return out


def _load(path):
    with open(path) as f:
        return json.load(f)


def _round_files(out, runs, stem):
    return [f"{out}/{stem}-{k}.json" for k in range(1, runs + 1) if os.path.exists(f"{out}/{stem}-{k}.json")]


def summary_document(out: str, runs: int) -> dict:
    """The summary of a ``bench_targets.sh`` run in ``out`` over ``runs`` rounds (JSON-able)."""
    mpi = [_load(p) for p in _round_files(out, runs, "allreduce")]
    gloo = [_load(p) for p in _round_files(out, runs, "allreduce-gloo")]
    if not mpi and not gloo:
        raise FileNotFoundError(f"no {out}/allreduce-K.json for K = 1..{runs}: run mpi_scripts/bench_targets.sh first")
    rows = []
    for label, num, dens, which in COMPARISONS:
        rows += compare(gloo if which == "gloo" else mpi, label, num, dens)
    steps = []
    for k in range(1, runs + 1):
        files = {s: f"{out}/train-{s}-{k}.json" for s in ("torus", "horovod", "ring")}
        flat = files["horovod"] if os.path.exists(files["horovod"]) else files["ring"]
        if os.path.exists(files["torus"]) and os.path.exists(flat):
            steps.append(_load(files["torus"])["step_time_s"]["avg"] / _load(flat)["step_time_s"]["avg"])
    first = (mpi or gloo)[0]
    doc = {"description": f"mpi_scripts/bench_targets.sh: {len(mpi or gloo)} rounds of one all-reduce launch each "
                          f"({first.get('world_size')} ranks, grid {first.get('grid')})",
           "rounds": len(mpi or gloo), "gloo_rounds": len(gloo), "config": first.get("config", {}),
           "host": first.get("host", {}),
           "wrong": sum(r["wrong"] or 0 for d in mpi + gloo for r in d["rows"]), "targets": rows}
    if steps:
        med, lo, hi = summarize(steps)
        doc["train_step"] = {"ratios": [round(v, 4) for v in steps], "median": round(med, 4), "min": round(lo, 4),
                             "max": round(hi, 4), "target": STEP_TARGET, "met": bool(med <= STEP_TARGET)}
    return doc


def _algorithms(names) -> str:
    kinds = sorted(set(a or "-" for a in names))
    return kinds[0] if len(kinds) == 1 else "/".join(f"{a} {names.count(a)}x" for a in kinds)


def markdown_table(doc: dict) -> str:
    """The Markdown table of a :func:`summary_document`: one row per comparison and size."""
    lines = ["| comparison | size | ratio, median [min-max] | algorithm that ran | target | met |",
             "|---|---|---|---|---|---|"]
    for t in doc["targets"]:
        lines.append(f"| {t['comparison']} | {format_size(t['size_bytes'])}B | {t['median']:.2f} "
                     f"[{t['min']:.2f}-{t['max']:.2f}] | {_algorithms(t['algorithms'])} | <= {t['target']:g} | "
                     f"{'yes' if t['met'] else 'no'} |")
    if "train_step" in doc:
        s = doc["train_step"]
        lines.append(f"| ResNet-50 step torus / horovod | - | {s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}] | - "
                     f"| <= {s['target']:g} | {'yes' if s['met'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m horovod_torus.bench.targets", description=__doc__.split("\n")[0])
    p.add_argument("out", help="the folder of bench_targets.sh (allreduce-K.json ...)")
    p.add_argument("runs", type=int, help="rounds K = 1..RUNS")
    p.add_argument("--json", default=None, metavar="FILE", help="write the summary (docs/bench_targets.json for the docs)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__import__('horovod_torus').__version__}")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    doc = summary_document(args.out, args.runs)
    print(f"\n# targets over {doc['rounds']} rounds ({args.out}); #wrong over all rows: {doc['wrong']}; "
          f"median [min-max]; algorithm: what the numerator ran in each round")
    print(f"{'comparison':>36} {'size':>6} {'ratio':>20} {'algorithm':>14} {'target':>8} {'':>5}")
    misses = 0
    for t in doc["targets"]:
        misses += not t["met"]
        print(f"{t['comparison']:>36} {format_size(t['size_bytes']):>6} {t['median']:>6.2f} "
              f"[{t['min']:.2f}-{t['max']:.2f}] {_algorithms(t['algorithms']):>14} {'<= ' + format(t['target'], 'g'):>8} "
              f"{'pass' if t['met'] else 'MISS':>5}")
    if "train_step" in doc:
        s = doc["train_step"]
        misses += not s["met"]
        print(f"{'ResNet-50 step torus / horovod':>36} {'':>6} {s['median']:>6.2f} [{s['min']:.2f}-{s['max']:.2f}] "
              f"{'':>14} {'<= ' + format(s['target'], 'g'):>8} {'pass' if s['met'] else 'MISS':>5}")
    print(f"# {len(doc['targets']) + ('train_step' in doc) - misses} passed, {misses} missed")
    if args.json:
        from horovod_torus.atomic import write_json_atomic

        write_json_atomic(args.json, doc)
        print(f"# wrote {args.json} (as docs/bench_targets.json: python -m tools.docs_results makes the results page)")
    return 0 if doc["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
