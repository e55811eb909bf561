"""Time the MPI transport's column algorithms against ``MPI_Allreduce`` on columns of 2..N ranks; JSON out.

Usage (one host, every rank of the launch; the column of Y ranks is ranks 0..Y-1 of MPI_COMM_WORLD)::

    mpirun -np 8 python -m tools.probes.column_algorithms --sizes 8 4096 65536 1048576 4194304 \\
        --rounds 3 --json runs/column_algorithms.json

For every column length Y and size (bytes per rank, float32) it runs phase 2 alone
(:meth:`horovod_torus.mpi.TorusComm.allreduce` on a 1 x Y TorusComm, no signature check) with each
algorithm of :data:`horovod_torus.settings.COLUMN_ALGORITHMS` ("mpi" is one ``MPI_Iallreduce``), checks
that every algorithm's result equals the ``mpi`` one (to float32 rounding), and records per call the
slowest rank's time, median and min-max over ``--rounds`` rounds. It then reports the model's choice
(``auto``: :meth:`horovod_torus.columns.ColumnModel.choose` of the TorusComm's column_model) next to the
measured fastest, the model's time over the fastest measured time for the choice, and a fit of the
point-to-point step and the library (alpha, bandwidth) from the ring and mpi rows
(:func:`horovod_torus.costmodel.fit_alpha_beta`, ring coefficients 2(Y-1), 2(Y-1)/Y) that
:data:`horovod_torus.columns.ON_NODE` can be set from. Not a test; timings depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

from horovod_torus.costmodel import fit_alpha_beta
from horovod_torus.mpi import TorusComm
from horovod_torus.settings import COLUMN_ALGORITHMS


def _iters(nbytes: int) -> int:
    return 20 if nbytes <= 65536 else 5 if nbytes <= 1 << 20 else 2


def _time_one(comm, tc, x, iters: int) -> float:
    """Seconds per call, the slowest rank's."""
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(iters):
        tc.allreduce(x, "sum")
    elapsed = (time.perf_counter() - t) / iters
    return comm.allreduce(elapsed, op=MPI.MAX)


def measure(world, ys, sizes, rounds: int) -> list[dict]:
    rows = []
    for y in ys:
        sub = world.Split(0 if world.rank < y else MPI.UNDEFINED, world.rank)
        if sub != MPI.COMM_NULL:
            comms = {a: TorusComm.create(sub, f"1x{y}", column_algorithm=a) for a in COLUMN_ALGORITHMS}
            auto = TorusComm.create(sub, f"1x{y}", column_algorithm="auto")
            rng = np.random.default_rng(sub.rank)
            for nbytes in sizes:
                x = rng.random(max(nbytes // 4, 1), dtype=np.float32)
                want = comms["mpi"].allreduce(x, "sum")
                for a, tc in comms.items():  # warm-up and a check of every algorithm
                    got = tc.allreduce(x, "sum")
                    if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                        raise AssertionError(f"column {a} on {y} ranks, {nbytes} B: differs from MPI_Allreduce")
                times = {a: [] for a in COLUMN_ALGORITHMS}
                for _ in range(rounds):
                    for a in COLUMN_ALGORITHMS:  # interleaved, so the load drifts over all of them alike
                        times[a].append(_time_one(sub, comms[a], x, _iters(nbytes)))
                med = {a: statistics.median(v) for a, v in times.items()}
                fastest = min(med, key=med.get)
                choice = auto.algorithm_for(x.nbytes)
                rows.append({"ranks": y, "size_bytes": int(x.nbytes), "fastest": fastest, "auto": choice,
                             "auto_over_fastest": med[choice] / med[fastest],
                             "model_s": auto.column_model.times(y, x.nbytes),
                             "time_s": {a: {"median": med[a], "min": min(v), "max": max(v)} for a, v in times.items()}})
                if sub.rank == 0:
                    print(f"Y={y} {x.nbytes:>9} B  " + "  ".join(f"{a} {med[a] * 1e6:9.1f} us" for a in COLUMN_ALGORITHMS)
                          + f"  fastest {fastest}, auto {choice} ({med[choice] / med[fastest]:.2f}x)", flush=True)
            for tc in (*comms.values(), auto):
                tc.free()
            sub.Free()
        world.Barrier()
    return rows


def fit(rows, algorithm: str) -> dict:
    """(alpha, bandwidth) per column length from the ``algorithm`` rows, ring coefficients."""
    out = {}
    for y in sorted({r["ranks"] for r in rows}):
        mine = [r for r in rows if r["ranks"] == y]
        try:
            link, rms = fit_alpha_beta([r["size_bytes"] for r in mine],
                                       [r["time_s"][algorithm]["median"] for r in mine], 2.0 * (y - 1), 2.0 * (y - 1) / y)
        except ValueError as exc:
            out[str(y)] = {"error": str(exc)}
            continue
        out[str(y)] = {"alpha_s": link.alpha, "bandwidth_Bps": link.bandwidth, "rms_relative_residual": rms}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="*", help="column lengths (default 2..world size)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[8, 4096, 65536, 1 << 20, 4 << 20],
                        help="bytes per rank (float32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size; medians over them")
    parser.add_argument("--json", help="write the rows and fits here (rank 0)")
    args = parser.parse_args(argv)
    world = MPI.COMM_WORLD
    ys = args.ranks or list(range(2, world.size + 1))
    bad = [y for y in ys if not 1 <= y <= world.size]
    if bad:
        raise SystemExit(f"--ranks {bad}: column lengths must be 1..{world.size} (the world size)")
    rows = measure(world, ys, args.sizes, args.rounds)  # rank 0 is in every column: it holds every row
    if world.rank == 0:
        agree = sum(r["auto"] == r["fastest"] for r in rows)
        doc = {"description": "column algorithms (phase 2 alone) against MPI_Allreduce, one host",
               "world_size": world.size, "rounds": args.rounds, "loadavg": list(os.getloadavg()), "rows": rows,
               "fit": {"ring": fit(rows, "ring"), "mpi": fit(rows, "mpi")},
               "auto_is_fastest": f"{agree} of {len(rows)}",
               "auto_over_fastest_max": max(r["auto_over_fastest"] for r in rows)}
        print(f"auto picked the measured fastest in {agree} of {len(rows)} cases; worst auto / fastest "
              f"{doc['auto_over_fastest_max']:.2f}; load average {doc['loadavg']}")
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
