"""``python -m horovod_torus.bench``: the all-reduce benchmark (nccl-tests style), under mpirun/horovodrun.

Examples::

    mpirun -np 4 python -m horovod_torus.bench -b 4K -e 128M -f 4 -n 10 -w 2 --grid 2x2 --json out.json
    horovodrun --gloo -np 4 -H localhost:4 python -m horovod_torus.bench --strategies torus horovod

Rank 0 prints one row per (strategy, size); see :mod:`horovod_torus.bench.report` for the columns and the
algbw/busbw definitions, :mod:`horovod_torus.bench.allreduce` for the timing protocol.
"""
from __future__ import annotations

import argparse
import sys

from horovod_torus.bench.allreduce import BenchConfig, run_strategy
from horovod_torus.bench.reducers import DEFAULT_STRATEGIES, is_mpi, known_strategies, mpi_supports
from horovod_torus.strategies.registry import import_strategy_modules
from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.report import (
    bench_document, canonical_dtype, format_header, format_row, parse_size, sweep_sizes,
)
from horovod_torus.bench.world import HorovodControl, MpiControl, host_facts
from horovod_torus import ompi_rules
from horovod_torus.launch import LaunchContext

__all__ = ["main", "build_parser", "config_from_args"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m horovod_torus.bench",
        description="All-reduce benchmark: torus (horovod_torus), horovod (Horovod's own; old name ring), "
                    "mpi-torus (mpi4py), "
                    "mpi (MPI_Allreduce). Run under mpirun -np N or horovodrun -np N.")
    p.add_argument("-b", "--minbytes", default="4", help="smallest message in bytes, K/M/G suffixes (4)")
    p.add_argument("--sizes", default=None, metavar="LIST",
                   help="comma-separated message sizes instead of the -b/-e/-f sweep, e.g. 8,4K,64K,1M,16M,100M")
    p.add_argument("-e", "--maxbytes", default="128M", help="largest message in bytes (128M)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="size multiplier per row (2)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per row (20)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed warm-up iterations (5)")
    p.add_argument("--min-seconds", type=float, default=0.0, metavar="S",
                   help="where -n calls last less than S seconds on the slowest rank, count them as "
                        "warm-up and time enough calls for S seconds at that pace (at most 10000; the "
                        "row's JSON says how many); 0: always -n (0)")
    p.add_argument("-c", "--check", type=int, default=1, choices=(0, 1),
                   help="check every result against the exact sum (1)")
    p.add_argument("-d", "--datatype", default="float32",
                   help="float32|float16|bfloat16|float64|int32|int64 (nccl-tests names too)")
    p.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES), metavar="NAME",
                   help=f"space- or comma-separated names among {' '.join(known_strategies())} and the "
                        f"strategies of --strategy-module ({' '.join(DEFAULT_STRATEGIES)}); the MPI ones "
                        f"(mpi, mpi-torus) run first, before Horovod starts")
    p.add_argument("--strategy-module", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it registers strategies); repeatable or comma-separated")
    p.add_argument("--grid", default=None, help="torus grid XxY (default: HOROVOD_TORUS_GRID, else a "
                                                "node's ranks per row)")
    p.add_argument("--torus-transport", "--torus-backend", dest="torus_transport", default=None,
                   choices=("auto", "horovod", "mpi"),
                   help="data path of the torus strategy (horovod_torus.tensorflow.init(transport=...); "
                        "default: HOROVOD_TORUS_TRANSPORT, else auto; --torus-backend: deprecated alias)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the rows and host facts as JSON")
    p.add_argument("--version", action="version", version=f"%(prog)s {__import__('horovod_torus').__version__}")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="plot busbw and time against size")
    return p


