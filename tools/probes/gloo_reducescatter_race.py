"""Reproduce Horovod 0.28.1's Gloo reduce-scatter race, and check that the torus' phase 1 avoids it.

Horovod runs ``hvd.reducescatter`` under its Gloo controller as ``gloo::ReduceScatterHalvingDoubling``,
whose ``run()`` copies the reduced chunk to the start of its buffer on every rank but 0 while the
asynchronous send of that region to rank 0 may still be in flight: rank 0 then adds the peer's already
reduced values into the tail of its shard. It shows on slow links (the rails wiring: ranks of a node talk
through their own NICs), e.g. (as root, from the repository root, 4 nodes x 2 ranks, 200 Mbit/s):

    PATH=$PWD/.venv/bin:$PATH PYTHONPATH=$PWD python -m tools.cluster run --name race --nodes 4 \\
        --ranks-per-node 2 --wiring rails --rate 200mbit --launcher horovodrun -- \\
        env HOROVOD_TORUS_GRID=2x4 python tools/probes/gloo_reducescatter_race.py

Per size and call it checks against numpy: Horovod's three ops on the torus' process sets (``rs`` =
``hvd.reducescatter`` on the row, ``ar`` = ``hvd.allreduce`` on the column, ``ag`` = ``hvd.allgather`` on the
row), the torus transport's phase 1 (``ours-rs``), the whole torus all-reduce and ``hvd.allreduce``. Every
wrong result is printed (rank, size, call, count, index range); rank 0 prints the totals, and the exit
status is 1 when anything but the plain ``rs`` chain was wrong. Environment: ``ITERS`` (calls per size, 4),
``SIZES`` (bytes, comma-separated; 1 MiB, 2 MiB, 4 MiB), ``MODE`` (``function`` or ``eager``).
"""
import os
import sys

import numpy as np
import tensorflow as tf

import horovod.tensorflow as H
import horovod_torus.tensorflow as hvd
from horovod_torus.tensorflow.runtime import torus_process_sets
from horovod_torus.tensorflow.transports import HorovodTransport

hvd.init()
sets = torus_process_sets()
rank, size = hvd.rank(), hvd.size()
row, col = sets.row, sets.column
if row is None or col is None:
    sys.exit("needs a grid with X > 1 and Y > 1, e.g. HOROVOD_TORUS_GRID=2x4 on 8 ranks")
members = sets.grid.row_members(rank)
ITERS = int(os.environ.get("ITERS", "4"))
SIZES = [int(s) for s in os.environ.get("SIZES", "1048576,2097152,4194304").split(",")]
traced = os.environ.get("MODE", "function") == "function"
transport = HorovodTransport(sets, name="race_ours")


def data(r, count):
    return ((np.arange(count) + r) % 3).astype(np.float32)


def wrong(tag, got, want):
    bad = np.nonzero(got != want)[0]
    if bad.size:
        print(f"WRONG rank {rank} {tag}: {bad.size} of {want.size} at [{bad.min()}..{bad.max()}]", flush=True)
    return int(bad.size)


def horovod_phases(x):
    a = H.reducescatter(x, op=H.Sum, process_set=row, name="race_rs")
    b = H.allreduce(a, op=H.Sum, process_set=col, name="race_ar")
    return a, b, H.allgather(b, process_set=row, name="race_ag")


def ours(x):
    return transport.reduce_scatter(x, "sum")


def torus(x):
    return hvd.allreduce(x, op=hvd.Sum, strategy="torus", name="race_torus")


fns = [tf.function(f) if traced else f for f in (horovod_phases, ours, torus)]
plain = ours_total = 0
for nbytes in SIZES:
    count = nbytes // 4
    x = tf.constant(data(rank, count))
    pos, shard = members.index(rank), count // len(members)
    full = sum(data(r, count) for r in range(size))
    rs_want = sum(data(r, count) for r in members)[pos * shard:(pos + 1) * shard]
    for it in range(ITERS):
        a, b, c = fns[0](x)
        tag = f"{nbytes} B call {it}"
        plain += wrong(f"{tag} rs", a.numpy(), rs_want)
        wrong(f"{tag} ar", b.numpy(), full[pos * shard:(pos + 1) * shard])
        wrong(f"{tag} ag", c.numpy(), full)
        ours_total += wrong(f"{tag} ours-rs", fns[1](x).numpy(), rs_want)
        ours_total += wrong(f"{tag} torus", fns[2](x).numpy(), full)
        ours_total += wrong(f"{tag} ring", H.allreduce(x, op=H.Sum, name="race_ring").numpy(), full)
totals = H.allreduce(tf.constant([plain, ours_total], tf.int64), op=H.Sum, name="race_totals").numpy()
if rank == 0:
    print(f"gloo_reducescatter_race: grid {sets.grid.x}x{sets.grid.y}, sizes {SIZES} B, {ITERS} calls each: "
          f"hvd.reducescatter wrong elements {totals[0]}; torus phase 1 + torus + ring wrong elements "
          f"{totals[1]}", flush=True)
sys.exit(1 if totals[1] else 0)
