"""``python -m horovod_torus.bench.targets DIR RUNS``: the ratios of ``mpi_scripts/bench_targets.sh``.

Reads ``DIR/allreduce-K.json`` and ``DIR/train-{torus,ring}-K.json`` for K = 1..RUNS and prints, per
target, the median ratio with its min-max over the rounds and pass/miss. Ratios are of average times
(slowest-rank semantics as in the benchmark rows), torus over ring and mpi-torus over MPI_Allreduce.
"""
from __future__ import annotations

import json
import statistics
import sys

__all__ = ["TARGETS", "ratios", "summarize", "main"]

#: (label, numerator, denominator, {size_bytes: target}); size None = the training step.
TARGETS = (
    ("torus / ring", "torus", "ring", {8: 1.0, 4096: 1.0, 65536: 1.0, 1 << 20: 1.0, 16 << 20: 1.0, 100 << 20: 0.9}),
    ("mpi-torus / MPI_Allreduce", "mpi-torus", "mpi",
     {8: 1.05, 4096: 1.05, 65536: 1.05, 1 << 20: 1.0, 16 << 20: 1.0, 100 << 20: 0.9}),
)
STEP_TARGET = 0.9


def ratios(docs, num, den, size):
    """One ratio per round: average time of ``num`` over ``den`` at ``size`` bytes (None when absent)."""
    out = []
    for doc in docs:
        t = {(r["strategy"], r["size_bytes"]): r["time_us"]["avg"] for r in doc["rows"]}
        if (num, size) in t and (den, size) in t:
            out.append(t[(num, size)] / t[(den, size)])
    return out


def summarize(values):
    """(median, min, max) of a non-empty list."""
    return statistics.median(values), min(values), max(values)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out, runs = argv[0], int(argv[1])
    docs = [json.load(open(f"{out}/allreduce-{k}.json")) for k in range(1, runs + 1)]
    wrong = sum(r["wrong"] or 0 for d in docs for r in d["rows"])
    print(f"\n# targets over {runs} rounds ({out}); #wrong over all rows: {wrong}; median [min-max]")
    print(f"{'comparison':>28} {'size':>10} {'ratio':>24} {'target':>8} {'':>5}")
    misses = 0
    for label, num, den, sizes in TARGETS:
        for size, target in sizes.items():
            values = ratios(docs, num, den, size)
            if not values:
                continue
            med, lo, hi = summarize(values)
            ok = med <= target
            misses += not ok
            print(f"{label:>28} {size:>10} {med:>8.2f} [{lo:.2f}-{hi:.2f}]{'':>6} {'<= ' + str(target):>8} "
                  f"{'pass' if ok else 'MISS':>5}")
    steps = []
    for k in range(1, runs + 1):
        tr = {s: json.load(open(f"{out}/train-{s}-{k}.json")) for s in ("torus", "ring")}
        steps.append(tr["torus"]["step_time_s"]["avg"] / tr["ring"]["step_time_s"]["avg"])
    med, lo, hi = summarize(steps)
    misses += med > STEP_TARGET
    print(f"{'ResNet-50 step torus / ring':>28} {'':>10} {med:>8.2f} [{lo:.2f}-{hi:.2f}]{'':>6} "
          f"{'<= ' + str(STEP_TARGET):>8} {'pass' if med <= STEP_TARGET else 'MISS':>5}")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
