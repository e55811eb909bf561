"""The per-call check alone: one MAX ``MPI_Allreduce`` of 20 int64 words (what every torus call runs now)
against the ``MPI_Allgather`` of 10 words per rank it replaced, alternated in one launch.

    mpirun -np N python -m tools.probes.check_cost [--calls 2000] [--rounds 5] [--json out.json]

Prints (rank 0) the median and min-max microseconds per call of each, over ``--rounds`` rounds of
``--calls`` calls, and the bytes each rank receives per call.
"""
from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.world import cpu_model
from horovod_torus.signature import CallSignature, disagreeing, extremes
from horovod_torus.timing import time_loop


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.probes.check_cost")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD.Dup()
    n = comm.Get_size()
    words = CallSignature(1 << 20, "float32", layout=(("float32", (1024, 1024)),)).words(1)
    gathered = np.empty((n, words.size), np.int64)
    both = extremes(words)
    reduced = np.empty_like(both)

    def gather():
        comm.Allgather(words, gathered)

    def reduce():
        comm.Allreduce(both, reduced, op=MPI.MAX)
        disagreeing(reduced)

    times = {"allgather": [], "allreduce_max": []}
    for _ in range(args.rounds):
        for name, fn in (("allgather", gather), ("allreduce_max", reduce)):
            times[name].append(time_loop(fn, args.calls, warmup=10, barrier=comm.Barrier) * 1e6)
    if comm.Get_rank() == 0:
        out = {"command": f"mpirun -np {n} python -m tools.probes.check_cost --calls {args.calls} --rounds "
                          f"{args.rounds}", "ranks": n, "cpu_model": cpu_model(),
               "received_bytes_per_call": {"allgather": int(gathered.nbytes), "allreduce_max": int(both.nbytes)}}
        for name, ts in times.items():
            out[name] = {"median_us": float(np.median(ts)), "min_us": float(min(ts)), "max_us": float(max(ts))}
            print(f"{n} ranks {name:14s} {out[name]['median_us']:8.1f} us/call (min {out[name]['min_us']:.1f}, "
                  f"max {out[name]['max_us']:.1f}), {out['received_bytes_per_call'][name]} B received", flush=True)
        if args.json:
            write_json_atomic(args.json, out)
    comm.Free()


if __name__ == "__main__":
    main()
