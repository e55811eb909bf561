"""Horovod 0.28.1's own TensorFlow 2 examples on horovod_torus and Keras 3: the edits, the offline data, the check.

``mpi_scripts/horovod_examples.sh HOROVOD_CHECKOUT [OUT_DIR]`` drives the three subcommands::

    python -m tools.horovod_examples prepare CHECKOUT OUT_DIR [--epochs E --steps-per-epoch S --steps N]
    python -m tools.horovod_examples data KERAS_HOME --ranks NP [--data-dir /usr/share/datasets/fashion-mnist]
    python -m tools.horovod_examples check EXAMPLE LAUNCHER LOG --np NP [--rc RC] [the step options]

``prepare`` copies ``examples/tensorflow2/{tensorflow2_keras_mnist,tensorflow2_mnist,
tensorflow2_synthetic_benchmark}.py`` out of a Horovod checkout and applies, per example, the changes
listed in :data:`CHANGES`: one function each, from source text to source text. A function raises
:class:`ChangeError` when the lines it edits are not in the file (another Horovod version), so no change
is ever skipped silently. Nothing else in the files is touched; in particular the learning rate stays
scaled by ``hvd.size()``, and ``tf.keras`` / ``tf.optimizers`` / ``tf.losses`` stay as they are (on
TensorFlow 2.16+ with Keras 3 installed they *are* Keras 3: ``tf.keras.Sequential is keras.Sequential``).

``data`` writes Fashion-MNIST (Debian's ``dataset-fashion-mnist`` IDX files) as the ``mnist-%d.npz``
files the two MNIST examples load, one per rank, into ``KERAS_HOME/datasets``.

``check`` reads rank 0's lines of a launch's log and prints one summary line: the step count and the
first/last loss (the MNIST examples; the run fails unless the last loss is below the first) or the
throughput lines (the synthetic benchmark, which logs no loss).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys

__all__ = ["EXAMPLES", "CHANGES", "ChangeError", "substitute", "swap_import", "optimizer_variables_property",
           "drop_experimental_run_tf_function", "offline_mnist_npz", "limit_keras_fit", "limit_tape_steps",
           "transform", "prepare", "write_mnist_npz", "keras_epoch_lines", "rank0_lines", "check_log", "main"]

EXAMPLE_DIR = "examples/tensorflow2"
KERAS_MNIST, TAPE_MNIST, SYNTHETIC = ("tensorflow2_keras_mnist.py", "tensorflow2_mnist.py",
                                      "tensorflow2_synthetic_benchmark.py")
EXAMPLES = (KERAS_MNIST, TAPE_MNIST, SYNTHETIC)
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
LOG_EVERY = 10                      # tensorflow2_mnist.py prints the loss of every 10th step


class ChangeError(ValueError):
    """A change found none of the lines it edits: the file is not the Horovod 0.28.1 file it was written
    for. ``change``: the change's name (its function's, with a detail in parentheses where one function
    makes several); ``pattern``: the regular expression that matched nothing."""

    def __init__(self, change: str, pattern: str):
        super().__init__(f"{change}: no line matches {pattern!r}; pass an unmodified file of Horovod v0.28.1 "
                         f"(git checkout v0.28.1)")
        self.change, self.pattern = change, pattern


def substitute(src: str, pattern: str, repl, change: str, flags: int = re.M) -> str:
    """``re.subn(pattern, repl, src, flags=flags)``'s text; raises :class:`ChangeError` naming ``change``
    when nothing matched. The one edit primitive of every change here and in :mod:`tools.horovod_tests`."""
    out, n = re.subn(pattern, repl, src, flags=flags)
    if n == 0:
        raise ChangeError(change, pattern)
    return out


# ------------------------------------------------------------------------------------------- the changes
def swap_import(src: str) -> str:
    """The migration itself, not a Keras 3 change: ``horovod.tensorflow[.keras]`` -> ``horovod_torus...``.

    Stock Horovod 0.28.1 fails all three examples on Keras 3 even with the changes below (its warm-up
    callback calls ``keras.backend.get_value``, its ``DistributedGradientTape`` calls ``Variable.ref()``);
    ``import horovod`` (used only by the ``horovod.run`` branch) stays."""
    return substitute(src, r"^import horovod\.tensorflow(\.keras)? as hvd$", r"import horovod_torus.tensorflow\1 as hvd",
                      "swap_import")


def optimizer_variables_property(src: str) -> str:
    """Keras 3: ``Optimizer.variables`` is a property (a list), not a method; ``opt.variables()`` raises
    *TypeError: 'list' object is not callable*."""
    return substitute(src, r"\bopt\.variables\(\)", "opt.variables", "optimizer_variables_property")


def drop_experimental_run_tf_function(src: str) -> str:
    """Keras 3: ``Model.compile`` has no ``experimental_run_tf_function`` (a TF 2.0-era switch; *TypeError:
    Trainer.compile() got an unexpected keyword argument*). Keras 3's ``fit`` always calls the optimizer
    it was given, so the comment that asked for it is replaced too."""
    src = substitute(src, r"^( *)# Horovod: Specify `experimental_run_tf_function=False` to ensure TensorFlow\n"
                          r" *# uses hvd\.DistributedOptimizer\(\) to compute gradients\.\n",
                     r"\1# Keras 3: compile() has no experimental_run_tf_function (fit uses this optimizer).\n",
                     "drop_experimental_run_tf_function")
    return substitute(src, r",\s*experimental_run_tf_function=False", "", "drop_experimental_run_tf_function")


OFFLINE_LOADER = '''


def load_mnist_npz(path):
    # Offline data (tools/horovod_examples.py): keras.datasets.mnist.load_data(path=...) reads the same
    # file, $KERAS_HOME/datasets/<path> (default ~/.keras), but checks MNIST's sha256 first and, on a
    # mismatch (any other data set), downloads MNIST over it; this reads it with nothing downloaded.
    import os
    import numpy as np
    home = os.environ.get('KERAS_HOME') or os.path.join(os.path.expanduser('~'), '.keras')
    with np.load(os.path.join(home, 'datasets', path), allow_pickle=False) as f:
        return (f['x_train'], f['y_train']), (f['x_test'], f['y_test'])
'''


def offline_mnist_npz(src: str) -> str:
    """Not a Keras 3 change: the data, offline. ``tf.keras.datasets.mnist.load_data(path='mnist-%d.npz' %
    hvd.rank())`` becomes ``load_mnist_npz(...)`` with the same argument, defined in the file: Keras'
    loader verifies MNIST's hash and would download (and delete the Fashion-MNIST file) otherwise."""
    src = substitute(src, r"\btf\.keras\.datasets\.mnist\.load_data\(", "load_mnist_npz(", "offline_mnist_npz")
    return substitute(src, r"\n\n\n(?=def main\(\):)", lambda m: OFFLINE_LOADER + "\n\n", "offline_mnist_npz")


