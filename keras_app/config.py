"""Typed run configuration: dataclasses, named presets, command-line overrides, the saved resolved config.

Every field of every section is also a command-line flag with the field's name (``image_size`` ->
``--image-size``), with the field's ``help`` metadata as its help text; ``--preset NAME`` picks the
starting values (``--preset NAME --help`` shows them as the defaults). Rank 0 saves the resolved
configuration as ``OUTPUT_DIR/config.json`` so a run can be reproduced (``--config OUTPUT_DIR/config.json``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field

from horovod_torus import __version__
from horovod_torus.atomic import write_json_atomic
from keras_app.schedules import parse_batch_schedule, round_batch_schedule

__all__ = ["DataConfig", "ModelConfig", "OptimConfig", "TrainConfig", "AppConfig", "PRESETS", "CHOICES",
           "parse_args", "parse_command_line", "build_parser", "save_config", "load_config"]

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def _opt(default, help: str, metavar: str | None = None):
    """A config field: its default, the help text of its flag and, optionally, the flag's metavar."""
    return field(default=default, metadata={"help": help, "metavar": metavar})


@dataclass
class DataConfig:
    dataset: str = _opt("fashion_mnist", "the data set: Fashion-MNIST IDX files, ImageNet TFRecord shards or "
                                         "ImageNet through TensorFlow Datasets")
    data_dir: str = _opt(FASHION_MNIST_DIR, "folder of the IDX files, the TFRecord shards or the TFDS data directory",
                         "DIR")
    manual_dir: str = _opt("", "imagenet_tfds: folder holding ILSVRC2012_img_{train,val}.tar", "DIR")
    image_size: int = _opt(32, "square input side, pixels (Keras ResNet-50 needs >= 32)", "PIXELS")
    channels: int = _opt(1, "1 (grey) or 3 (RGB)", "N")
    num_classes: int = _opt(10, "classes of the logits layer", "N")
    train_examples: int = _opt(0, "images per epoch; 0: the whole training split", "N")
    val_examples: int = _opt(0, "validation images: 0 the whole split (exact metrics), N about N (a per-rank "
                                "cap)", "N")
    augment: str = _opt("flip", "training augmentation: none, flips, flips and crops, or Inception's random-"
                                "resized crop and flip")
    shuffle_buffer: int = _opt(10000, "images in the shuffle buffer of each rank", "N")
    label_offset: int = _opt(1, "imagenet_tfrecord: subtracted from image/class/label (1..1000)", "N")
    pipeline_threads: int = _opt(0, "tf.data threads per rank; 0: AUTOTUNE (see data.pipeline_options)", "N")


@dataclass
class ModelConfig:
    arch: str = _opt("resnet50", "the model: Keras ResNet-50, or tiny (2 convolutions: seconds-long smoke runs "
                                 "and tests)")
    bn_momentum: float = _opt(0.9, "BatchNormalization momentum (Keras' 0.99 lags far behind in short runs)",
                              "M")
    mixed_precision: str = _opt("", "Keras mixed-precision policy; '' = float32")


@dataclass
class OptimConfig:
    optimizer: str = _opt("sgd", "the Keras optimizer (sgd: with momentum)")
    base_lr: float = _opt(0.1, "learning rate at global batch --base-batch (linear scaling rule)", "LR")
    base_batch: int = _opt(256, "the global batch at which the learning rate is --base-lr", "N")
    momentum: float = _opt(0.9, "sgd momentum", "M")
    nesterov: bool = _opt(True, "sgd: Nesterov momentum", "BOOL")
    weight_decay: float = _opt(0.0, "decoupled weight decay (of the Keras optimizers)", "WD")
    warmup_epochs: float = _opt(1.0, "epochs of gradual per-step warm-up to the peak learning rate", "EPOCHS")
    warmup_start_fraction: float = _opt(0.0, "the warm-up starts at this fraction of the peak rate", "F")
    decay: str = _opt("cosine", "learning-rate decay after the warm-up")
    final_lr_fraction: float = _opt(0.0, "the decay ends at this fraction of the peak rate", "F")
    label_smoothing: float = _opt(0.1, "label smoothing of the cross-entropy, in [0, 1)", "EPS")


