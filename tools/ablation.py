"""``python -m tools.ablation``: what batch-size control and label smoothing buy (Mikami et al. s.3).

Four arms of the same model, data, optimizer and budget of training images (``epochs x train_examples``),
each trained by ``keras_app.train`` on ``--np`` ranks (``mpi_scripts/run_local.sh``, one launch per run):

=====  ==========================================================================================
A      small-batch baseline: global batch ``small_batch`` throughout, warm-up + the preset's decay
B      large batch from the start: ``final_batch`` throughout (linear LR scaling + warm-up), no smoothing
C      B + batch-size control: the global batch doubles every epoch up to ``final_batch`` (s.3.1)
D      C + label smoothing ``smoothing`` (the paper's recipe, s.3.2)
=====  ==========================================================================================

A, B and C use label smoothing 0. Every arm starts from the preset (``fashion_mnist_demo`` by default:
Adam, base LR 0.004 at global batch 256 scaled linearly with the current global batch, warm-up over
``warmup_epochs`` of the preset, cosine decay) and is run with each seed of ``--seeds`` (the same seeds
for every arm: identical initial weights and data order per seed). Runs go arm by arm within a seed, seed
after seed, so a budget cut short still has whole seeds.

Outputs (written atomically after every run, so an interrupted ablation keeps what finished):

- ``--json`` (``docs/ablation.json``): ``runs`` (one per arm and seed: ``arm``, ``seed``, ``status``
  ``ok``/``failed``, ``returncode``, ``batch_schedule``, ``label_smoothing``, ``curve`` = per-epoch
  ``{epoch, images_seen, global_batch, learning_rate, train_loss, train_top1 (training mode, averaged over
  the epoch), val_loss, val_top1, val_top5, images_per_sec}``, ``final`` and ``best`` ``{val_top1, val_top5}``, ``images_per_sec`` (training images of
  all ranks per second of training, validation excluded), ``wall_seconds`` (the launch, start-up and
  validation included), ``config`` (the resolved keras_app configuration)); ``arms`` (per arm: the mean,
  min and max over seeds of the final and best val top-1/top-5, images/s and wall time); the settings.
- ``--plot`` (``docs/ablation.png``, matplotlib): val top-1 against training images seen, one colour per
  arm (thin lines: seeds; thick: their mean).
- a Markdown table on stdout.

Raises ValueError (before any launch) for an unknown arm, a batch not divisible by ``--np``, a final batch
smaller than the small batch, or fewer than 2 epochs (batch-size control needs a second epoch).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from horovod_torus.atomic import save_figure_atomic, write_json_atomic

__all__ = ["Arm", "AblationSettings", "arms", "growth_schedule", "run_record", "record_host", "aggregate",
           "write_outputs", "markdown_table", "main"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Arm:
    """One arm: ``name`` (A-D), a one-line ``label``, the ``batch_schedule`` (keras_app's
    ``EPOCH:GLOBAL_BATCH,...``) and the ``label_smoothing`` factor."""
    name: str
    label: str
    batch_schedule: str
    label_smoothing: float


@dataclass(frozen=True)
class AblationSettings:
    """The budget and the sizes every arm shares.

    Attributes:
        np: ranks per run (``mpirun -np``).
        epochs: epochs per run (>= 2); each epoch is ``train_examples`` images (0: the whole split).
        train_examples: images per epoch (the first N of the training split; all ranks together).
        val_examples: validation images after every epoch (about N, the first of the test split; 0: all
            10,000: exact but ~5x the time on 2 cores).
        small_batch: arm A's global batch (images per step, all ranks).
        final_batch: the global batch of arms B-D at the end (B: throughout).
        smoothing: arm D's label smoothing.
        seeds: seeds run for every arm.
        preset: the keras_app preset every arm starts from.
        extra: further keras_app.train arguments, the same for every arm (e.g. ``--arch tiny``).
    """
    np: int = 4
    epochs: int = 3
    train_examples: int = 8192
    val_examples: int = 2000
    small_batch: int = 256
    final_batch: int = 1024
    smoothing: float = 0.1
    seeds: tuple[int, ...] = (1, 2)
    preset: str = "fashion_mnist_demo"
    extra: tuple[str, ...] = ()

    def validate(self, names) -> None:
        unknown = [n for n in names if n not in "ABCD" or len(n) != 1]
        if unknown or not names:
            raise ValueError(f"arms {','.join(names)!r}: each must be one of A, B, C, D (e.g. --arms A,B,C,D)")
        if self.np < 1:
            raise ValueError(f"np={self.np} must be >= 1")
        if self.epochs < 2:
            raise ValueError(f"epochs={self.epochs}: batch-size control needs at least 2 epochs")
        if self.final_batch < self.small_batch:
            raise ValueError(f"final_batch={self.final_batch} is smaller than small_batch={self.small_batch}")
        for b in {self.small_batch, self.final_batch, *(g for _, g in _stages(self))}:
            if b % self.np:
                raise ValueError(f"global batch {b} is not divisible by np={self.np}: use multiples of {self.np}")
        if self.train_examples and self.train_examples < self.final_batch:
            raise ValueError(f"train_examples={self.train_examples} is smaller than final_batch="
                             f"{self.final_batch}: an epoch needs at least one step")
        owned = {"--batch-schedule", "--label-smoothing", "--seed", "--epochs", "--train-examples", "--val-examples",
                 "--output-dir", "--preset"}
        for flag in self.extra:
            if flag.split("=")[0] in owned:
                raise ValueError(f"{flag.split('=')[0]} is set by the driver for every arm: use the driver's "
                                 f"own option (--seeds, --epochs, --train-examples, --out, --preset) instead")
        if not self.seeds:
            raise ValueError("seeds is empty: give at least one seed (e.g. --seeds 1,2)")


def _stages(s: AblationSettings) -> list[tuple[int, int]]:
    return growth_schedule(s.small_batch, s.final_batch, s.epochs)


def growth_schedule(small_batch: int, final_batch: int, epochs: int) -> list[tuple[int, int]]:
    """Batch-size control for arms C and D: the global batch doubles every epoch and reaches
    ``final_batch`` at epoch ``epochs - 2`` (so the last two epochs run at it; with 2 epochs: the second),
    never starting below ``small_batch``. E.g. ``(256, 2048, 4)`` -> ``[(0, 512), (1, 1024), (2, 2048)]``,
    ``(256, 2048, 2)`` -> ``[(0, 1024), (1, 2048)]``."""
    batches = [final_batch]
    while len(batches) < max(2, epochs - 1) and batches[0] // 2 >= small_batch:
        batches.insert(0, batches[0] // 2)
    return list(enumerate(batches))


def arms(s: AblationSettings) -> dict[str, Arm]:
    """The four arms for settings ``s`` (see the module docstring)."""
    grow = ",".join(f"{e}:{b}" for e, b in _stages(s))
    return {
        "A": Arm("A", f"small batch {s.small_batch}", f"0:{s.small_batch}", 0.0),
        "B": Arm("B", f"large batch {s.final_batch}", f"0:{s.final_batch}", 0.0),
        "C": Arm("C", f"batch-size control to {s.final_batch}", grow, 0.0),
        "D": Arm("D", f"batch-size control + label smoothing {s.smoothing:g}", grow, s.smoothing),
    }


def command(arm: Arm, seed: int, s: AblationSettings, out_dir: str) -> list[str]:
    """The launch of one run: ``bash mpi_scripts/run_local.sh NP --preset ... <arm's settings>``."""
    return ["bash", os.path.join(ROOT, "mpi_scripts", "run_local.sh"), str(s.np), "--preset", s.preset,
            "--batch-schedule", arm.batch_schedule, "--label-smoothing", str(arm.label_smoothing),
            "--seed", str(seed), "--epochs", str(s.epochs), "--train-examples", str(s.train_examples),
            "--val-examples", str(s.val_examples),
            "--output-dir", out_dir, "--verbose", "2", *s.extra]


