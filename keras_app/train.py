"""Training CLI: data-parallel ResNet-50 on N ranks, gradients reduced through horovod_torus.

    horovodrun --gloo -np 4 -H localhost:4 python -m keras_app.train --preset fashion_mnist_demo --grid 2x2
    mpirun -np 4 python -m keras_app.train --preset fashion_mnist_demo --grid 2x2 --strategy ring

Per rank: build the model, compile it with ``horovod_torus.tensorflow.keras.DistributedOptimizer``
(``--strategy torus|ring``), broadcast rank 0's variables, then call ``fit`` once per batch-size stage
(rebuilding the input pipeline, ``initial_epoch`` = the stage's first epoch). Rank 0 alone prints,
writes TensorBoard logs, checkpoints (``--resume`` continues from the newest), ``summary.json``,
``config.json`` and ``training.png`` in ``--output-dir``.
"""
from __future__ import annotations

import os
import sys

from dataclasses import dataclass

from keras_app.config import AppConfig, save_config

__all__ = ["main", "configure", "train", "TrainResult", "build_optimizer", "CONFIG_ERROR"]


@dataclass
class TrainResult:
    """What :func:`train` returns on every rank: the trained model, and the summary dict on rank 0 (the
    content of summary.json; None elsewhere)."""
    model: object
    summary: dict | None


def _configure_tensorflow(cfg: AppConfig) -> None:
    """Thread pools must be set before TensorFlow runs its first op."""
    import tensorflow as tf
    if cfg.train.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.train.intra_op_threads)
    if cfg.train.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(cfg.train.inter_op_threads)
    if cfg.model.mixed_precision:
        import keras
        keras.mixed_precision.set_global_policy(cfg.model.mixed_precision)


def _optimizer(cfg: AppConfig):
    """The inner Keras optimizer of the config (not distributed, not loss-scaled)."""
    import keras
    o = cfg.optim
    wd = o.weight_decay or None
    name = o.optimizer          # explicit: Keras would number the names per process (adam, adam_1, ...)
    if o.optimizer == "sgd":
        return keras.optimizers.SGD(o.base_lr, momentum=o.momentum, nesterov=o.nesterov, weight_decay=wd,
                                    name=name)
    if o.optimizer == "adam":
        return keras.optimizers.Adam(o.base_lr, weight_decay=wd, name=name)
    if o.optimizer == "adamw":
        return keras.optimizers.AdamW(o.base_lr, weight_decay=o.weight_decay, name=name)
    return keras.optimizers.Lamb(o.base_lr, weight_decay=wd, name=name)


def build_optimizer(cfg: AppConfig, hvd):
    """The optimizer ``fit`` uses: ``DistributedOptimizer(opt)``, or with the ``mixed_float16`` policy
    ``DistributedOptimizer(LossScaleOptimizer(opt))``: the scaled gradients are reduced, so a non-finite
    gradient on any rank is non-finite on every rank after the all-reduce and all ranks skip that step
    together. The result is an instance of a LossScaleOptimizer subclass, so ``compile`` does not wrap
    it again (Keras wraps only optimizers that are not LossScaleOptimizers)."""
    import keras
    opt = _optimizer(cfg)
    if cfg.model.mixed_precision == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt, name="loss_scale_optimizer")
    return hvd.DistributedOptimizer(opt, strategy=cfg.train.strategy)


