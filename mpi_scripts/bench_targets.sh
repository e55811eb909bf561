#!/usr/bin/env bash
# The "make the torus fast" targets, measured side by side in one run: the all-reduce benchmark at 4 KB,
# 1 MB and 100 MB (every strategy), then ResNet-50 training steps with the torus and the ring
# DistributedOptimizer path, then the ratios torus/ring and mpi-torus/mpi.
#   bash mpi_scripts/bench_targets.sh            # 4 ranks, 2x2, on this machine -> docs/bench_targets*.json
# Variables: NP 4 | GRID 2x2 | ITERS 10 | OUT docs/bench_targets | TRAIN_STEPS 5 | BATCH 8 | IMAGE 64
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}; GRID=${GRID:-2x2}; OUT=${OUT:-docs/bench_targets}; ITERS=${ITERS:-10}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONWARNINGS=ignore
run=(mpirun --bind-to none --oversubscribe -np "$NP" -x TF_CPP_MIN_LOG_LEVEL -x PYTHONWARNINGS)
[ "$(id -u)" = 0 ] && run+=(--allow-run-as-root)
mkdir -p "$(dirname "$OUT")"
"${run[@]}" "$PYTHON" -m horovod_torus.bench -b 4K -e 1M -f 256 -n "$ITERS" -w 3 --grid "$GRID" --json "$OUT-small.json"
"${run[@]}" "$PYTHON" -m horovod_torus.bench -b 100M -e 100M -n "$(( (ITERS + 1) / 2 ))" -w 1 --grid "$GRID" --json "$OUT-100M.json"
for s in torus ring; do
  "${run[@]}" "$PYTHON" -m horovod_torus.bench.train --strategy "$s" --grid "$GRID" --batch-size "${BATCH:-8}" \
    --image-size "${IMAGE:-64}" --steps "${TRAIN_STEPS:-5}" --warmup-steps 2 --sync-iters 3 --json "$OUT-train-$s.json"
done
"$PYTHON" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = json.load(open(out + "-small.json"))["rows"] + json.load(open(out + "-100M.json"))["rows"]
t = {(r["strategy"], r["size_bytes"]): r["time_us"]["avg"] for r in rows}
wrong = sum(r["wrong"] for r in rows)
print(f"\n# issue-6 targets ({out}*.json), #wrong over all rows: {wrong}")
print(f"{'size':>10} {'torus/ring':>11} {'(target)':>9} {'mpi-torus/mpi':>14} {'(target)':>9}")
for size, mpi_target in ((4096, 0.5), (1 << 20, 1.0), (100 << 20, 1.1)):
    print(f"{size:>10} {t[('torus', size)] / t[('ring', size)]:>11.2f} {'<= 1.0':>9} "
          f"{t[('mpi-torus', size)] / t[('mpi', size)]:>14.2f} {'<= ' + str(mpi_target):>9}")
tr = {s: json.load(open(f"{out}-train-{s}.json")) for s in ("torus", "ring")}
step = {s: tr[s]["step_time_s"]["avg"] for s in tr}
rss = {s: tr[s]["peak_rss_bytes"] for s in tr}
grad = tr["torus"]["gradient_bytes"]
print(f"ResNet-50 step time torus/ring: {step['torus'] / step['ring']:.3f} (target <= 1.02); "
      f"steps {step['torus'] * 1e3:.0f} / {step['ring'] * 1e3:.0f} ms")
print(f"peak RSS torus - ring: {(rss['torus'] - rss['ring']) / 2**20:+.0f} MiB "
      f"(target <= 2 x gradients = {2 * grad / 2**20:.0f} MiB)")
PY