def run_record(arm: Arm, seed: int, summary: dict | None, returncode: int, wall_seconds: float) -> dict:
    """One entry of ``runs`` from keras_app's ``summary.json`` (None when the run wrote none)."""
    rec = {"arm": arm.name, "label": arm.label, "seed": seed, "batch_schedule": arm.batch_schedule,
           "label_smoothing": arm.label_smoothing, "returncode": returncode,
           "status": "ok" if returncode == 0 and summary else "failed", "wall_seconds": wall_seconds,
           "curve": [], "final": None, "best": None, "images_per_sec": None, "config": None}
    if not summary:
        return rec
    seen, train_s, curve = 0, 0.0, []
    for e in summary["epochs"]:
        seen += int(e["steps"]) * int(e["global_batch"])
        train_s += float(e["train_seconds"] or 0.0)
        curve.append({"epoch": e["epoch"], "images_seen": seen, "global_batch": e["global_batch"],
                      "learning_rate": e["learning_rate"], "train_loss": e["train_loss"],
                      "train_top1": e["train_top1"],
                      "val_loss": e["val_loss"], "val_top1": e["val_top1"], "val_top5": e["val_top5"],
                      "images_per_sec": e["images_per_sec"]})
    validated = [c for c in curve if c["val_top1"] is not None]
    if validated:
        rec["final"] = {"val_top1": validated[-1]["val_top1"], "val_top5": validated[-1]["val_top5"]}
        rec["best"] = {"val_top1": max(c["val_top1"] for c in validated),
                       "val_top5": max(c["val_top5"] for c in validated)}
    rec.update(curve=curve, images_per_sec=seen / train_s if train_s > 0 else None, config=summary["config"])
    return rec


