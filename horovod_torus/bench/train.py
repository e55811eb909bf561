"""``python -m horovod_torus.bench.train``: ResNet-50 training throughput on synthetic data, torus vs ring.

Example (4 ranks on one host, 2 images per rank at 64x64; on a GPU cluster use the defaults)::

    mpirun -np 4 python -m horovod_torus.bench.train --strategy torus --batch-size 2 --image-size 64 \
        --steps 5 --json train_torus.json

Protocol (every rank): build ``keras.applications.ResNet50(weights=None)`` with the same seed on every rank
(identical initial weights, no broadcast needed), SGD with momentum, one synthetic batch per rank (fixed
per-rank batch, random pixels and labels). A training step is one ``tf.function``: forward, loss,
gradients, ONE strategy call on the step's gradient list (``op=Average``), optimizer update.

1. ``--warmup-steps`` untimed steps (the first one traces the function), then a barrier and ``--steps``
   timed steps: step time = elapsed / steps on each rank;
2. gradient sync in isolation: the strategy alone, in its own ``tf.function``, on the real gradient list
   of one step (same shapes, dtypes and values), ``--sync-iters`` timed calls after a warm-up and barrier;
3. the per-rank times are gathered: min/avg/max over ranks; images/s = global batch / avg step time;
   sync share = avg sync time / avg step time (the share of a step a non-overlapped gradient sync costs).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys

import numpy as np

from horovod_torus import __version__
from horovod_torus.bench.reducers import tf_reduce_fn
from horovod_torus.strategies.registry import available_strategies, check_strategy, import_strategy_modules
from horovod_torus.atomic import write_json_atomic
from horovod_torus.bench.report import summarize_times
from horovod_torus.bench.world import HorovodControl, host_facts
from horovod_torus.launch import LaunchContext
from horovod_torus.devices import pin_gpu
from horovod_torus.timing import time_loop

__all__ = ["MODELS", "build_bench_model", "TrainBenchConfig", "TrainBenchResult", "throughput", "run", "main"]


MODELS = ("resnet50", "tiny")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def build_bench_model(name: str, image_size: int, classes: int):
    """``resnet50``: keras.applications.ResNet50(weights=None); ``tiny``: 2 convolutions + dense. The
    softmax output layer computes in float32 under any Keras dtype policy (the mixed-precision guide's rule
    for the last layer); the rest follows the global policy."""
    import keras

    shape = (image_size, image_size, 3)
    head = keras.layers.Dense(classes, "softmax", dtype="float32", name="predictions")
    if name == "resnet50":
        base = keras.applications.ResNet50(weights=None, input_shape=shape, include_top=False, pooling="avg")
        return keras.Model(base.input, head(base.output), name="resnet50")
    return keras.Sequential([keras.Input(shape), keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                             keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
                             keras.layers.GlobalAveragePooling2D(), head])


@dataclasses.dataclass(frozen=True)
class TrainBenchConfig:
    """Settings of the training benchmark (validated).

    Attributes:
        strategy: ``torus`` or ``ring``.
        model: ``resnet50`` (keras.applications.ResNet50, weights=None) or ``tiny`` (two convolutions and a
            dense layer: a seconds-long smoke run of the same protocol, used by the tests).
        batch_size: images per rank per step (the per-rank batch), >= 1.
        image_size: input height = width in pixels (>= 32, ResNet-50's minimum).
        classes: output classes (1000, as ImageNet).
        steps: timed steps >= 1; warmup_steps: untimed steps >= 1 (the first traces the step function).
        sync_iters: timed calls of the isolated gradient sync >= 1.
        grid: ``"XxY"`` or None (horovod_torus' default grid).
        torus_transport: ``auto``/``horovod``/``mpi`` or None (``horovod_torus.tensorflow.init(transport=...)``).
        seed: weight/data seed (same weights on every rank; data differs per rank).
        bucket_bytes: None (one reduction per step) or the DistributedOptimizer's ``bucket_bytes``.
        mixed_precision: Keras dtype policy ``float32``, ``mixed_float16`` (the loss is scaled by a
            ``LossScaleOptimizer`` and the *scaled* gradients are reduced, as in keras_app) or
            ``mixed_bfloat16``.
    """

    strategy: str = "torus"
    model: str = "resnet50"
    batch_size: int = 32
    image_size: int = 224
    classes: int = 1000
    steps: int = 10
    warmup_steps: int = 2
    sync_iters: int = 10
    grid: str | None = None
    torus_transport: str | None = None
    seed: int = 0
    bucket_bytes: int | None = None
    mixed_precision: str = "float32"

    def __post_init__(self):
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"--mixed-precision {self.mixed_precision!r} unknown: choose one of "
                             f"{', '.join(PRECISIONS)}")
        if self.model not in MODELS:
            raise ValueError(f"--model {self.model!r} unknown: choose one of {', '.join(MODELS)}")
        check_strategy(self.strategy)
        for name, low in (("batch_size", 1), ("image_size", 32), ("classes", 2), ("steps", 1),
                          ("warmup_steps", 1), ("sync_iters", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be >= {low}")


def throughput(global_batch: int, step_seconds: float) -> float:
    """Images per second of the whole job: global batch / step time (s). Raises ValueError for t <= 0."""
    if not step_seconds > 0:
        raise ValueError(f"step time {step_seconds} s must be positive")
    return global_batch / step_seconds


@dataclasses.dataclass(frozen=True)
class TrainBenchResult:
    """Measured result (identical on every rank). Times in seconds; throughput in images/s."""

    strategy: str
    model: str
    world_size: int
    grid: str
    per_rank_batch: int
    global_batch: int
    image_size: int
    parameters: int
    gradient_tensors: int
    gradient_bytes: int
    step_time_s: dict
    sync_time_s: dict
    images_per_s: float
    images_per_s_per_rank: float
    sync_share: float
    replicas_in_sync: bool
    peak_rss_bytes: int = 0
    local_step_time_s: dict | None = None
    exposed_sync_s: float | None = None
    bucket_bytes: int | None = None

    @classmethod
    def from_times(cls, config, world_size, grid, parameters, grad_tensors, grad_bytes, step_times, sync_times,
                   replicas_in_sync, peak_rss_bytes=0, local_step_times=None):
        """Build from every rank's step time and isolated sync time (seconds); ``peak_rss_bytes`` is the
        largest peak resident set size over the ranks (bytes, getrusage ru_maxrss); ``local_step_times``:
        every rank's time of the same step without any reduction (exposed sync = step - local step)."""
        step = {k: v / 1e6 for k, v in summarize_times(step_times).items()}
        local = None if local_step_times is None else {
            k: v / 1e6 for k, v in summarize_times(local_step_times).items()}
        sync = {k: v / 1e6 for k, v in summarize_times(sync_times).items()}
        ips = throughput(config.batch_size * world_size, step["avg"])
        return cls(strategy=config.strategy, model=config.model, world_size=world_size, grid=grid, per_rank_batch=config.batch_size,
                   global_batch=config.batch_size * world_size, image_size=config.image_size,
                   parameters=parameters, gradient_tensors=grad_tensors, gradient_bytes=grad_bytes,
                   step_time_s=step, sync_time_s=sync, images_per_s=ips, images_per_s_per_rank=ips / world_size,
                   sync_share=sync["avg"] / step["avg"], replicas_in_sync=bool(replicas_in_sync),
                   peak_rss_bytes=int(peak_rss_bytes), local_step_time_s=local,
                   exposed_sync_s=None if local is None else step["avg"] - local["avg"],
                   bucket_bytes=config.bucket_bytes)

    def table(self) -> str:
        s, g = self.step_time_s, self.sync_time_s
        return "\n".join([
            f"# {self.model} training throughput: strategy {self.strategy}, {self.world_size} ranks, grid {self.grid}, "
            f"per-rank batch {self.per_rank_batch} (global {self.global_batch}), {self.image_size}x{self.image_size}",
            f"# gradients: {self.gradient_tensors} tensors, {self.gradient_bytes} B "
            f"({self.parameters} trainable parameters)",
            f"{'':>14} {'min':>10} {'avg':>10} {'max':>10}",
            f"{'step (ms)':>14} {s['min'] * 1e3:>10.1f} {s['avg'] * 1e3:>10.1f} {s['max'] * 1e3:>10.1f}",
            f"{'grad sync (ms)':>14} {g['min'] * 1e3:>10.1f} {g['avg'] * 1e3:>10.1f} {g['max'] * 1e3:>10.1f}",
            f"images/s: {self.images_per_s:.2f} total, {self.images_per_s_per_rank:.2f} per rank; "
            f"gradient sync share of step time: {self.sync_share:.1%}; weights identical on every rank after "
            f"training: {'yes' if self.replicas_in_sync else 'NO'}",
            f"peak resident memory (max over ranks): {self.peak_rss_bytes / 2**20:.0f} MiB"]
            + ([f"step without any reduction (ms, avg): {self.local_step_time_s['avg'] * 1e3:.1f}; exposed "
                f"(non-overlapped) sync: {self.exposed_sync_s * 1e3:.1f} ms; buckets: "
                f"{self.bucket_bytes or 'one reduction per step'}"] if self.local_step_time_s else []))


def _wait(out):
    """Block until ``out`` (a tensor or a list of tensors) is computed."""
    (out[0] if isinstance(out, (list, tuple)) else out).numpy()


def run(config: TrainBenchConfig):
    """Run the benchmark (collective). Returns (TrainBenchResult, host facts). Horovod is initialised here."""
    import keras
    import tensorflow as tf

    import horovod_torus.tensorflow as hvd

    hvd.init(grid=config.grid, transport=config.torus_transport)
    pin_gpu()  # one GPU per rank (local rank), memory growth: before the first TensorFlow op
    control = HorovodControl()
    reduce = tf_reduce_fn(config.strategy)
    keras.mixed_precision.set_global_policy(config.mixed_precision)
    keras.utils.set_random_seed(config.seed)  # identical initial weights on every rank
    model = build_bench_model(config.model, config.image_size, config.classes)
    local_model = keras.models.clone_model(model)  # the same step without any reduction (exposed sync)
    local_model.set_weights(model.get_weights())
    from horovod_torus.tensorflow.keras import DistributedOptimizer

    def sgd():
        opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
        return keras.optimizers.LossScaleOptimizer(opt) if config.mixed_precision == "mixed_float16" else opt

    # the optimizer path that fit() uses: Optimizer.apply -> GradientReducer -> strategy (scaled gradients)
    optimizer = DistributedOptimizer(sgd(), strategy=config.strategy, bucket_bytes=config.bucket_bytes)
    local_optimizer = sgd()
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    variables = model.trainable_variables
    optimizer.build(variables)
    local_optimizer.build(local_model.trainable_variables)
    gen = tf.random.Generator.from_seed(config.seed + 1 + hvd.rank())
    images = gen.uniform([config.batch_size, config.image_size, config.image_size, 3])
    labels = gen.uniform([config.batch_size], maxval=config.classes, dtype=tf.int32)

    def gradients(m=model):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, m(images, training=True))
            opt = optimizer if m is model else local_optimizer
            scaled = opt.scale_loss(loss)   # x loss scale with a LossScaleOptimizer, else unchanged
        return loss, tape.gradient(scaled, m.trainable_variables)

    @tf.function
    def train_step():
        loss, grads = gradients()
        optimizer.apply(grads, variables)
        return loss

    @tf.function
    def local_step():
        loss, grads = gradients(local_model)
        local_optimizer.apply(grads, local_model.trainable_variables)
        return loss

    local_s = time_loop(local_step, config.steps, warmup=config.warmup_steps, wait=_wait, barrier=control.barrier)
    step_s = time_loop(train_step, config.steps, warmup=config.warmup_steps, wait=_wait, barrier=control.barrier)
    grads = tf.function(gradients)()[1]
    sync_fn = tf.function(lambda: reduce(grads, hvd.Average, "sync", hvd.Compression.none, 1.0, 1.0))  # all fetched
    sync_s = time_loop(sync_fn, config.sync_iters, warmup=1, wait=_wait, barrier=control.barrier)
    checksum = float(sum(tf.reduce_sum(tf.cast(tf.abs(v), tf.float64)) for v in variables))
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    gathered = control.gather([step_s, sync_s, checksum, peak_rss, local_s])
    grad_bytes = sum(int(g.shape.num_elements()) * g.dtype.size for g in grads)
    params = sum(int(np.prod(v.shape)) for v in variables)
    result = TrainBenchResult.from_times(config, control.size, str(hvd.grid()), params, len(grads), grad_bytes,
                                    gathered[:, 0], gathered[:, 1], bool((gathered[:, 2] == gathered[0, 2]).all()),
                                    gathered[:, 3].max(), gathered[:, 4])
    from horovod_torus.tensorflow.runtime import transport

    from horovod_torus.tf_defaults import ONEDNN_VAR, onednn_enabled

    host = host_facts(control, launcher="mpi" if LaunchContext.from_environ().mpi_world else "gloo",
                      extra={"torus_transport": transport(), "onednn": onednn_enabled(),
                             ONEDNN_VAR: os.environ.get(ONEDNN_VAR)})
    return result, host


def build_parser() -> argparse.ArgumentParser:
    d = TrainBenchConfig()
    p = argparse.ArgumentParser(prog="python -m horovod_torus.bench.train",
                                description="ResNet-50 training throughput on synthetic data (torus vs ring).")
    p.add_argument("--strategy", default=d.strategy,
                   help=f"a registered strategy: {', '.join(available_strategies())}, or yours (torus)")
    p.add_argument("--strategy-module", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it registers strategies); repeatable or comma-separated")
    p.add_argument("--model", default=d.model, choices=MODELS, help="resnet50 (default) or tiny (smoke test)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="per-rank batch (32)")
    p.add_argument("--image-size", type=int, default=d.image_size, help="pixels per side (224)")
    p.add_argument("--classes", type=int, default=d.classes)
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps (10)")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="untimed steps (2)")
    p.add_argument("--sync-iters", type=int, default=d.sync_iters, help="timed isolated gradient syncs (10)")
    p.add_argument("--grid", default=None, help="torus grid XxY")
    p.add_argument("--torus-transport", "--torus-backend", dest="torus_transport", default=None,
                   choices=("auto", "horovod", "mpi"),
                   help="data path of the torus strategy (default: HOROVOD_TORUS_TRANSPORT, else auto; "
                        "--torus-backend: deprecated alias)")
    p.add_argument("--bucket-bytes", type=int, default=None, metavar="B",
                   help="reduce in buckets of >= B bytes, reverse layer order (default: one reduction per step)")
    p.add_argument("--mixed-precision", default=d.mixed_precision, choices=PRECISIONS,
                   help="Keras dtype policy (float32); mixed_float16 adds dynamic loss scaling")
    p.add_argument("--json", default=None, metavar="FILE")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import_strategy_modules(args.strategy_module)
        config = TrainBenchConfig(strategy=args.strategy, model=args.model, batch_size=args.batch_size, image_size=args.image_size,
                                  classes=args.classes, steps=args.steps, warmup_steps=args.warmup_steps,
                                  sync_iters=args.sync_iters, grid=args.grid,
                                  torus_transport=args.torus_transport, bucket_bytes=args.bucket_bytes,
                                  mixed_precision=args.mixed_precision)
    except (ValueError, ImportError) as e:
        print(f"horovod_torus.bench.train: error: {e}", file=sys.stderr)
        return 2
    result, host = run(config)
    import horovod.tensorflow as hvd

    if hvd.rank() == 0:
        print(result.table(), flush=True)
        if args.json:
            write_json_atomic(args.json, {**dataclasses.asdict(result), "config": dataclasses.asdict(config),
                                          "host": host})
            print(f"# wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