@dataclass
class TrainConfig:
    epochs: int = _opt(2, "training length, in epochs of --train-examples images", "N")
    batch_schedule: str = _opt("0:256", "batch-size control: the global batch from each epoch on, each a "
                                        "multiple of the rank count (rounded down to one when not given on "
                                        "the command line)", "EPOCH:BATCH[,...]")
    strategy: str = _opt("torus", "the all-reduce strategy", "NAME")
    strategy_module: str = _opt("", "modules to import first (comma-separated): they register strategies",
                                "MODULE[,...]")
    grid: str = _opt("", "the torus grid, X*Y = the rank count; '' = HOROVOD_TORUS_GRID or the default grid",
                     "XxY")
    min_torus_bytes: str = _opt("", "fused gradient buffers below this many bytes take the flat all-reduce: "
                                    "0 always the torus, auto the crossover calibrated at init; '' = "
                                    "HOROVOD_TORUS_MIN_BYTES, else auto", "BYTES|auto")
    output_dir: str = _opt("runs/demo", "where rank 0 writes checkpoints, logs, summary.json and config.json",
                           "DIR")
    resume: bool = _opt(False, "continue from the latest checkpoint in --output-dir")
    keep_checkpoints: int = _opt(2, "checkpoints kept (the newest)", "N")
    seed: int = _opt(1, "random seed of the initial weights and the data order", "N")
    intra_op_threads: int = _opt(0, "TensorFlow intra-op threads per rank; 0: TensorFlow's default", "N")
    inter_op_threads: int = _opt(0, "TensorFlow inter-op threads per rank; 0: TensorFlow's default", "N")
    val_every_epochs: int = _opt(1, "validate every N epochs (and after the last)", "N")
    elastic: bool = _opt(False, "keep training when ranks are lost or added (needs horovodrun --gloo "
                                "--min-np/--max-np/--host-discovery-script; docs/guide/elastic.md)", "BOOL")
    commit_every: int = _opt(10, "--elastic: commit the state every N batches (and at each epoch's end); "
                                 "a reset redoes the batches after the last commit", "N")
    verbose: int = _opt(1, "rank 0's Keras fit output: 1 progress bar, 2 one line per epoch (batch jobs), "
                           "0 silent")


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
                        f"is not divisible by the world size {world_size}: use a multiple of {world_size}, "
                        f"e.g. --batch-schedule {round_batch_schedule(self.train.batch_schedule, world_size)} "
                        f"(each global batch rounded down to a multiple of {world_size})")
            if self.train.grid:
                from horovod_torus.topology import TorusTopology

                TorusTopology.parse(self.train.grid).check_size(world_size, flag="--grid")
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
        for name in ("train_examples", "val_examples"):
            if getattr(self.data, name) < 0:
                raise ValueError(f"{name}={getattr(self.data, name)} must be >= 0 (0: the whole split)")
        if not self.optim.base_lr > 0:   # NaN too
            raise ValueError(f"base_lr={self.optim.base_lr} must be > 0 (the learning rate at --base-batch)")
        if not self.optim.warmup_epochs >= 0:   # NaN too
            raise ValueError(f"warmup_epochs={self.optim.warmup_epochs} must be >= 0 (0: no warm-up)")
        mtb = self.train.min_torus_bytes.strip().lower()
        if mtb not in ("", "auto") and not mtb.isdigit():
            raise ValueError(f"min_torus_bytes={self.train.min_torus_bytes!r}: give a number of bytes >= 0 "
                             f"(0: always the torus), auto, or '' (HOROVOD_TORUS_MIN_BYTES, else auto)")
        if self.train.commit_every < 1:
            raise ValueError(f"commit_every={self.train.commit_every} must be >= 1 (batches between commits)")
        if not 0.0 <= self.optim.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.optim.label_smoothing} must be in [0, 1)")
        self._check_ranges()

    #: Numeric fields and the closed ranges they must lie in (NaN is outside every range; inf where the bound
    #: is finite), with what the value means: checked on every rank before Horovod starts.
    RANGES = {
        ("data", "channels"): (1, 3, "1 (grey) or 3 (RGB)"), ("data", "num_classes"): (2, None, "classes"),
        ("data", "shuffle_buffer"): (1, None, "images; 1: no shuffling"),
        ("model", "bn_momentum"): (0.0, 1.0, "BatchNormalization momentum"),
        ("optim", "base_lr"): (0.0, 1e6, "the learning rate at --base-batch"),
        ("optim", "base_batch"): (1, None, "the global batch of --base-lr"),
        ("optim", "momentum"): (0.0, 1.0, "sgd momentum"),
        ("optim", "weight_decay"): (0.0, 1e6, "decoupled weight decay"),
        ("optim", "warmup_start_fraction"): (0.0, 1.0, "fraction of the peak rate"),
        ("optim", "final_lr_fraction"): (0.0, 1.0, "fraction of the peak rate"),
        ("train", "keep_checkpoints"): (1, None, "checkpoints kept"),
        ("train", "seed"): (0, 2 ** 32 - 1, "random seed"),
        ("train", "intra_op_threads"): (0, None, "threads; 0: TensorFlow's default"),
        ("train", "inter_op_threads"): (0, None, "threads; 0: TensorFlow's default"),
        ("train", "val_every_epochs"): (1, None, "epochs between validations"),
    }

    def _check_ranges(self) -> None:
        for (section, name), (low, high, meaning) in self.RANGES.items():
            value = getattr(getattr(self, section), name)
            if not (low <= value and (high is None or value <= high)):   # NaN fails both
                where = f"in [{low}, {high}]" if high is not None else f">= {low}"
                raise ValueError(f"{name}={value} must be {where} ({meaning}): --{name.replace('_', '-')} or "
                                 f"the {section} section of --config")
        if self.data.channels == 2:
            raise ValueError("channels=2 must be 1 (grey) or 3 (RGB): --channels")
        labels = {"fashion_mnist": 10}.get(self.data.dataset)
        if labels and self.data.num_classes < labels:
            raise ValueError(f"num_classes={self.data.num_classes}: {self.data.dataset} has {labels} classes, "
                             f"so the logits layer needs at least {labels}: --num-classes {labels}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Preset recipes. Only the fields that differ from the defaults are listed.
PRESETS: dict[str, dict[str, dict]] = {
    # The `make demo` recipe: 4 ranks on a 2x2 torus, 2 CPU cores, Fashion-MNIST; target >= 0.85 val top-1
    # within 20 minutes. min_torus_bytes 0: the demo runs the torus (on one host the calibrated crossover
    # would choose the flat all-reduce). How the values were chosen, with the measurements: docs/notes/demo_recipe.md.
    "fashion_mnist_demo": {
        "data": {"dataset": "fashion_mnist", "image_size": 32, "channels": 1, "num_classes": 10,
                 "train_examples": 60000, "augment": "flip", "pipeline_threads": 1},
        "model": {"bn_momentum": 0.9},
        "optim": {"optimizer": "adam", "base_lr": 0.004, "base_batch": 256, "warmup_epochs": 0.3,
                  "decay": "cosine", "label_smoothing": 0.1},
        "train": {"epochs": 2, "batch_schedule": "0:256,1:512", "output_dir": "runs/fashion_mnist_demo",
                  "intra_op_threads": 1, "inter_op_threads": 1, "min_torus_bytes": "0"},
    },
    # `make smoke`: about a minute on 2 cores with 4 ranks (start-up included), the tiny model on 20,000
    # training images, validated on the whole test set; the Makefile checks its val top-1 (>= 0.5, chance
    # 0.1). Measurements: docs/guide/app.md.
    "fashion_mnist_quick": {
        "data": {"dataset": "fashion_mnist", "train_examples": 20000, "val_examples": 0, "pipeline_threads": 1},
        "model": {"arch": "tiny", "bn_momentum": 0.9},
        "optim": {"optimizer": "adam", "base_lr": 0.01, "base_batch": 256, "warmup_epochs": 0.2,
                  "decay": "cosine", "label_smoothing": 0.1},
        "train": {"epochs": 3, "batch_schedule": "0:128,2:256", "output_dir": "runs/smoke",
                  "intra_op_threads": 1, "inter_op_threads": 1, "verbose": 2},
    },
    # ResNet-50 on 1,024 images (tests, the code path of the real model): its top-1 is near chance.
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


def _metavar(section: str, f: dataclasses.Field) -> str | None:
    allowed = CHOICES.get((section, f.name))
    if allowed is not None:
        return "{" + ",".join(map(str, allowed)) + "}"
    return f.metadata.get("metavar") or {"int": "N", "float": "X", "str": "TEXT", "bool": "BOOL"}[f.type]


def _help(section: str, f: dataclasses.Field, default) -> str:
    text = f.metadata["help"]
    if (section, f.name) == ("train", "strategy"):
        from horovod_torus.strategies.registry import ALIASES, available_strategies

        aliases = ", ".join(f"{a} (deprecated: {b})" for a, b in sorted(ALIASES.items()))
        text += (f": one of {', '.join(available_strategies())}; {aliases}; or a name that a "
                 f"--strategy-module registers")
    return f"{text} (default: {default!r})".replace("%", "%%")


class _RankZeroParser(argparse.ArgumentParser):
    """argparse's parser whose usage error prints on rank 0 only (the launcher's variables; every rank exits 2
    as argparse does), like the app's configuration errors: under mpirun one line, not one per rank."""

    def error(self, message):
        from horovod_torus.launch import LaunchContext

        if LaunchContext.from_environ().rank == 0:
            super().error(message)
        import time

        time.sleep(2)   # mpirun ends the job at the first non-zero exit: let rank 0 print first
        sys.exit(2)


def build_parser(start: AppConfig | None = None) -> argparse.ArgumentParser:
    """The command line; each flag's help shows its value in ``start`` (the starting values: the
    defaults, or those of ``--config``/``--preset``) as its default."""
    start = start or AppConfig()
    p = _RankZeroParser(
        prog="python -m keras_app.train",
        description="Data-parallel ResNet-50 (Keras 3) reduced through horovod_torus, with batch-size "
                    "control, LR warm-up and label smoothing. Launch under horovodrun/mpirun. "
                    "--preset NAME --help shows the preset's values as the defaults.")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="start from a named recipe (keras_app/config.py PRESETS); flags override it")
    p.add_argument("--config", default=None, metavar="FILE.json",
                   help="start from a saved config.json (before --preset), e.g. to repeat a run")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    for section, cls in _SECTIONS.items():
        group = p.add_argument_group(section)
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-")
            dest, default = f"{section}.{f.name}", getattr(getattr(start, section), f.name)
            if f.name == "resume":
                group.add_argument(flag, nargs="?", const=True, type=_bool, default=None, dest=dest,
                                   metavar="BOOL", help=_help(section, f, default))
                continue
            kind = {"int": int, "float": float, "str": str, "bool": _bool}[f.type]
            group.add_argument(flag, type=kind, default=None, dest=dest, choices=CHOICES.get((section, f.name)),
                               metavar=_metavar(section, f), help=_help(section, f, default))
    return p


def _start_values(config: str | None, preset: str | None) -> dict[str, dict]:
    """``{section: {field: value}}`` of a ``--config`` file, then a ``--preset`` over it."""
    values: dict[str, dict] = {s: {} for s in _SECTIONS}
    if config:
        try:
            with open(config) as fh:
                loaded = json.load(fh)
        except OSError as exc:
            raise ValueError(f"--config {config!r}: {exc.strerror or exc}: pass the path of a JSON file "
                             f"(e.g. the config.json a run wrote in its output folder)") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"--config {config!r} is not JSON ({exc}): pass a JSON object of sections") from None
        if not isinstance(loaded, dict) or not all(isinstance(d, dict) for d in loaded.values()):
            raise ValueError(f"--config {config!r}: expected a JSON object of sections ({', '.join(_SECTIONS)}), "
                             f"each an object of fields")
        for s, d in loaded.items():
            values.setdefault(s, {}).update(d)
    for s, d in PRESETS.get(preset or "", {}).items():
        values[s].update(d)
    return values