def config_from_args(args) -> BenchConfig:
    """Validate the flags (identically on every rank, before any collective). Raises ValueError."""
    if args.sizes:
        sizes = sorted({parse_size(x) for x in args.sizes.split(",") if x.strip()})
    else:
        sizes = sweep_sizes(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    names = [n for item in args.strategies for n in item.split(",") if n]
    if args.grid is not None:
        from horovod_torus.topology import TorusTopology

        TorusTopology.parse(args.grid)
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise ValueError(f"--plot {args.plot!r} must name a .png file")
    return BenchConfig(sizes=tuple(sizes), iters=args.iters, warmup=args.warmup_iters,
                       check=bool(args.check), dtype=canonical_dtype(args.datatype),
                       strategies=tuple(dict.fromkeys(names)), grid=args.grid, min_seconds=args.min_seconds)


def _mpi_grid(comm, grid):
    """The grid string the mpi-torus strategy runs on (TorusSettings' rules; raises ValueError for a grid
    that does not fit, on every rank alike)."""
    from horovod_torus.mpi import comm_world
    from horovod_torus.settings import TorusSettings

    size, local_size, _ = comm_world(comm)
    return str(TorusSettings.resolve(size=size, local_size=local_size, grid=grid).grid)


def _start_horovod(config, args):
    """Initialise Horovod through horovod_torus; returns (control, grid string, torus transport)."""
    import horovod_torus.tensorflow as hvd
    from horovod_torus.devices import pin_gpu

    torus = hvd.init(grid=config.grid, transport=args.torus_transport)
    pin_gpu()  # one GPU per rank (= local rank), memory growth
    return HorovodControl(), str(torus.grid), torus.transport


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import_strategy_modules(args.strategy_module)
        config = config_from_args(args)
    except (ValueError, ImportError) as e:
        print(f"horovod_torus.bench: error: {e}", file=sys.stderr)
        return 2
    context = LaunchContext.from_environ()
    have_mpi = context.mpi_world
    skipped = {}
    strategies = list(config.strategies)
    if not have_mpi:
        for s in [s for s in strategies if is_mpi(s)]:
            skipped[s] = ("not launched by MPI (horovodrun --gloo): MPI strategies need mpirun or "
                          "horovodrun --mpi")
    if config.dtype in ("float16", "bfloat16"):
        for s in [s for s in strategies if is_mpi(s) and s not in skipped and not mpi_supports(s, config.dtype)]:
            skipped[s] = f"MPI has no {config.dtype} datatype"
    for flat in ("horovod", "ring"):
        if config.dtype == "bfloat16" and flat in strategies:
            skipped[flat] = "Horovod 0.28.1 has no bfloat16 all-reduce kernel"
    strategies = [s for s in strategies if s not in skipped]
    if not strategies:
        reasons = "; ".join(f"{s}: {why}" for s, why in skipped.items())
        print(f"horovod_torus.bench: error: nothing to run ({reasons}); add --strategies torus horovod",
              file=sys.stderr)
        return 2
    mpi_names = [s for s in strategies if is_mpi(s)]
    tf_names = [s for s in strategies if not is_mpi(s)]
    comm = None
    grid, torus_transport = config.grid, None
    # What the TensorFlow strategies' init would do before MPI starts (here MPI starts first, for the
    # MPI rows): Open MPI's all-reduce rule for the torus columns, or why none (horovod_torus.ompi_rules).
    rules_file, rules_why = (ompi_rules.prepare_for_job(context) if tf_names
                             else (None, "no TensorFlow strategy"))
    try:
        if have_mpi:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            if "mpi-torus" in mpi_names:
                grid = _mpi_grid(comm, grid)
    except ValueError as e:  # raised on every rank before any data moves (e.g. a grid that does not fit)
        print(f"horovod_torus.bench: error: {e}", file=sys.stderr)
        return 2
    control = MpiControl(comm) if comm is not None else None
    config = BenchConfig(**{**config.__dict__, "grid": grid})
    root = (control.rank if control is not None else context.rank) == 0

    def emit(row):
        if root:
            print(format_row(row), flush=True)

    rows, header = [], [False]

    def print_header(size, nodes):
        if root and not header[0]:
            header[0] = True
            print(f"# horovod_torus.bench: {size} ranks on {nodes} host(s), grid {grid}, dtype {config.dtype}, "
                  f"iters {config.iters}" + (f" (or {config.min_seconds:g} s)" if config.min_seconds else "")
                  + f", warm-up {config.warmup}, check {int(config.check)}")
            for s, why in skipped.items():
                print(f"# skipping strategy {s}: {why}")
            print(format_header(), flush=True)

    if mpi_names:  # MPI baselines first, in a process where Horovod is not running yet
        print_header(control.size, len(set(control.gather_object(_hostname()))))
        _warm_up(mpi_names, config, control, comm)
        for s in mpi_names:
            rows += run_strategy(s, config, control, comm=comm, on_row=emit)
    if tf_names:
        try:
            control, tf_grid, torus_transport = _start_horovod(config, args)
        except ValueError as e:  # raised on every rank before any collective
            print(f"horovod_torus.bench: error: {e}", file=sys.stderr)
            return 2
        grid = grid or tf_grid
        print_header(control.size, len(set(control.gather_object(_hostname()))))
        if root:
            print(f"# torus transport {torus_transport}; Horovod started (the rows above ran without it)",
                  flush=True)
        _warm_up(tf_names, config, control, comm)
        for s in tf_names:
            rows += run_strategy(s, config, control, comm=comm, on_row=emit)
    launcher = "mpi" if have_mpi else "gloo"
    host = host_facts(control, launcher=launcher, extra={"torus_transport": torus_transport,
                                                        "mpi_rows_before_horovod": True,
                                                        "ompi_rules": rules_file or f"none: {rules_why}"})
    if root:
        checked = [r.wrong for r in rows if r.wrong is not None]
        print(f"# rows: {len(rows)}, total #wrong: {sum(checked) if checked else 'N/A'}")
        doc = bench_document(rows, world_size=control.size, grid=grid, host=host,
                             config={**config.__dict__, "sizes": list(config.sizes)}, skipped=skipped)
        if args.json:
            write_json_atomic(args.json, doc)
            print(f"# wrote {args.json}")
        if args.plot:
            from horovod_torus.bench.plot import plot_allreduce_rows

            plot_allreduce_rows(doc, args.plot)
            print(f"# wrote {args.plot}")
    wrong = sum(r.wrong or 0 for r in rows)
    return 1 if wrong else 0


def _warm_up(names, config, control, comm) -> None:
    """One untimed call of every strategy at every size before any timing, so that one-time costs (first
    calls, allocations, connections) fall on no strategy's timed rows, whichever runs first."""
    once = BenchConfig(**{**config.__dict__, "iters": 1, "warmup": 0, "check": False, "min_seconds": 0.0})
    for s in names:
        run_strategy(s, once, control, comm=comm)


def _hostname() -> str:
    import socket

    return socket.gethostname()


if __name__ == "__main__":
    sys.exit(main())
