"""``keras_app.train --elastic``: the app under an elastic ``horovodrun --gloo`` (Fashion-MNIST).

    horovodrun --gloo -np 4 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh \\
        python -m keras_app.train --elastic --preset fashion_mnist_quick --commit-every 5

When the world changes (a rank lost, or hosts added), :func:`horovod_torus.tensorflow.elastic.run` rolls
every survivor back to the last commit, rebuilds the torus on the default grid of the new world, and
synchronises the state from rank 0 (new processes start from it). What stays fixed across worlds:

* the global batch (the batch schedule's, per epoch); each rank's share is recomputed: rank r of N takes
  ``shard_counts(G, N)[r]`` consecutive samples of each global batch (the first ``G % N`` ranks one more;
  G = 512 on 3 ranks: 171, 171, 170), weighted ``share * N / G`` so that Horovod's average over the ranks
  is the mean over the G samples, as on any N;
* the learning rate: a function of the global batch and the fractional epoch only
  (:func:`keras_app.schedules.learning_rate`), so it does not move when N does;
* the data order: epoch e visits a permutation of the training set seeded by (seed, e), global batch b
  is its samples ``b*G .. (b+1)*G - 1``, and each sample's augmentation is seeded by (seed, e, position):
  the same sequence of global batches whatever N is and whenever it changes.

A commit (every ``--commit-every`` batches and at each epoch's end) copies the weights, the optimizer's
variables and (epoch, batch) to host memory; work after the last commit is redone after a reset.
Rank 0 writes ``summary.json`` with ``world_changes`` (time, step, old and new world size and grid),
``elastic/progress.json`` after each commit (the committed step, the world size, the resets so far, the
seconds since the start, the epoch's running loss; ``elastic/progress.jsonl``: all of them), and
each rank appends one line per (re)start of the training function to ``elastic/ranks.jsonl`` (pid, rank,
size, grid, step, the SHA-256 of its variables).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from horovod_torus.fusion import shard_counts

__all__ = ["rank_share", "check_elastic_config", "train_elastic", "records"]


def rank_share(global_batch: int, size: int, rank: int) -> tuple[int, int]:
    """(offset, count): rank ``rank`` of ``size`` takes samples ``offset .. offset + count - 1`` of each
    global batch of ``global_batch`` (:func:`horovod_torus.fusion.shard_counts`: the first
    ``global_batch % size`` ranks one more). Raises ValueError when a rank would get no sample."""
    if global_batch < size:
        raise ValueError(f"global batch {global_batch} < {size} ranks: every rank needs a sample (lower "
                         f"--max-np or raise the batch schedule)")
    counts = shard_counts(global_batch, size)
    return int(sum(counts[:rank])), int(counts[rank])


def check_elastic_config(cfg) -> None:
    """Raise ValueError (naming the value and the fix) for what ``--elastic`` does not support: a data set
    other than Fashion-MNIST, a fixed ``--grid`` (each world takes its default grid), ``--resume``."""
    if cfg.data.dataset != "fashion_mnist":
        raise ValueError(f"--elastic: dataset {cfg.data.dataset!r} is not supported; the elastic app reads "
                         f"Fashion-MNIST (--dataset fashion_mnist)")
    if cfg.train.grid:
        raise ValueError(f"--elastic with --grid {cfg.train.grid}: the grid is re-planned for every world (the "
                         f"default grid); leave --grid unset")
    if cfg.train.resume:
        raise ValueError("--elastic with --resume: an elastic job keeps its state in memory; leave --resume unset")


def _dataset(cfg, images, labels, *, epoch, start, steps, global_batch, rank, size):
    """The batches ``start .. steps - 1`` of ``epoch`` for this rank: (x, y, sample weight)."""
    import tensorflow as tf

    from keras_app.data import _fashion_preprocess

    perm = np.random.default_rng([cfg.train.seed, epoch]).permutation(len(labels))
    offset, count = rank_share(global_batch, size, rank)
    pos = (np.arange(start, steps)[:, None] * global_batch + offset + np.arange(count)[None, :]).reshape(-1)
    idx = perm[pos]
    weight = np.float32(count * size / global_batch)
    data = cfg.data

    def prep(x, y, p):
        seed = tf.stack([tf.constant(cfg.train.seed * 100_003 + epoch, tf.int64), p])
        return _fashion_preprocess(data, x[None], True, seed)[0], y, weight

    ds = tf.data.Dataset.from_tensor_slices((images[idx], labels[idx].astype(np.int32), pos.astype(np.int64)))
    return ds.map(prep).batch(count, drop_remainder=True).prefetch(2)


def _append_line(path, record):
    with open(path, "a") as fh:   # one short line per write (O_APPEND): ranks do not interleave
        fh.write(json.dumps(record) + "\n")


def records(out: str, name: str) -> list[dict]:
    """The records of ``out/elastic/<name>.jsonl`` (``"ranks"`` or ``"progress"``, module docstring), oldest
    first, read while the job may still append: a last line not yet complete is left out; no file: []."""
    try:
        with open(os.path.join(out, "elastic", f"{name}.jsonl")) as fh:
            lines = fh.read().split("\n")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines[:-1] if line.strip()]   # lines[-1]: "" or a partial line


def train_elastic(cfg, build_optimizer):
    """Train ``cfg`` elastically on this rank (module docstring); returns the summary dict on rank 0,
    None elsewhere.

    Raises (before any collective): ValueError for what :func:`check_elastic_config` refuses, or a launch
    that is not an elastic horovodrun."""
    import keras

    import horovod_torus.tensorflow.keras as hvd
    from horovod_torus.tensorflow.keras import elastic
    from keras_app.data import load_fashion_mnist
    from keras_app.losses import LabelSmoothedSparseCategoricalCrossentropy
    from keras_app.model import build_model
    from keras_app.report import write_json_atomic
    from keras_app.schedules import global_batch_at, learning_rate, parse_batch_schedule, steps_per_epoch

    check_elastic_config(cfg)
    elastic.check_elastic_launch()
    hvd.init()
    out = cfg.train.output_dir
    os.makedirs(os.path.join(out, "elastic"), exist_ok=True)
    images, labels = load_fashion_mnist(cfg.data.data_dir, "train")
    n = cfg.data.train_examples or len(labels)
    images, labels = images[:n], labels[:n]
    val_images, val_labels = load_fashion_mnist(cfg.data.data_dir, "test")
    if cfg.data.val_examples:
        val_images, val_labels = val_images[:cfg.data.val_examples], val_labels[:cfg.data.val_examples]
    schedule = parse_batch_schedule(cfg.train.batch_schedule)
    epochs, every = cfg.train.epochs, cfg.train.commit_every
    o = cfg.optim

    def lr_at(epoch: float, gb: int) -> float:
        return learning_rate(epoch, gb, base_lr=o.base_lr, base_batch=o.base_batch, warmup_epochs=o.warmup_epochs,
                             total_epochs=epochs, decay=o.decay, final_lr_fraction=o.final_lr_fraction,
                             warmup_start_fraction=o.warmup_start_fraction)

    model = build_model(cfg.data, cfg.model, seed=cfg.train.seed)
    opt = build_optimizer(cfg, hvd)
    loss = LabelSmoothedSparseCategoricalCrossentropy(o.label_smoothing, from_logits=True)
    model.compile(optimizer=opt, loss=loss, jit_compile=False,
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="top1")])
    state = elastic.KerasState(model, epoch=0, batch=0, world_changes=[], history=[])
    started = time.time()

    def step_of(s) -> int:
        return sum(steps_per_epoch(n, global_batch_at(schedule, e)) for e in range(s.epoch)) + s.batch

    def on_reset():
        change = elastic.last_world_change()
        state.world_changes.append({**change, "time": round(change["time"] - started, 3), "step": step_of(state)})
        state.save()   # kept through sync (rank 0's list wins)
        if hvd.rank() == 0:
            print(f"keras_app: world {change['old_size']} ranks ({change['old_grid']}) -> {change['new_size']} "
                  f"ranks ({change['new_grid']}) at step {step_of(state)}", flush=True)

    state.register_reset_callbacks([on_reset])

    class _LearningRate(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            gb = global_batch_at(schedule, state.epoch)
            model.optimizer.learning_rate = lr_at(state.epoch + state.batch / steps_per_epoch(n, gb), gb)

    class _Progress(keras.callbacks.Callback):   # rank 0, at each commit: for tests, monitors and the plot
        def on_train_batch_end(self, batch, logs=None):
            if hvd.rank() == 0 and state.batch % every == 0:
                now = {"step": step_of(state), "size": hvd.size(), "changes": len(state.world_changes),
                       "time": round(time.time() - started, 3), "loss": float((logs or {}).get("loss", "nan"))}
                write_json_atomic(os.path.join(out, "elastic", "progress.json"), now)
                _append_line(os.path.join(out, "elastic", "progress.jsonl"), now)

    callbacks = [_LearningRate(), elastic.CommitEvery(state, every), _Progress()]

    def evaluate():
        x = _val_inputs(cfg, val_images)
        logits = model.predict(x, batch_size=500, verbose=0)
        return float(np.mean(np.argmax(logits, axis=1) == val_labels))

    @elastic.run
    def loop(s):
        _append_line(os.path.join(out, "elastic", "ranks.jsonl"),
                     {"pid": os.getpid(), "host": os.environ.get("HOROVOD_HOSTNAME"), "rank": hvd.rank(),
                      "size": hvd.size(), "grid": str(hvd.grid()), "step": step_of(s), "changes": len(s.world_changes), "digest": s.digest()})
        while s.epoch < epochs:
            gb = global_batch_at(schedule, s.epoch)
            steps = steps_per_epoch(n, gb)
            if s.batch < steps:
                ds = _dataset(cfg, images, labels, epoch=s.epoch, start=s.batch, steps=steps, global_batch=gb,
                              rank=hvd.rank(), size=hvd.size())
                t0 = time.time()
                h = model.fit(ds, steps_per_epoch=steps - s.batch, epochs=1, callbacks=callbacks, verbose=0)
                record = {"epoch": s.epoch + 1, "loss": float(h.history["loss"][-1]), "size": hvd.size(),
                          "step": step_of(s), "time": round(time.time() - started, 3),
                          "epoch_seconds": time.time() - t0}
            else:
                record = {"epoch": s.epoch + 1, "size": hvd.size(), "step": step_of(s),
                          "time": round(time.time() - started, 3), "epoch_seconds": 0.0}
            record["val_top1"] = evaluate() if hvd.rank() == 0 else None
            s.history.append(record)
            s.epoch, s.batch = s.epoch + 1, 0
            s.commit()
            if hvd.rank() == 0:
                print(f"keras_app: epoch {record['epoch']}/{epochs} on {hvd.size()} ranks ({hvd.grid()}): "
                      f"loss {record.get('loss', float('nan')):.4f}, val top-1 {record['val_top1']:.4f}", flush=True)

    loop(state)
    _append_line(os.path.join(out, "elastic", "ranks.jsonl"),
                 {"pid": os.getpid(), "rank": hvd.rank(), "size": hvd.size(), "final": True,
                  "iterations": int(model.optimizer.iterations.numpy()), "digest": state.digest()})
    if hvd.rank() != 0:
        return None
    final_top1 = state.history[-1]["val_top1"] if state.history else None
    summary = {"world_size": hvd.size(), "grid": str(hvd.grid()), "strategy": cfg.train.strategy,
               "elastic": True, "commit_every": every, "epochs": state.history,
               "world_changes": state.world_changes,
               "final": {"val_top1": final_top1, "val_top5": None,
                         "train_seconds": sum(e["epoch_seconds"] for e in state.history),
                         "optimizer_iterations": int(model.optimizer.iterations.numpy()),
                         "committed_steps": step_of(state)},
               "config": cfg.to_dict()}
    write_json_atomic(os.path.join(out, "summary.json"), summary)
    print(f"keras_app: final val top-1 {final_top1:.4f} after {len(state.world_changes)} world change(s); "
          f"summary {os.path.join(out, 'summary.json')}", flush=True)
    return summary


def _val_inputs(cfg, images):
    from keras_app.data import _fashion_preprocess

    return _fashion_preprocess(cfg.data, images, False).numpy()