def parse_command_line(argv: list[str] | None = None) -> tuple[AppConfig, frozenset[str]]:
    """Defaults <- ``--config`` file <- ``--preset`` <- explicit flags: an unvalidated AppConfig, and the
    ``"section.field"`` names given as flags (``"train.batch_schedule"``: the user chose the batches)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--preset")
    pre.add_argument("--config")
    first, _ = pre.parse_known_args(argv)
    args = build_parser(from_dict(_start_values(first.config, first.preset))).parse_args(argv)
    values = _start_values(args.config, args.preset)
    explicit = set()
    for key, value in vars(args).items():
        if "." in key and value is not None:
            s, name = key.split(".", 1)
            values[s][name] = value
            explicit.add(key)
    return from_dict(values), frozenset(explicit)


def parse_args(argv: list[str] | None = None) -> AppConfig:
    """Defaults <- ``--config`` file <- ``--preset`` <- explicit flags. Returns an unvalidated AppConfig."""
    return parse_command_line(argv)[0]


def save_config(cfg: AppConfig, path: str) -> None:
    """Write the resolved config as JSON (indent 2, sorted keys), atomically (:mod:`horovod_torus.atomic`)."""
    write_json_atomic(path, cfg.to_dict(), indent=2, sort_keys=True)


def load_config(path: str) -> AppConfig:
    with open(path) as fh:
        return from_dict(json.load(fh))