def train(cfg: AppConfig) -> TrainResult:
    """Run the training described by ``cfg`` on this rank.

    Raises (on every rank, before any collective): ValueError for a bad config (e.g. a global batch not
    divisible by the world size, a malformed batch schedule), FileNotFoundError for a missing dataset,
    keras_app.checkpoint.CheckpointError for a damaged checkpoint with ``--resume``.
    """
    _configure_tensorflow(cfg)
    import keras

    import horovod_torus.tensorflow.keras as hvd
    from horovod_torus.devices import pin_gpu
    from horovod_torus.tensorflow.keras.callbacks import BroadcastGlobalVariablesCallback, MetricAverageCallback
    from horovod_torus.tensorflow.keras.callbacks import StopTogetherCallback
    from keras_app import data
    from keras_app.callbacks import BatchSizeControl, CheckpointCallback, LearningRateWarmup
    from keras_app.checkpoint import CheckpointStore
    from keras_app.evaluate import ExactValidation
    from keras_app.losses import LabelSmoothedSparseCategoricalCrossentropy
    from keras_app.model import build_model
    from keras_app.report import EpochRecorder, plot_run, write_summary
    from keras_app.schedules import steps_per_epoch

    hvd.init(grid=cfg.train.grid or None, min_torus_bytes=cfg.train.min_torus_bytes or None)
    pin_gpu()               # GPU = local rank, memory growth; before the first TensorFlow op
    size, rank = hvd.size(), hvd.rank()
    cfg.validate(size)
    split = data.Split(rank, size)
    n_train = data.num_examples(cfg.data, train=True)
    out = cfg.train.output_dir
    grid = f"{hvd.grid().x}x{hvd.grid().y}"
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        save_config(cfg, os.path.join(out, "config.json"))

    model = build_model(cfg.data, cfg.model, seed=cfg.train.seed)
    opt = build_optimizer(cfg, hvd)
    loss = LabelSmoothedSparseCategoricalCrossentropy(cfg.optim.label_smoothing, from_logits=True)
    # jit_compile=False: Keras 3 picks XLA ("auto") when TensorFlow sees a GPU, and Horovod's ops have no
    # XLA kernels.
    model.compile(optimizer=opt, loss=loss, jit_compile=False,
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1"),
                           keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")])
    if model.optimizer is not opt:
        raise RuntimeError(f"Keras replaced the optimizer {opt!r} by {model.optimizer!r} in compile(): the "
                           f"checkpoints would not hold the optimizer fit uses")

    store = CheckpointStore(os.path.join(out, "checkpoints"), keep=cfg.train.keep_checkpoints)
    batch_control = BatchSizeControl(cfg.train.batch_schedule)
    lr_cb = LearningRateWarmup.from_config(cfg.optim, cfg.train.epochs, batch_control.schedule)
    state = {"epochs": [], "lr_steps": []}
    start = 0
    if cfg.train.resume and store.epochs():
        start = store.epochs()[-1]
        state = store.restore(start, model, model.optimizer)   # every rank reads the same files
        lr_cb.history = [tuple(s) for s in state["lr_steps"]]
    recorder = EpochRecorder(state["epochs"])

    val_batch = max(64, batch_control.schedule[0][1] // size)
    validation = ExactValidation(data.val_dataset(cfg.data, val_batch, split), loss,
                                 lambda v: hvd.allreduce(v, op=hvd.Sum, strategy=cfg.train.strategy).numpy(),
                                 every=cfg.train.val_every_epochs, last_epoch=cfg.train.epochs,
                                 share_state=lambda m: hvd.broadcast_variables(m.non_trainable_variables, 0))
    callbacks = [BroadcastGlobalVariablesCallback(0), batch_control, lr_cb,
                 MetricAverageCallback(strategy=cfg.train.strategy), validation, recorder]
    if rank == 0:
        callbacks += [CheckpointCallback(store, recorder, lr_cb),
                      keras.callbacks.TensorBoard(os.path.join(out, "tensorboard"), write_graph=False,
                                                  profile_batch=0)]
        crossover = hvd.torus().min_torus_bytes
        flat = ("always the torus" if crossover == 0 else "flat all-reduce always" if crossover >= 2 ** 62
                else f"flat all-reduce below {crossover} B")
        print(f"keras_app: {size} ranks, grid {grid}, strategy {cfg.train.strategy} ({flat}), "
              f"{n_train} training images/epoch, batch schedule {batch_control.schedule}, "
              f"epochs {cfg.train.epochs}" + (f", resumed after epoch {start}" if start else ""), flush=True)
    callbacks.append(StopTogetherCallback(on_nan="raise"))   # last: a stop or a NaN loss on any rank stops all
    for stage in batch_control.stages(cfg.train.epochs):
        if stage.end_epoch <= start:
            continue
        steps = steps_per_epoch(n_train, stage.global_batch)
        first = max(start, stage.start_epoch)      # a resumed run continues the data order of epoch `first`
        ds = data.train_dataset(cfg.data, stage.global_batch, split, seed=cfg.train.seed,
                                steps_per_epoch=steps, first_epoch=first)
        batch_control.set_pipeline_batch(stage.global_batch)
        model.fit(ds, steps_per_epoch=steps, initial_epoch=first, epochs=stage.end_epoch,
                  callbacks=callbacks, verbose=cfg.train.verbose if rank == 0 else 0)
        if model.stop_training:       # every rank together (StopTogetherCallback)
            break
    if rank != 0:
        return TrainResult(model, None)
    summary = write_summary(os.path.join(out, "summary.json"), world_size=size, grid=grid,
                            strategy=cfg.train.strategy, epochs=recorder.epochs, config=cfg.to_dict(),
                            lr_steps=lr_cb.history)
    plot_run(summary, os.path.join(out, "training.png"))
    f = summary["final"]
    print(f"keras_app: final val top-1 {f['val_top1']:.4f}, top-5 {f['val_top5']:.4f}, "
          f"{f['train_seconds']:.0f} s of training; summary {os.path.join(out, 'summary.json')}, "
          f"plot {os.path.join(out, 'training.png')}, TensorBoard {os.path.join(out, 'tensorboard')}",
          flush=True)
    return TrainResult(model, summary)


#: Exit status of a configuration error (as argparse's for a bad flag).
CONFIG_ERROR = 2


def configure(argv: list[str] | None, size: int, local_size: int | None = None) -> tuple[AppConfig, list[str]]:
    """The validated config of the command line ``argv`` for ``size`` ranks, and the notes to print.

    A batch schedule that was not given as ``--batch-schedule`` (a preset's, a ``--config`` file's, the
    default) is rounded down to multiples of ``size`` (:func:`keras_app.schedules.round_batch_schedule`),
    with a note. Raises ValueError (the message names the value and the fix) before anything starts:
    a bad value, a global batch or a ``--grid`` that does not fit ``size`` ranks, a HOROVOD_TORUS_GRID
    that does not, or another torus variable ``hvd.init`` would refuse (checked as it will)."""
    from horovod_torus.settings import TorusSettings
    from keras_app.config import parse_command_line
    from keras_app.schedules import round_batch_schedule

    cfg, explicit = parse_command_line(argv)
    # a leading ~ the shell left alone (--output-dir=~/runs, a --config file) is the home folder, not a folder "~"
    cfg.data.data_dir, cfg.data.manual_dir, cfg.train.output_dir = (
        os.path.expanduser(p) for p in (cfg.data.data_dir, cfg.data.manual_dir, cfg.train.output_dir))
    notes = []
    if cfg.train.elastic:   # the world size changes: any global batch, split unevenly (keras_app.elastic)
        from keras_app.elastic import check_elastic_config

        cfg.validate(None)
        check_elastic_config(cfg)
        return cfg, check_run_inputs(cfg)
    if "train.batch_schedule" not in explicit:
        rounded = round_batch_schedule(cfg.train.batch_schedule, size)
        if rounded != cfg.train.batch_schedule:
            notes.append(f"keras_app: batch schedule {cfg.train.batch_schedule} rounded down to multiples of "
                         f"{size} ranks: {rounded} (--batch-schedule sets it)")
            cfg.train.batch_schedule = rounded
    cfg.validate(size)
    # every HOROVOD_TORUS_* / stall variable init reads, checked as init will (with the flags that override them)
    TorusSettings.resolve(size=size, local_size=local_size, grid=cfg.train.grid or None,
                          min_torus_bytes=cfg.train.min_torus_bytes or None)
    notes += check_run_inputs(cfg)
    return cfg, notes


def check_run_inputs(cfg: AppConfig) -> list[str]:
    """What :func:`train` would otherwise find only once Horovod runs (where an error on rank 0 alone leaves
    the others waiting in the first broadcast): checked on every rank from the same files, so every rank
    gets the same verdict before any collective. Returns notes to print (a warm-up longer than the run, a
    batch-schedule step the run never reaches).

    Raises:
        ValueError: ``output_dir`` (or a folder above it) is a file, or not writable, or cannot be made (it is
            made here, on every rank); the dataset is missing
            (the path and the apt package or layout); an epoch shorter than a global batch of the
            schedule; with ``resume``, a damaged newest checkpoint (its path and the one to resume from).
    """
    from keras_app import data
    from keras_app.checkpoint import CheckpointError, CheckpointStore
    from keras_app.schedules import batch_stages, parse_batch_schedule, steps_per_epoch

    try:
        if cfg.data.dataset == "fashion_mnist" or cfg.data.train_examples:   # cheap to count
            n_train = data.num_examples(cfg.data, train=True)
            for stage in batch_stages(parse_batch_schedule(cfg.train.batch_schedule), cfg.train.epochs):
                steps_per_epoch(n_train, stage.global_batch)
        elif cfg.data.dataset != "imagenet_tfds":   # counting TFRecords reads them all: check they exist
            data.tfrecord_files(cfg.data, train=True)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    _check_output_dir(cfg.train.output_dir)  # after the data: a run refused for its data makes no folder
    if cfg.train.resume:
        store = CheckpointStore(os.path.join(cfg.train.output_dir, "checkpoints"))
        if store.epochs():
            try:
                store.verify(store.epochs()[-1])
            except CheckpointError as exc:
                raise ValueError(str(exc)) from None
            _check_resume_config(cfg)
    notes = []
    if cfg.optim.warmup_epochs > cfg.train.epochs:
        notes.append(f"keras_app: note: warmup_epochs={cfg.optim.warmup_epochs:g} is longer than the run "
                     f"({cfg.train.epochs} epochs): the learning rate does not reach its peak")
    late = [e for e, _ in parse_batch_schedule(cfg.train.batch_schedule) if e >= cfg.train.epochs]
    if late:
        notes.append(f"keras_app: note: batch schedule {cfg.train.batch_schedule!r} changes the batch at "
                     f"epoch(s) {late}, which this run of {cfg.train.epochs} epochs does not reach")
    return notes


#: The settings that shape a checkpoint's variables: a resume must keep them (its restore fails otherwise).
CHECKPOINT_SHAPING = (("model", "arch"), ("model", "mixed_precision"), ("data", "num_classes"),
                      ("data", "channels"), ("data", "image_size"), ("optim", "optimizer"))


def _check_resume_config(cfg: AppConfig) -> None:
    """With ``--resume``: raise ValueError when the ``config.json`` of the run that wrote the checkpoints (in
    ``--output-dir``; none, or unreadable: nothing to compare) differs in a :data:`CHECKPOINT_SHAPING`
    setting, naming both values and the fix."""
    from keras_app.config import load_config

    path = os.path.join(cfg.train.output_dir, "config.json")
    try:
        saved = load_config(path)
    except (OSError, ValueError, TypeError):
        return
    for section, name in CHECKPOINT_SHAPING:
        old, new = getattr(getattr(saved, section), name), getattr(getattr(cfg, section), name)
        if old != new:
            raise ValueError(f"--resume: the checkpoints in {cfg.train.output_dir!r} were written with "
                             f"{name}={old!r} ({path}), this run has {name}={new!r}: pass --{name.replace('_', '-')} "
                             f"{old!r} to resume them, or another --output-dir to start afresh")


def _check_output_dir(out: str) -> None:
    """Make ``out`` (every rank; a folder that exists is kept) or raise ValueError naming why not: it is a
    file, a file is in the way above it, making it fails (no permission, a name too long: making it is the
    one sure check), or it is not writable."""
    try:
        os.makedirs(out, exist_ok=True)
    except FileExistsError:  # out itself is a file
        raise ValueError(f"--output-dir {out!r} is a file: pass a folder path (it is made if missing)") from None
    except NotADirectoryError:  # a file above it: name it (the nearest existing path above out)
        path = os.path.dirname(os.path.abspath(out))
        while not os.path.exists(path):
            path = os.path.dirname(path)
        raise ValueError(f"--output-dir {out!r} cannot be made: {path} is a file: pass a folder path (it is made "
                         f"if missing)") from None
    except OSError as exc:
        raise ValueError(f"--output-dir {out!r} cannot be made ({exc.strerror or exc}): pass a folder path "
                         f"this user can create") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--output-dir {out!r} is not writable by this user: pass a writable folder")


def main(argv: list[str] | None = None) -> int:
    """The command line: configuration errors (:func:`configure`) print once, on rank 0, without a
    traceback, and every rank returns :data:`CONFIG_ERROR`; then :func:`train`."""
    import time

    from horovod_torus.launch import LaunchContext

    ctx = LaunchContext.from_environ()      # before Horovod starts: the launcher's variables
    try:
        cfg, notes = configure(argv, ctx.size, ctx.local_size)
        if cfg.train.elastic:
            from horovod_torus.tensorflow.elastic import check_elastic_launch

            check_elastic_launch()      # under mpirun: an error line, not a traceback per rank
    except (ValueError, ImportError) as exc:   # ImportError: --strategy-module (its message names the fix)
        if ctx.rank == 0:
            print(f"keras_app: configuration error: {exc}", file=sys.stderr, flush=True)
        else:
            time.sleep(2)   # mpirun ends the job at the first non-zero exit: let rank 0 print first
        return CONFIG_ERROR
    if ctx.rank == 0:
        for note in notes:
            print(note, flush=True)
    if cfg.train.elastic:
        from keras_app.elastic import train_elastic

        _configure_tensorflow(cfg)
        train_elastic(cfg, build_optimizer)
        return 0
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
