# One-off probe behind docs/cluster_probes.md (not a test; run it on an emulated cluster, see that file).
import sys, time, numpy as np, os
import tensorflow as tf
import horovod_torus.tensorflow as hvd
from horovod_torus.tensorflow.runtime import torus_process_sets
import horovod.tensorflow as h
from horovod_torus.fusion import shard_counts
hvd.init(grid="2x4")
sets = torus_process_sets()
rank = h.rank()
def med(xs): return sorted(xs)[len(xs)//2]
def sync(): h.allreduce(tf.zeros([1]), op=h.Sum).numpy()
for mib in [int(a) for a in sys.argv[1:]]:
    n = mib * 1024 * 1024 // 4
    x = tf.ones([n], tf.float32)
    counts = shard_counts(n, 2)
    splits = tf.constant(counts, tf.int32)
    half = tf.ones([counts[0]], tf.float32)
    res = {}
    for it in range(4):
        sync(); t = time.perf_counter(); p, _ = h.alltoall(x, splits=splits, process_set=sets.row); p.numpy(); res.setdefault("alltoall", []).append(time.perf_counter()-t)
        sync(); t = time.perf_counter(); h.allreduce(half, op=h.Sum, process_set=sets.column).numpy(); res.setdefault("col_ar", []).append(time.perf_counter()-t)
        sync(); t = time.perf_counter(); h.allgather(half, process_set=sets.row).numpy(); res.setdefault("allgather", []).append(time.perf_counter()-t)
        sync(); t = time.perf_counter(); hvd.allreduce(x, op=h.Sum, strategy="torus").numpy(); res.setdefault("torus", []).append(time.perf_counter()-t)
        sync(); t = time.perf_counter(); h.allreduce(x, op=h.Sum).numpy(); res.setdefault("ring", []).append(time.perf_counter()-t)
    if rank == 0:
        print(mib, "MiB", {k: (round(med(v[1:]), 3), round(min(v[1:]), 3), round(max(v[1:]), 3)) for k, v in res.items()}, flush=True)
