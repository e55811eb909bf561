"""Check a finished run against what is expected of it: ``make smoke``'s last line.

    python -m keras_app.expect runs/smoke/summary.json --name smoke --min-top1 0.5 --seconds 41 --target-seconds 60

prints one line, the run's final validation top-1 against ``--min-top1`` (and chance, 1 / classes) and,
with ``--seconds``, its wall time against ``--target-seconds``, and exits 1 when the top-1 is below the
threshold (a missing or unfinished summary: exit 2). The time is reported, never failed: machines differ.
Reads the JSON only (no TensorFlow).
"""
from __future__ import annotations

import argparse
import json
import sys

from horovod_torus import __version__

__all__ = ["main", "verdict"]


def verdict(summary: dict, *, name: str, min_top1: float, seconds: float | None = None,
            target_seconds: float | None = None) -> tuple[bool, str]:
    """(met, the line to print) for a ``summary.json`` dict (:func:`keras_app.report.write_summary`)."""
    top1 = summary["final"]["val_top1"]
    chance = 1.0 / summary["config"]["data"]["num_classes"]
    met = top1 is not None and top1 >= min_top1
    shown = "none (no validation)" if top1 is None else f"{top1:.4f}"
    line = (f"{name}: val top-1 {shown} {'>=' if met else 'below'} {min_top1:.2f} expected (chance "
            f"{chance:.2f}): {'OK' if met else 'FAILED'}")
    if seconds is not None:
        line += f"; {seconds:.0f} s wall"
        if target_seconds:
            line += f" ({'within' if seconds <= target_seconds else 'over'} the {target_seconds:.0f} s target)"
    host = summary.get("host")
    if host:
        onednn = {True: "on", False: "off"}.get(host.get("onednn"), "unknown")
        line += f"; {host.get('cpu_count')} CPUs, {host.get('cpu_model')}, oneDNN {onednn}"
        if host.get("allocator"):
            line += f", malloc {host['allocator']}"
    return met, line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m keras_app.expect", description=__doc__.split("\n\n")[0])
    p.add_argument("summary", help="the run's summary.json")
    p.add_argument("--name", default="run", help="what the line calls the run (default: run)")
    p.add_argument("--min-top1", type=float, required=True, help="the final val top-1 the run must reach")
    p.add_argument("--seconds", type=float, default=None, help="the run's wall time, to report")
    p.add_argument("--target-seconds", type=float, default=None, help="the wall time it should take")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = p.parse_args(argv)
    try:
        with open(args.summary) as fh:
            summary = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"{args.name}: no summary to check ({exc}): did the run finish?", file=sys.stderr)
        return 2
    met, line = verdict(summary, name=args.name, min_top1=args.min_top1, seconds=args.seconds,
                        target_seconds=args.target_seconds)
    print(line, flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
