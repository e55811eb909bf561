"""``python -m horovod_torus.doctor``: the first thing to run on a new cluster, under any launcher.

    mpirun -np 16 --hostfile hosts python -m horovod_torus.doctor
    horovodrun -np 16 -H n1:8,n2:8 python -m horovod_torus.doctor --grid 8x2
    NP=16 NPERNODE=8 HOSTFILE=hosts MODULE=horovod_torus.doctor bash mpi_scripts/mpirun.sh

Every rank reports its host, rank, local rank, the GPU it pinned (horovod_torus.devices: GPU = local
rank), Horovod's built controllers (MPI, Gloo) and GPU operations (NCCL, ...), the controller in use, the
MPI thread level, the torus grid and transport (``hvd.transport()``), the CPU model, whether TensorFlow's
oneDNN kernels are on (:mod:`horovod_torus.tf_defaults`), the C allocator (glibc, or tcmalloc/jemalloc
when preloaded: :func:`horovod_torus.bench.world.allocator`), TensorFlow's thread pools and the images/s of
one ResNet-50 training step (Keras' ResNet50, 32x32x3, 10 classes, batch ``--step-batch``, the second step
timed; concurrent on every rank, so it shows what a rank gets on a shared node), then all ranks run one 1 MB float32
all-reduce (Sum) through the torus and through Horovod's own (``strategy="horovod"``); each rank checks both
against the exact sum it computes itself (inputs are small integers: exact in float32). Rank 0 prints one
line per rank, in rank order, ending in ``OK`` or ``FAIL: why``, and a summary line; every rank exits with
status 1 when any rank failed (0 otherwise), so the launcher's exit status is the verdict.
"""
from __future__ import annotations

import argparse
import dataclasses
import socket
import sys
import time

import numpy as np

from horovod_torus import __version__, tf_defaults
from horovod_torus.bench.world import allocator, cpu_model

__all__ = ["RankReport", "check_allreduce", "main"]


@dataclasses.dataclass
class RankReport:
    """What one rank found. ``problems`` empty = OK."""
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    gpu: str
    built: str
    controller: str
    mpi_threads: str
    grid: str
    transport: str
    problems: list
    cpu: str = "?"
    onednn: str = "?"
    malloc: str = "?"
    threads: str = "?"
    step_images_per_s: float | None = None

    def line(self) -> str:
        verdict = "OK" if not self.problems else "FAIL: " + "; ".join(self.problems)
        step = "skipped" if self.step_images_per_s is None else f"{self.step_images_per_s:.1f} images/s"
        return (f"rank {self.rank}/{self.size} host {self.host} local {self.local_rank}/{self.local_size} "
                f"gpu {self.gpu} | built {self.built} | controller {self.controller}, MPI threads "
                f"{self.mpi_threads} | grid {self.grid}, transport {self.transport} | cpu {self.cpu}, oneDNN "
                f"{self.onednn}, malloc {self.malloc}, TF threads {self.threads}, ResNet-50 step {step} | {verdict}")


def doctor_input(rank: int, count: int) -> np.ndarray:
    """Rank ``rank``'s float32 input: element i = (i + rank) % 7 (small integers, exact sums)."""
    return ((np.arange(count) + rank) % 7).astype(np.float32)


def exact_sum(size: int, count: int) -> np.ndarray:
    """The exact Sum of every rank's :func:`doctor_input`, float32 [count]."""
    return sum(doctor_input(r, count).astype(np.float64) for r in range(size)).astype(np.float32)


def check_allreduce(result, expected, name: str) -> list[str]:
    """Problems (a list of strings, empty = none) of one all-reduce result against the exact sum."""
    result = np.asarray(result)
    if result.shape != expected.shape:
        return [f"{name} all-reduce returned shape {result.shape}, expected {expected.shape}"]
    wrong = int(np.count_nonzero(result != expected))
    return [f"{name} all-reduce: {wrong} of {expected.size} elements differ from the exact sum"] if wrong else []


def _built() -> tuple[str, str, str]:
    """(built controllers and ops, controller in use, MPI thread level)."""
    import horovod.tensorflow as hvd

    flags = {"MPI": hvd.mpi_built(), "Gloo": hvd.gloo_built(), "NCCL": hvd.nccl_built(),
             "CUDA": hvd.cuda_built(), "ROCm": hvd.rocm_built(), "CCL": hvd.ccl_built(), "DDL": hvd.ddl_built()}
    built = ",".join(k for k, v in flags.items() if v) or "none"
    controller = "MPI" if hvd.mpi_enabled() else "Gloo" if hvd.gloo_enabled() else "?"
    threads = "n/a (no MPI)"
    if hvd.mpi_enabled():
        from mpi4py import MPI

        level = MPI.Query_thread()
        names = {MPI.THREAD_SINGLE: "SINGLE", MPI.THREAD_FUNNELED: "FUNNELED",
                 MPI.THREAD_SERIALIZED: "SERIALIZED", MPI.THREAD_MULTIPLE: "MULTIPLE"}
        threads = names.get(level, str(level))
    return built, controller, threads


