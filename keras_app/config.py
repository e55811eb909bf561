"""Typed run configuration: dataclasses, named presets, command-line overrides, the saved resolved config.

Every field of every section is also a command-line flag with the field's name (``image_size`` ->
``--image-size``); ``--preset NAME`` picks the starting values. Rank 0 saves the resolved configuration as
``OUTPUT_DIR/config.json`` so a run can be reproduced (``--config OUTPUT_DIR/config.json``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field

from horovod_torus import __version__
from horovod_torus.atomic import write_json_atomic
from keras_app.schedules import parse_batch_schedule

__all__ = ["DataConfig", "ModelConfig", "OptimConfig", "TrainConfig", "AppConfig", "PRESETS", "CHOICES",
           "parse_args", "save_config", "load_config"]

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


@dataclass
class DataConfig:
    dataset: str = "fashion_mnist"      # fashion_mnist | imagenet_tfrecord | imagenet_tfds
    data_dir: str = FASHION_MNIST_DIR   # IDX files; TFRecord shards; or the TFDS data_dir
    manual_dir: str = ""                # imagenet_tfds: folder holding ILSVRC2012_img_{train,val}.tar
    image_size: int = 32                # square input side, pixels (Keras ResNet-50 needs >= 32)
    channels: int = 1                   # 1 (grey) or 3 (RGB)
    num_classes: int = 10
    train_examples: int = 0             # 0: the whole training split; else an epoch is this many images
    val_examples: int = 0               # 0: the whole validation split (exact metrics); N: about N (per-rank cap)
    augment: str = "flip"               # none | flip | flip_crop | inception (random-resized crop + flip)
    shuffle_buffer: int = 10000
    label_offset: int = 1               # imagenet_tfrecord: subtracted from image/class/label (1..1000)
    pipeline_threads: int = 0           # tf.data threads per rank; 0 = AUTOTUNE (see data.pipeline_options)


@dataclass
class ModelConfig:
    arch: str = "resnet50"              # resnet50 | tiny (2 convolutions: seconds-long smoke runs and tests)
    bn_momentum: float = 0.9            # Keras default 0.99 lags far behind in short runs (see preset)
    mixed_precision: str = ""           # "" (float32) | mixed_bfloat16 | mixed_float16


@dataclass
class OptimConfig:
    optimizer: str = "sgd"              # sgd (momentum) | adam | adamw | lamb
    base_lr: float = 0.1                # learning rate at global batch base_batch (linear scaling rule)
    base_batch: int = 256
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 0.0           # decoupled (AdamW/Lamb/SGD weight_decay of Keras optimizers)
    warmup_epochs: float = 1.0          # gradual per-step warm-up from warmup_start_fraction * peak
    warmup_start_fraction: float = 0.0
    decay: str = "cosine"               # cosine | linear | constant
    final_lr_fraction: float = 0.0
    label_smoothing: float = 0.1


@dataclass
class TrainConfig:
    epochs: int = 2
    batch_schedule: str = "0:256"       # EPOCH:GLOBAL_BATCH,... (batch-size control)
    strategy: str = "torus"             # any registered strategy: torus, torus:horovod, torus:mpi, ring, yours
    strategy_module: str = ""           # modules to import first (comma-separated): they register strategies
    grid: str = ""                      # XxY; "" = HOROVOD_TORUS_GRID or the default grid
    output_dir: str = "runs/demo"
    resume: bool = False
    keep_checkpoints: int = 2
    seed: int = 1
    intra_op_threads: int = 0           # 0: TensorFlow's default
    inter_op_threads: int = 0
    val_every_epochs: int = 1
    verbose: int = 1                    # rank 0 (Keras fit): 1 progress bar, 2 one line per epoch (batch jobs), 0 silent


_SECTIONS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "train": TrainConfig}

#: Allowed values of the fields that take a name (``--help`` lists them; validate() checks them).
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("data", "dataset"): ("fashion_mnist", "imagenet_tfrecord", "imagenet_tfds"),
    ("data", "augment"): ("none", "flip", "flip_crop", "inception"),
    ("model", "arch"): ("resnet50", "tiny"),
    ("model", "mixed_precision"): ("", "mixed_bfloat16", "mixed_float16"),
    ("optim", "optimizer"): ("sgd", "adam", "adamw", "lamb"),
    ("optim", "decay"): ("cosine", "linear", "constant"),
    ("train", "verbose"): (0, 1, 2),
}


@dataclass
class AppConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self, world_size: int | None = None) -> None:
        """Raise ValueError naming the bad value and the fix (called on every rank before any collective)."""
        schedule = parse_batch_schedule(self.train.batch_schedule)
        if world_size:
            for epoch, batch in schedule:
                if batch % world_size:
                    raise ValueError(
                        f"global batch {batch} (batch schedule {self.train.batch_schedule!r}, epoch {epoch}) "
                        f"is not divisible by the world size {world_size}: use a multiple of {world_size}")
        for (section, name), allowed in CHOICES.items():
            value = getattr(getattr(self, section), name)
            if value not in allowed:
                raise ValueError(f"{section}.{name}={value!r} is not one of {allowed}")
        from horovod_torus.strategies.registry import check_strategy, import_strategy_modules

        import_strategy_modules(self.train.strategy_module)
        check_strategy(self.train.strategy)  # ValueError naming the registered strategies
        if self.data.image_size < 32:
            raise ValueError(f"image_size={self.data.image_size}: Keras ResNet-50 needs at least 32")
        if self.data.pipeline_threads < 0:
            raise ValueError(f"pipeline_threads={self.data.pipeline_threads} must be >= 0 (0 = tf.data AUTOTUNE)")
        if self.train.epochs < 1:
            raise ValueError(f"epochs={self.train.epochs} must be >= 1")
        if not 0.0 <= self.optim.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.optim.label_smoothing} must be in [0, 1)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Preset recipes. Only the fields that differ from the defaults are listed.
PRESETS: dict[str, dict[str, dict]] = {
    # The `make demo` recipe: 4 ranks on a 2x2 torus, 2 CPU cores, Fashion-MNIST; target >= 0.85 val top-1
    # within 20 minutes. How the values were chosen, with the measurements: docs/notes/demo_recipe.md.
    "fashion_mnist_demo": {
        "data": {"dataset": "fashion_mnist", "image_size": 32, "channels": 1, "num_classes": 10,
                 "train_examples": 60000, "augment": "flip", "pipeline_threads": 1},
        "model": {"bn_momentum": 0.9},
        "optim": {"optimizer": "adam", "base_lr": 0.001, "base_batch": 256, "warmup_epochs": 0.3,
                  "decay": "cosine", "label_smoothing": 0.1},
        "train": {"epochs": 3, "batch_schedule": "0:256,1:512", "output_dir": "runs/fashion_mnist_demo",
                  "intra_op_threads": 1, "inter_op_threads": 1},
    },
    # A one-minute smoke run (tests, first try of a new machine).
    "fashion_mnist_smoke": {
        "data": {"dataset": "fashion_mnist", "train_examples": 1024, "val_examples": 512, "pipeline_threads": 1},
        "model": {"bn_momentum": 0.9},
        "optim": {"optimizer": "adam", "base_lr": 0.001, "base_batch": 256, "warmup_epochs": 1.0},
        "train": {"epochs": 2, "batch_schedule": "0:64,1:128", "output_dir": "runs/smoke", "verbose": 2},
    },
    # The paper's ImageNet recipe (Mikami et al. v1): 90 epochs at 224x224, the first 5 epochs at the low
    # global batch (16 per GPU on 2,176 GPUs = 34,816), then 32 per GPU (69,632); label smoothing 0.1;
    # gradual warm-up over those 5 epochs and the linear scaling rule. The job templates
    # (mpi_scripts/job_common.sh) pass a --batch-schedule for their own GPU count (16 then 32 per GPU).
    "imagenet_abci": {
        "data": {"dataset": "imagenet_tfrecord", "data_dir": "/groups/imagenet/tfrecords", "image_size": 224,
                 "channels": 3, "num_classes": 1000, "augment": "inception", "shuffle_buffer": 10000,
                 "train_examples": 1281167, "val_examples": 0},      # validation: the whole split
        "model": {"bn_momentum": 0.9, "mixed_precision": "mixed_float16"},
        "optim": {"optimizer": "sgd", "base_lr": 0.1, "base_batch": 256, "weight_decay": 5e-5,
                  "warmup_epochs": 5.0, "decay": "linear", "label_smoothing": 0.1},
        "train": {"epochs": 90, "batch_schedule": "0:34816,5:69632", "output_dir": "runs/imagenet"},
    },
}



def from_dict(values: dict) -> AppConfig:
    """Build an AppConfig from ``{section: {field: value}}``; unknown sections/fields raise ValueError."""
    sections = {}
    for name, cls in _SECTIONS.items():
        given = dict(values.get(name, {}))
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(given) - known
        if unknown:
            raise ValueError(f"unknown {name} fields {sorted(unknown)}; known: {sorted(known)}")
        sections[name] = cls(**given)
    extra = set(values) - set(_SECTIONS)
    if extra:
        raise ValueError(f"unknown config sections {sorted(extra)}; known: {sorted(_SECTIONS)}")
    return AppConfig(**sections)


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m keras_app.train",
        description="Data-parallel ResNet-50 (Keras 3) reduced through horovod_torus, with batch-size "
                    "control, LR warm-up and label smoothing. Launch under horovodrun/mpirun.")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="starting values")
    p.add_argument("--config", default=None, help="a saved config.json to start from (before --preset)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    for section, cls in _SECTIONS.items():
        group = p.add_argument_group(section)
        for f in dataclasses.fields(cls):
            kind = {"int": int, "float": float, "str": str, "bool": _bool}[f.type]
            flag = "--" + f.name.replace("_", "-")
            if f.name == "resume":
                group.add_argument(flag, nargs="?", const=True, type=_bool, default=None, dest=f"{section}.{f.name}",
                                   help="continue from the latest checkpoint in output_dir")
            else:
                allowed = CHOICES.get((section, f.name))
                group.add_argument(flag, type=kind, default=None, dest=f"{section}.{f.name}", choices=allowed,
                                   metavar=None if allowed is None else "{" + ",".join(map(str, allowed)) + "}",
                                   help=f"{section}.{f.name} (default {f.default!r})")
    return p


def parse_args(argv: list[str] | None = None) -> AppConfig:
    """Defaults <- ``--config`` file <- ``--preset`` <- explicit flags. Returns an unvalidated AppConfig."""
    args = build_parser().parse_args(argv)
    values: dict[str, dict] = {s: {} for s in _SECTIONS}
    if args.config:
        with open(args.config) as fh:
            for s, d in json.load(fh).items():
                values.setdefault(s, {}).update(d)
    if args.preset:
        for s, d in PRESETS[args.preset].items():
            values[s].update(d)
    for key, value in vars(args).items():
        if "." in key and value is not None:
            s, name = key.split(".", 1)
            values[s][name] = value
    return from_dict(values)


def save_config(cfg: AppConfig, path: str) -> None:
    """Write the resolved config as JSON (indent 2, sorted keys), atomically (:mod:`horovod_torus.atomic`)."""
    write_json_atomic(path, cfg.to_dict(), indent=2, sort_keys=True)


def load_config(path: str) -> AppConfig:
    with open(path) as fh:
        return from_dict(json.load(fh))
