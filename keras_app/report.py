"""What rank 0 leaves behind: ``summary.json`` and PNG plots (matplotlib), both written atomically."""
from __future__ import annotations

import os
import platform
import socket
import time

import keras

from horovod_torus.atomic import save_figure_atomic, write_json_atomic
from horovod_torus.bench.world import allocator, cpu_model
from horovod_torus.tf_defaults import ONEDNN_VAR, onednn_enabled

__all__ = ["EpochRecorder", "write_summary", "plot_run", "run_host"]


def run_host() -> dict:
    """Facts that a speed figure of this run needs next to it (rank 0's host): hostname, cpu_model
    (``/proc/cpuinfo``), cpu_count (logical CPUs), onednn (whether TensorFlow runs its oneDNN kernels:
    :func:`horovod_torus.tf_defaults.onednn_enabled`), the ``TF_ENABLE_ONEDNN_OPTS`` value, the C allocator
    (:func:`horovod_torus.bench.world.allocator`), the TensorFlow and Python versions."""
    import tensorflow as tf

    return {"hostname": socket.gethostname(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "onednn": onednn_enabled(), ONEDNN_VAR: os.environ.get(ONEDNN_VAR), "allocator": allocator(),
            "tensorflow": tf.__version__, "python": platform.python_version()}


class EpochRecorder(keras.callbacks.Callback):
    """Collects one record per epoch: epoch, global_batch, learning_rate, train_loss, train_top1, val_loss,
    val_top1, val_top5, images_per_sec (training images of all ranks per second of training, validation
    excluded: Keras' own validation, or ``val_seconds`` in the logs), epoch_seconds (training + validation).
    Put it after MetricAverageCallback and keras_app.evaluate.ExactValidation."""

    def __init__(self, epochs: list[dict] | None = None):
        super().__init__()
        self.epochs: list[dict] = list(epochs or [])
        self._t0 = self._t_train = None

    def on_epoch_begin(self, epoch, logs=None):
        self._t0, self._t_train = time.perf_counter(), None

    def on_test_begin(self, logs=None):
        if self._t0 is not None and self._t_train is None:
            self._t_train = time.perf_counter() - self._t0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        total = time.perf_counter() - self._t0
        train = self._t_train if self._t_train is not None else total - float(logs.get("val_seconds", 0.0))
        gb = int(logs.get("global_batch", 0))
        steps = int(self.params.get("steps") or 0)
        rec = {"epoch": epoch + 1, "global_batch": gb, "learning_rate": logs.get("learning_rate"),
               "train_loss": logs.get("loss"), "train_top1": logs.get("top1"),
               "val_loss": logs.get("val_loss"), "val_top1": logs.get("val_top1"),
               "val_top5": logs.get("val_top5"), "steps": steps,
               "images_per_sec": steps * gb / train if train > 0 else None,
               "train_seconds": train, "epoch_seconds": total}
        self.epochs = [e for e in self.epochs if e["epoch"] != rec["epoch"]] + [rec]


def write_summary(path: str, *, world_size: int, grid: str, strategy: str, epochs: list[dict],
                  config: dict, lr_steps: list) -> dict:
    """Write ``summary.json``: world_size, grid, strategy, per-epoch records, final {val_top1, val_top5,
    train_seconds (sum of epoch_seconds)}, the per-step ``[step, epoch, lr, global_batch]``, config, and
    host (:func:`run_host`: the CPU model and oneDNN state that its speed figures depend on)."""
    validated = [e for e in epochs if e.get("val_top1") is not None]
    last = validated[-1] if validated else {}
    summary = {"world_size": world_size, "grid": grid, "strategy": strategy, "epochs": epochs,
               "final": {"val_top1": last.get("val_top1"), "val_top5": last.get("val_top5"),
                         "train_seconds": sum(e["epoch_seconds"] for e in epochs)},
               "steps": [list(s) for s in lr_steps], "config": config, "host": run_host()}
    write_json_atomic(path, summary)
    return summary


def plot_run(summary: dict, path: str) -> None:
    """One PNG, three panels: loss per epoch (train, val); top-1 per epoch (train, val); learning rate and
    global batch per optimizer step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = summary["epochs"]
    x = [e["epoch"] for e in ep]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    ax = axes[0]
    ax.plot(x, [e["train_loss"] for e in ep], "o-", label="train")
    ax.plot(x, [e["val_loss"] for e in ep], "s-", label="validation")
    ax.set(xlabel="epoch", ylabel="loss (label-smoothed CE)", title="loss")
    ax.legend()
    ax = axes[1]
    ax.plot(x, [e["train_top1"] for e in ep], "o-", label="train")
    ax.plot(x, [e["val_top1"] for e in ep], "s-", label="validation")
    ax.set(xlabel="epoch", ylabel="top-1 accuracy", title="top-1")
    ax.legend()
    ax = axes[2]
    steps = summary["steps"]
    ax.plot([s[0] for s in steps], [s[2] for s in steps], color="tab:blue")
    ax.set(xlabel="optimizer step", ylabel="learning rate", title="learning rate and global batch")
    ax2 = ax.twinx()
    ax2.step([s[0] for s in steps], [s[3] for s in steps], where="post", color="tab:orange")
    ax2.set_ylabel("global batch (images)", color="tab:orange")
    top1 = summary["final"]["val_top1"]
    fig.suptitle(f"ResNet-50, {summary['world_size']} ranks, grid {summary['grid']}, strategy "
                 f"{summary['strategy']}: final val top-1 " + ("n/a" if top1 is None else f"{top1:.4f}"))
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=90)
    plt.close(fig)