def limit_keras_fit(src: str, epochs: int, steps_per_epoch: int) -> str:
    """Fewer steps (a documented edit; the example has no option): ``epochs=24`` and
    ``steps_per_epoch=500 // hvd.size()`` become ``epochs`` and ``steps_per_epoch // hvd.size()``."""
    src = substitute(src, r"steps_per_epoch=500 // hvd\.size\(\)", f"steps_per_epoch={steps_per_epoch} // hvd.size()",
                     "limit_keras_fit")
    return substitute(src, r"\bepochs=24\b", f"epochs={epochs}", "limit_keras_fit")


def limit_tape_steps(src: str, steps: int) -> str:
    """Fewer steps (a documented edit; the example has no option): ``dataset.take(10000 // hvd.size())``
    becomes ``dataset.take(steps // hvd.size())``."""
    return substitute(src, r"dataset\.take\(10000 // hvd\.size\(\)\)", f"dataset.take({steps} // hvd.size())",
                      "limit_tape_steps")


# The changes each example gets, in order (the synthetic benchmark's steps and model are its own options).
CHANGES = {
    KERAS_MNIST: (swap_import, offline_mnist_npz, drop_experimental_run_tf_function, limit_keras_fit),
    TAPE_MNIST: (swap_import, offline_mnist_npz, optimizer_variables_property, limit_tape_steps),
    SYNTHETIC: (swap_import, optimizer_variables_property),
}
STEP_OPTIONS = {limit_keras_fit: ("epochs", "steps_per_epoch"), limit_tape_steps: ("steps",)}


def transform(name: str, src: str, *, epochs: int = 3, steps_per_epoch: int = 40, steps: int = 200) -> str:
    """``src`` (example ``name``) with its :data:`CHANGES` applied; the step limits are global step counts
    (divided by ``hvd.size()`` in the file, as Horovod's own counts are)."""
    values = {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "steps": steps}
    for change in CHANGES[name]:
        src = change(src, *(values[k] for k in STEP_OPTIONS.get(change, ())))
    return src