def record_host(host: dict, summary: dict | None) -> None:
    """Add the machine facts of the first run that recorded them (keras_app's ``summary.json`` ``host``
    block: CPU model, TensorFlow's oneDNN state, the allocator, versions) to ``host``, in place; the
    driver's own keys (``cpus``, ``started``) are kept."""
    if summary and summary.get("host") and "cpu_model" not in host:
        host.update({k: v for k, v in summary["host"].items() if k not in host})


def _spread(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def aggregate(runs: list[dict], arm_table: dict[str, Arm]) -> dict:
    """Per arm: mean/min/max over its successful seeds of final and best val top-1/top-5, images/s, wall."""
    out = {}
    for name, arm in arm_table.items():
        mine = [r for r in runs if r["arm"] == name]
        if not mine:
            continue
        ok = [r for r in mine if r["status"] == "ok" and r["final"]]
        out[name] = {"label": arm.label, "batch_schedule": arm.batch_schedule,
                     "label_smoothing": arm.label_smoothing, "seeds": [r["seed"] for r in ok],
                     "failed_seeds": [r["seed"] for r in mine if r not in ok],
                     "final_val_top1": _spread(r["final"]["val_top1"] for r in ok),
                     "final_val_top5": _spread(r["final"]["val_top5"] for r in ok),
                     "best_val_top1": _spread(r["best"]["val_top1"] for r in ok),
                     "best_val_top5": _spread(r["best"]["val_top5"] for r in ok),
                     "images_per_sec": _spread(r["images_per_sec"] for r in ok),
                     "wall_seconds": _spread(r["wall_seconds"] for r in ok)}
    return out


def _fmt(spread, digits=4) -> str:
    if not spread:
        return "n/a"
    text = f"{spread['mean']:.{digits}f}"
    if spread["n"] > 1:
        text += f" [{spread['min']:.{digits}f}-{spread['max']:.{digits}f}]"
    return text


def markdown_table(doc: dict) -> str:
    """The README table: one row per arm, mean [min-max] over seeds."""
    lines = ["| arm | global batch per epoch | label smoothing | final val top-1 | best val top-1 | "
             "final val top-5 | images/s | wall (s) | seeds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, a in doc["arms"].items():
        failed = f" ({len(a['failed_seeds'])} failed)" if a["failed_seeds"] else ""
        lines.append(f"| {name}: {a['label']} | {a['batch_schedule']} | {a['label_smoothing']:g} | "
                     f"{_fmt(a['final_val_top1'])} | {_fmt(a['best_val_top1'])} | {_fmt(a['final_val_top5'])} | "
                     f"{_fmt(a['images_per_sec'], 0)} | {_fmt(a['wall_seconds'], 0)} | "
                     f"{len(a['seeds'])}{failed} |")
    return "\n".join(lines)


def plot(doc: dict, path: str) -> None:
    """Two panels against training images seen (matplotlib, Agg): validation top-1 (inference mode) and
    training top-1 (training mode, the epoch's average); thin lines per seed, thick the per-arm mean."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, key, title in ((axes[0], "val_top1", "validation top-1"), (axes[1], "train_top1", "training top-1")):
        for i, (name, a) in enumerate(doc["arms"].items()):
            color = f"C{i}"
            curves = [r["curve"] for r in doc["runs"] if r["arm"] == name and r["status"] == "ok"]
            curves = [c for c in curves if all(p.get(key) is not None for p in c)]
            for c in curves:
                ax.plot([p["images_seen"] for p in c], [p[key] for p in c], color=color, lw=0.8, alpha=0.4)
            if curves:
                n = min(len(c) for c in curves)
                xs = [curves[0][k]["images_seen"] for k in range(n)]
                ys = [statistics.fmean(c[k][key] for c in curves) for k in range(n)]
                ax.plot(xs, ys, "o-", color=color, lw=2, label=f"{name}: {a['label']} ({a['batch_schedule']})")
        ax.set(xlabel="training images seen (all ranks)", title=title)
        ax.grid(alpha=0.3)
    s = doc["settings"]
    axes[0].set_ylabel("top-1")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"ResNet-50, Fashion-MNIST, {s['np']} ranks, {s['epochs']} epochs x {s['train_examples']} "
                 f"images: {len(s['seeds'])} seed(s) per arm")
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=90)
    plt.close(fig)


def write_outputs(doc: dict, json_path: str, png_path: str | None) -> None:
    """Write the JSON (atomically) and, when ``png_path`` is given, the plot."""
    write_json_atomic(json_path, doc)
    if png_path:
        plot(doc, png_path)


def build_parser() -> argparse.ArgumentParser:
    d = AblationSettings()
    p = argparse.ArgumentParser(prog="python -m tools.ablation", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default="A,B,C,D", help="arms to run, comma-separated (A,B,C,D)")
    p.add_argument("--seeds", default=",".join(map(str, d.seeds)), help="seeds, comma-separated (1,2)")
    p.add_argument("--np", type=int, default=d.np, help="ranks per run (4)")
    p.add_argument("--epochs", type=int, default=d.epochs, help="epochs per run (3)")
    p.add_argument("--train-examples", type=int, default=d.train_examples,
                   help="images per epoch, the first N of the training split (8192)")
    p.add_argument("--val-examples", type=int, default=d.val_examples,
                   help="validation images per evaluation (2000; 0: the whole test split)")
    p.add_argument("--small-batch", type=int, default=d.small_batch, help="arm A's global batch (256)")
    p.add_argument("--final-batch", type=int, default=d.final_batch, help="arms B-D's final global batch (1024)")
    p.add_argument("--smoothing", type=float, default=d.smoothing, help="arm D's label smoothing (0.1)")
    p.add_argument("--preset", default=d.preset, help="keras_app preset every arm starts from")
    p.add_argument("--out", default="runs/ablation", help="one output directory per run below this")
    p.add_argument("--json", default="docs/ablation.json")
    p.add_argument("--plot", default="docs/ablation.png", help="'' for no plot")
    p.add_argument("--reuse", action="store_true",
                   help="keep a run whose OUT/ARM-sSEED/summary.json exists instead of training it again")
    p.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: keras_app.train arguments for every arm (e.g. -- --arch tiny)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    extra = tuple(a for a in args.extra if a != "--")
    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    try:
        seeds = tuple(int(x) for x in args.seeds.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"--seeds {args.seeds!r} must be integers, comma-separated (e.g. 1,2)") from None
    s = AblationSettings(np=args.np, epochs=args.epochs, train_examples=args.train_examples,
                         val_examples=args.val_examples,
                         small_batch=args.small_batch, final_batch=args.final_batch, smoothing=args.smoothing,
                         seeds=seeds, preset=args.preset, extra=extra)
    try:
        s.validate(names)
    except ValueError as err:
        raise SystemExit(f"tools.ablation: {err}") from None
    table = {n: a for n, a in arms(s).items() if n in names}
    doc = {"command": "python -m tools.ablation " + " ".join(sys.argv[1:] if argv is None else argv),
           "settings": {**dataclasses.asdict(s), "arms": names,
                        "images_per_run": s.epochs * s.train_examples if s.train_examples else None},
           "host": {"cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
           "runs": [], "arms": {}}
    for seed in seeds:
        for arm in table.values():
            out_dir = os.path.join(args.out, f"{arm.name}-s{seed}")
            summary_path = os.path.join(out_dir, "summary.json")
            launch_path = os.path.join(out_dir, "launch.json")     # this driver's record of the launch
            if args.reuse and os.path.exists(summary_path) and os.path.exists(launch_path):
                launch = json.load(open(launch_path))
                print(f"== {arm.name} seed {seed}: reusing {summary_path}", flush=True)
            else:
                for stale in (summary_path, launch_path):   # never mistake an older run's files for this one's
                    if os.path.exists(stale):
                        os.remove(stale)
                cmd = command(arm, seed, s, out_dir)
                print(f"== {arm.name} seed {seed}: {' '.join(cmd)}", flush=True)
                t0 = time.perf_counter()
                rc = subprocess.call(cmd, cwd=ROOT)
                launch = {"command": cmd, "returncode": rc, "wall_seconds": time.perf_counter() - t0}
                os.makedirs(out_dir, exist_ok=True)
                write_json_atomic(launch_path, launch)
            rc, wall = launch["returncode"], launch["wall_seconds"]
            summary = json.load(open(summary_path)) if os.path.exists(summary_path) else None
            record_host(doc["host"], summary)
            doc["runs"].append(run_record(arm, seed, summary, rc, wall))
            doc["arms"] = aggregate(doc["runs"], table)
            write_outputs(doc, args.json, args.plot or None)
            r = doc["runs"][-1]
            print(f"== {arm.name} seed {seed}: {r['status']}, final val top-1 "
                  f"{r['final']['val_top1'] if r['final'] else 'n/a'}, {wall:.0f} s", flush=True)
    print(markdown_table(doc))
    print(f"# wrote {args.json}" + (f" and {args.plot}" if args.plot else ""))
    return 0 if all(r["status"] == "ok" for r in doc["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
