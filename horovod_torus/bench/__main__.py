"""``python -m horovod_torus.bench``: the all-reduce benchmark (nccl-tests style), under mpirun/horovodrun.

Examples::

    mpirun -np 4 python -m horovod_torus.bench -b 4K -e 128M -f 4 -n 10 -w 2 --grid 2x2 --json out.json
    horovodrun --gloo -np 4 -H localhost:4 python -m horovod_torus.bench --strategies torus ring

Rank 0 prints one row per (strategy, size); see :mod:`horovod_torus.bench.report` for the columns and the
algbw/busbw definitions, :mod:`horovod_torus.bench.allreduce` for the timing protocol.
"""
from __future__ import annotations

import argparse
import sys

from horovod_torus.bench.allreduce import BenchConfig, run_strategy
from horovod_torus.bench.reducers import MPI_STRATEGIES, STRATEGIES, TF_STRATEGIES
from horovod_torus.bench.report import (
    bench_document, canonical_dtype, format_header, format_row, parse_size, sweep_sizes, write_json_atomic,
)
from horovod_torus.bench.world import HorovodControl, MpiControl, host_facts, mpi_launched

__all__ = ["main", "build_parser", "config_from_args"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m horovod_torus.bench",
        description="All-reduce benchmark: torus (horovod_torus), ring (Horovod), mpi-torus (mpi4py), "
                    "mpi (MPI_Allreduce). Run under mpirun -np N or horovodrun -np N.")
    p.add_argument("-b", "--minbytes", default="4", help="smallest message in bytes, K/M/G suffixes (4)")
    p.add_argument("-e", "--maxbytes", default="128M", help="largest message in bytes (128M)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="size multiplier per row (2)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per row (20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed warm-up iterations (5)")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1),
                   help="check every result against the exact sum (1)")
    p.add_argument("-d", "--datatype", default="float32",
                   help="float32|float16|bfloat16|float64|int32|int64 (nccl-tests names too)")
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), metavar="NAME",
                   help=f"any of {' '.join(STRATEGIES)} (all)")
    p.add_argument("--grid", default=None, help="torus grid XxY (default: HOROVOD_TORUS_GRID, else a "
                                                "node's ranks per row)")
    p.add_argument("--torus-backend", default=None, choices=("auto", "horovod", "mpi"),
                   help="data path of the torus strategy (horovod_torus.tensorflow.init(backend=...); "
                        "default: HOROVOD_TORUS_BACKEND, else auto)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the rows and host facts as JSON")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="plot busbw and time against size")
    return p


def config_from_args(args) -> BenchConfig:
    """Validate the flags (identically on every rank, before any collective). Raises ValueError."""
    sizes = sweep_sizes(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    bad = [s for s in args.strategies if s not in STRATEGIES]
    if bad:
        raise ValueError(f"--strategies {' '.join(bad)} unknown: choose among {' '.join(STRATEGIES)}")
    if args.grid is not None:
        from horovod_torus.topology import TorusTopology

        TorusTopology.parse(args.grid)
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise ValueError(f"--plot {args.plot!r} must name a .png file")
    return BenchConfig(sizes=tuple(sizes), iters=args.iters, warmup=args.warmup_iters,
                       check=bool(args.check), dtype=canonical_dtype(args.datatype),
                       strategies=tuple(dict.fromkeys(args.strategies)), grid=args.grid)


def _start(config, args, use_tf, have_mpi, strategies):
    """Initialise Horovod and/or MPI; returns (control, comm, grid string, torus backend)."""
    comm, grid, torus_backend = None, config.grid, None
    if have_mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    if use_tf:
        import horovod_torus.tensorflow as hvd

        from horovod_torus.tensorflow.runtime import backend

        hvd.init(grid=config.grid, backend=args.torus_backend)
        from horovod_torus.devices import pin_gpu
        pin_gpu()  # one GPU per rank (= local rank), memory growth
        control = HorovodControl()
        grid = str(hvd.grid())
        torus_backend = backend()
    elif comm is not None:
        control = MpiControl(comm)
    else:
        raise AssertionError("unreachable: main() returns before _start when no strategy can run")
    if "mpi-torus" in strategies:  # validates an explicit grid on every rank, or resolves the default
        from horovod_torus.mpi import TorusComm

        tc = TorusComm.create(comm, grid)
        grid = str(tc.grid)
        tc.free()
    return control, comm, grid, torus_backend


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as e:
        print(f"horovod_torus.bench: error: {e}", file=sys.stderr)
        return 2
    use_tf = any(s in TF_STRATEGIES for s in config.strategies)
    have_mpi = mpi_launched()
    skipped = {}
    strategies = list(config.strategies)
    if not have_mpi:
        for s in [s for s in strategies if s in MPI_STRATEGIES]:
            skipped[s] = ("not launched by MPI (horovodrun --gloo): MPI strategies need mpirun or "
                          "horovodrun --mpi")
    if config.dtype in ("float16", "bfloat16"):
        for s in [s for s in strategies if s in MPI_STRATEGIES and s not in skipped]:
            skipped[s] = f"MPI has no {config.dtype} datatype"
    if config.dtype == "bfloat16" and "ring" in strategies:
        skipped["ring"] = "Horovod 0.28.1 has no bfloat16 all-reduce kernel"
    strategies = [s for s in strategies if s not in skipped]
    if not strategies:
        reasons = "; ".join(f"{s}: {why}" for s, why in skipped.items())
        print(f"horovod_torus.bench: error: nothing to run ({reasons}); add --strategies torus ring",
              file=sys.stderr)
        return 2
    try:
        control, comm, grid, torus_backend = _start(config, args, use_tf, have_mpi, strategies)
    except ValueError as e:  # raised on every rank before any collective (e.g. a grid that does not fit)
        print(f"horovod_torus.bench: error: {e}", file=sys.stderr)
        return 2
    config = BenchConfig(**{**config.__dict__, "grid": grid})
    launcher = "mpi" if have_mpi else "gloo"
    host = host_facts(control, launcher=launcher, extra={"torus_backend": torus_backend})
    root = control.rank == 0

    def emit(row):
        if root:
            print(format_row(row), flush=True)

    if root:
        print(f"# horovod_torus.bench: {control.size} ranks on {host['nodes']} host(s), grid {grid}, "
              f"torus backend {torus_backend}, dtype {config.dtype}, iters {config.iters}, warm-up {config.warmup}, check {int(config.check)}")
        for s, why in skipped.items():
            print(f"# skipping strategy {s}: {why}")
        print(format_header(), flush=True)
    rows = []
    for s in strategies:
        rows += run_strategy(s, config, control, comm=comm, on_row=emit)
    if root:
        checked = [r.wrong for r in rows if r.wrong is not None]
        print(f"# rows: {len(rows)}, total #wrong: {sum(checked) if checked else 'N/A'}")
        doc = bench_document(rows, world_size=control.size, grid=grid, host=host,
                             config={**config.__dict__, "sizes": list(config.sizes)}, skipped=skipped)
        if args.json:
            write_json_atomic(args.json, doc)
            print(f"# wrote {args.json}")
        if args.plot:
            from horovod_torus.bench.plot import plot_rows

            plot_rows(doc, args.plot)
            print(f"# wrote {args.plot}")
    wrong = sum(r.wrong or 0 for r in rows)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