def prepare(checkout: str, out_dir: str, **limits) -> list[str]:
    """Writes the three edited examples to ``out_dir`` and returns their paths.

    Raises FileNotFoundError naming the missing file and ChangeError for a file of another version."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name in EXAMPLES:
        path = os.path.join(checkout, EXAMPLE_DIR, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} not found: pass a checkout of Horovod v0.28.1 "
                                    f"(git clone --branch v0.28.1 https://github.com/horovod/horovod)")
        with open(path) as f:
            src = f.read()
        paths.append(os.path.join(out_dir, name))
        with open(paths[-1], "w") as f:
            f.write(transform(name, src, **limits))
    return paths


# ------------------------------------------------------------------------------------------------- data
def write_mnist_npz(datasets_dir: str, ranks: int, data_dir: str = FASHION_MNIST_DIR) -> list[str]:
    """Fashion-MNIST as ``datasets_dir/mnist-{0..ranks-1}.npz``: ``x_train`` uint8 [60000, 28, 28],
    ``y_train`` uint8 [60000], ``x_test`` uint8 [10000, 28, 28], ``y_test`` uint8 [10000] (the keys,
    shapes and dtypes of Keras' ``mnist.npz``). Every rank's file holds the same data (the examples shuffle
    per rank); the files after the first are hard links to it where the file system allows."""
    import numpy as np
    from horovod_torus.atomic import open_atomic
    from keras_app.data import load_fashion_mnist      # imports TensorFlow: only when data is written

    if ranks < 1:
        raise ValueError(f"ranks={ranks}: write at least one file (--ranks NP, the launch's rank count)")
    (x_train, y_train), (x_test, y_test) = (load_fashion_mnist(data_dir, s) for s in ("train", "test"))
    os.makedirs(datasets_dir, exist_ok=True)
    paths = [os.path.join(datasets_dir, f"mnist-{r}.npz") for r in range(ranks)]
    with open_atomic(paths[0], binary=True) as fh:          # the one atomic-write helper
        np.savez_compressed(fh, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    for path in paths[1:]:
        if os.path.exists(path):
            os.remove(path)
        try:
            os.link(paths[0], path)
        except OSError:
            shutil.copyfile(paths[0], path)
    return paths


# ------------------------------------------------------------------------------------------------ check
# A launcher tags every piece of a rank's output: horovodrun each line ([0]<stdout>:), mpirun --tag-output
# each write ([1,0]<stdout>:), so an unbuffered print's text and its newline may come as two pieces, and a
# piece of another rank (or stream) may stand between them on the same line.
_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<(stdout|stderr)>:")
_NUMBER = r"[0-9.]+(?:e[+-]?\d+)?|nan|inf"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROGRESS = re.compile(rf"^\s*(\d+)/(\d+) .*? - loss: ({_NUMBER})\b")


def rank0_lines(text: str) -> list[str]:
    """Rank 0's stdout lines in a launch log, its pieces joined, tags and untagged launcher lines dropped."""
    streams: dict[tuple[str, str], list[str]] = {}
    for line in text.split("\n"):
        if not _TAG.match(line):
            continue                                  # the launcher's own output
        pieces = _TAG.split(line)[1:]                 # rank, stream, text, rank, stream, text, ...
        for i in range(0, len(pieces), 3):
            last = i + 3 >= len(pieces)
            streams.setdefault((pieces[i], pieces[i + 1]), []).append(pieces[i + 2] + ("\n" if last else ""))
    return "".join(streams.get(("0", "stdout"), [])).split("\n")[:-1]   # not splitlines(): \r is Keras' bar


def keras_epoch_lines(lines: list[str]) -> list[tuple[int, int, float]]:
    """(steps done, steps per epoch, loss) at the end of each epoch of Keras' progress bar (verbose=1).

    Keras 3 draws the bar with backspaces and carriage returns even into a file; the last update before
    the next ``Epoch k/N`` line holds the epoch's mean loss (what Keras logs for the epoch)."""
    epochs: list = []
    for line in lines:
        for part in re.split(r"[\r\x08]+", _ANSI.sub("", line)):
            if re.match(r"^Epoch \d+/\d+", part):
                epochs.append(None)
            m = _PROGRESS.match(part)
            if m and epochs:
                epochs[-1] = (int(m.group(1)), int(m.group(2)), float(m.group(3)))
    return [e for e in epochs if e is not None]


def _synthetic(head: str, lines: list[str]) -> tuple[bool, str]:
    text = "\n".join(lines)
    iters = re.findall(r"^Iter #\d+: ([0-9.]+) img/sec per \w+$", text, re.M)
    total = re.search(r"^Total img/sec on \d+ \w+\(s\): ([0-9.]+) \+-([0-9.]+)$", text, re.M)
    model = re.search(r"^Model: (\S+)$", text, re.M)
    if not iters or not total:
        return False, f"{head} FAILED: no 'Iter #k: X img/sec' and 'Total img/sec' lines from rank 0"
    return True, (f"{head} OK, {model.group(1) if model else '?'}: {len(iters)} iterations, {', '.join(iters)} "
                  f"img/sec per rank, total {total.group(1)} +-{total.group(2)} img/sec (no loss logged)")


def check_log(example: str, launcher: str, text: str, np_: int, rc: int = 0, *, epochs: int = 3,
              steps_per_epoch: int = 40, steps: int = 200) -> tuple[bool, str]:
    """(passed, summary line) for one launch of ``example`` on ``np_`` ranks, from its log ``text``; the
    step limits are :func:`transform`'s. An MNIST run passes when it exited 0, ran every step it was given
    and its last logged loss is below its first; the benchmark when it exited 0 and printed its throughput."""
    lines = rank0_lines(text)
    head = f"horovod_examples: {example} {launcher} -np {np_}:"
    if rc != 0:
        tail = [ln for ln in (lines or text.splitlines()) if ln.strip()][-3:]
        return False, f"{head} FAILED, exit {rc}; rank 0's last lines: {' | '.join(tail)}"
    if example == SYNTHETIC:
        return _synthetic(head, lines)
    if example == KERAS_MNIST:
        logged = keras_epoch_lines(lines)
        want = [(steps_per_epoch // np_, steps_per_epoch // np_)] * epochs
        ran = [(done, total) for done, total, _ in logged]
        unit = f"{epochs} epochs x {steps_per_epoch // np_} steps = {epochs * (steps_per_epoch // np_)} steps"
        what = "epoch-mean loss"
    else:
        logged = re.findall(rf"^Step #(\d+)\tLoss: ({_NUMBER})$", "\n".join(lines), re.M)
        want = list(range(0, steps // np_, LOG_EVERY))
        ran = [int(s) for s, _ in logged]
        unit = f"{steps // np_} steps"
        what = f"loss of steps {', '.join(map(str, want))}"
    losses = [float(v[-1]) for v in logged]
    if ran != want or len(losses) < 2:
        return False, f"{head} FAILED: rank 0 logged {ran}, expected {want} ({unit}; 2 losses at least)"
    ok = losses[-1] < losses[0]
    return ok, (f"{head} {'OK' if ok else 'FAILED'}, {unit}, {what}: {losses[0]:.4f} -> {losses[-1]:.4f}"
                + ("" if ok else " (the last loss is not below the first)"))


# -------------------------------------------------------------------------------------------------- cli
def _step_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=3, help="tensorflow2_keras_mnist.py epochs (Horovod: 24)")
    p.add_argument("--steps-per-epoch", type=int, default=40,
                   help="tensorflow2_keras_mnist.py global steps per epoch, divided by size (Horovod: 500)")
    p.add_argument("--steps", type=int, default=200,
                   help="tensorflow2_mnist.py global steps, divided by size (Horovod: 10000)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.horovod_examples", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare", help="write the edited examples")
    a.add_argument("checkout")
    a.add_argument("out_dir")
    _step_options(a)
    d = sub.add_parser("data", help="write Fashion-MNIST as KERAS_HOME/datasets/mnist-%%d.npz")
    d.add_argument("keras_home")
    d.add_argument("--ranks", type=int, required=True)
    d.add_argument("--data-dir", default=FASHION_MNIST_DIR)
    c = sub.add_parser("check", help="summary line of one launch; exit 1 when it failed")
    c.add_argument("example", choices=EXAMPLES)
    c.add_argument("launcher")
    c.add_argument("log")
    c.add_argument("--np", type=int, required=True)
    c.add_argument("--rc", type=int, default=0, help="the launch's exit status")
    _step_options(c)
    args = p.parse_args(argv)
    limits = {k: getattr(args, k) for k in ("epochs", "steps_per_epoch", "steps") if hasattr(args, k)}
    try:
        if args.cmd == "prepare":
            for path in prepare(args.checkout, args.out_dir, **limits):
                print(path)
        elif args.cmd == "data":
            for path in write_mnist_npz(os.path.join(args.keras_home, "datasets"), args.ranks, args.data_dir):
                print(path)
        else:
            with open(args.log, errors="replace", newline="") as f:      # keep Keras' \r
                ok, line = check_log(args.example, args.launcher, f.read(), args.np, args.rc, **limits)
            print(line)
            return 0 if ok else 1
    except (OSError, ValueError) as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