def resnet50_step_images_per_s(batch: int) -> float:
    """images/s of one ResNet-50 training step on this rank (Keras' ResNet50, 32x32x3, 10 classes, SGD,
    random data; the first step builds and compiles, the second is timed)."""
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.random((batch, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    model.train_on_batch(x, y)
    start = time.perf_counter()
    model.train_on_batch(x, y)
    return batch / (time.perf_counter() - start)


def _threads() -> str:
    import tensorflow as tf

    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    return f"intra {intra or 'default'}/inter {inter or 'default'}"


def run(grid: str | None, nbytes: int, step_batch: int = 8) -> tuple[RankReport, list[RankReport]]:
    """Collect this rank's report and run the all-reduce check (collective). Returns (mine, all ranks')
    on rank 0, (mine, []) elsewhere."""
    import tensorflow as tf

    tf_defaults.warn_if_onednn_off()  # a RuntimeWarning on every rank; the report line says on/off

    import horovod.tensorflow as _hvd
    import horovod_torus.tensorflow as hvd
    from horovod_torus.devices import pin_gpu

    hvd.init(grid=grid)
    problems = []
    try:
        gpu = pin_gpu() or "none (CPU)"
    except RuntimeError as err:
        gpu, problems = "?", [str(err)]
    built, controller, threads = _built()
    report = RankReport(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), socket.gethostname(), gpu,
                        built, controller, threads, str(hvd.grid()), hvd.transport(), problems, cpu=cpu_model(),
                        onednn={True: "on", False: "off", None: "?"}[tf_defaults.onednn_enabled()],
                        malloc=allocator(), threads=_threads())
    if step_batch:
        report.step_images_per_s = resnet50_step_images_per_s(step_batch)
    count = max(1, nbytes // 4)
    x = tf.constant(doctor_input(hvd.rank(), count))
    expected = exact_sum(hvd.size(), count)
    for strategy in ("torus", "horovod"):
        try:
            out = hvd.allreduce(x, op=hvd.Sum, strategy=strategy, name=f"doctor_{strategy}")
            report.problems += check_allreduce(out.numpy(), expected, strategy)
        except Exception as err:  # noqa: BLE001  (reported in the verdict; the other ranks time out)
            report.problems.append(f"{strategy} all-reduce raised {type(err).__name__}: {err}")
    everyone = _hvd.allgather_object(report, name="doctor_reports")
    return report, everyone if hvd.rank() == 0 else []


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m horovod_torus.doctor",
                                description="Check a cluster set-up: devices, Horovod build, grid, transport, "
                                            "CPU and oneDNN, one ResNet-50 step, and one torus all-reduce "
                                            "against Horovod's own. Run under mpirun or horovodrun with the "
                                            "job's rank layout.")
    p.add_argument("--grid", default=None, help="torus grid XxY (default: HOROVOD_TORUS_GRID, else a node per row)")
    p.add_argument("--bytes", type=int, default=1 << 20, help="all-reduce size in bytes (1 MiB)")
    p.add_argument("--step-batch", type=int, default=8,
                   help="batch of the timed ResNet-50 step (images; 0: skip the step)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.bytes < 4:
        print(f"horovod_torus.doctor: error: --bytes {args.bytes} must be >= 4", file=sys.stderr)
        return 2
    if args.step_batch < 0:
        print(f"horovod_torus.doctor: error: --step-batch {args.step_batch} must be >= 0", file=sys.stderr)
        return 2
    tf_defaults.quiet_logs()
    try:
        mine, everyone = run(args.grid, args.bytes, args.step_batch)
    except ValueError as err:      # a grid that does not fit: raised on every rank before any collective
        print(f"horovod_torus.doctor: error: {err}", file=sys.stderr)
        return 2
    failed = [r for r in everyone if r.problems]
    if mine.rank == 0:
        for r in everyone:
            print(f"doctor: {r.line()}", flush=True)
        print(f"doctor: {len(everyone) - len(failed)} of {len(everyone)} ranks OK, grid {mine.grid}, transport "
              f"{mine.transport}, {args.bytes} B torus all-reduce {'matches' if not failed else 'CHECK FAILED vs'} "
              f"Horovod's own and the exact sum", flush=True)
    import horovod.tensorflow as _hvd
    any_failed = int(_hvd.allreduce(np.array([len(failed) if mine.rank == 0 else 0], np.int32),
                                    op=_hvd.Sum, name="doctor_verdict").numpy()[0]) or len(mine.problems)
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
