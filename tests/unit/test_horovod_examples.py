"""tools.horovod_examples: the edits to Horovod 0.28.1's TF2 examples (on snippets written like their lines:
no Horovod checkout needed), the Fashion-MNIST npz writer (on Debian's files, when installed), the log check."""
import ast
import os
import subprocess

import numpy as np
import pytest

from tools import horovod_examples as hx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FASHION = hx.FASHION_MNIST_DIR
needs_fashion = pytest.mark.skipif(not os.path.exists(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")),
                                   reason="Debian's dataset-fashion-mnist is not installed")

HEADER = """import sys

import tensorflow as tf

import horovod
import horovod.tensorflow{keras} as hvd


def main():
    hvd.init()
    (mnist_images, mnist_labels), _ = \\
        tf.keras.datasets.mnist.load_data(path='mnist-%d.npz' % hvd.rank())
"""
KERAS_MNIST = HEADER.format(keras=".keras") + """
    scaled_lr = 0.001 * hvd.size()
    opt = hvd.DistributedOptimizer(tf.optimizers.Adam(scaled_lr))
    # Horovod: Specify `experimental_run_tf_function=False` to ensure TensorFlow
    # uses hvd.DistributedOptimizer() to compute gradients.
    mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                        optimizer=opt,
                        metrics=['accuracy'],
                        experimental_run_tf_function=False)
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint('./checkpoint-{epoch}.h5'))
    mnist_model.fit(dataset, steps_per_epoch=500 // hvd.size(), callbacks=callbacks, epochs=24, verbose=verbose)
"""
TAPE_MNIST = HEADER.format(keras="") + """
    opt = tf.optimizers.Adam(0.001 * hvd.size())

    @tf.function
    def training_step(images, labels, first_batch):
        if first_batch:
            hvd.broadcast_variables(mnist_model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables(), root_rank=0)

    for batch, (images, labels) in enumerate(dataset.take(10000 // hvd.size())):
        loss_value = training_step(images, labels, batch == 0)
"""
SYNTHETIC = """import tensorflow as tf
import horovod.tensorflow as hvd
from tensorflow.keras import applications

opt = tf.optimizers.SGD(0.01)
if first_batch:
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables(), root_rank=0)
"""
SNIPPETS = {hx.KERAS_MNIST: KERAS_MNIST, hx.TAPE_MNIST: TAPE_MNIST, hx.SYNTHETIC: SYNTHETIC}


def test_swap_import_changes_only_the_hvd_import():
    for keras in ("", ".keras"):
        out = hx.swap_import(HEADER.format(keras=keras))
        assert f"import horovod_torus.tensorflow{keras} as hvd\n" in out
        assert "\nimport horovod\n" in out and "import horovod.tensorflow" not in out


def test_optimizer_variables_become_the_keras3_property():
    out = hx.optimizer_variables_property(TAPE_MNIST)
    assert "hvd.broadcast_variables(opt.variables, root_rank=0)" in out and "variables()" not in out
    assert "mnist_model.variables, root_rank=0" in out


def test_compile_loses_experimental_run_tf_function_and_its_comment():
    out = hx.drop_experimental_run_tf_function(KERAS_MNIST)
    assert "experimental_run_tf_function" not in out.replace("# Keras 3: compile() has no "
                                                             "experimental_run_tf_function", "")
    assert "metrics=['accuracy'])\n" in out and "# Keras 3: compile()" in out
    ast.parse(out)


def test_the_learning_rate_scaling_and_tf_keras_stay():
    out = hx.transform(hx.KERAS_MNIST, KERAS_MNIST)
    assert "scaled_lr = 0.001 * hvd.size()" in out and "(tf.optimizers.Adam(scaled_lr))" in out
    assert "tf.keras.callbacks.ModelCheckpoint('./checkpoint-{epoch}.h5')" in out   # Keras 3.15 accepts .h5
    assert "tf.optimizers.Adam(0.001 * hvd.size())" in hx.transform(hx.TAPE_MNIST, TAPE_MNIST)


def test_step_limits():
    out = hx.transform(hx.KERAS_MNIST, KERAS_MNIST, epochs=2, steps_per_epoch=8)
    assert "steps_per_epoch=8 // hvd.size(), callbacks=callbacks, epochs=2, verbose=verbose)" in out
    out = hx.transform(hx.TAPE_MNIST, TAPE_MNIST, steps=120)
    assert "enumerate(dataset.take(120 // hvd.size()))" in out


def test_offline_loader_reads_the_npz_that_load_data_would(tmp_path, monkeypatch):
    out = hx.offline_mnist_npz(KERAS_MNIST)
    assert "load_mnist_npz(path='mnist-%d.npz' % hvd.rank())" in out and "tf.keras.datasets" not in out
    assert "\n\n\ndef load_mnist_npz(path):" in out and "\n\n\ndef main():" in out
    (tmp_path / "datasets").mkdir()
    arrays = {"x_train": np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28),
              "y_train": np.array([3, 9], np.uint8),
              "x_test": np.zeros((1, 28, 28), np.uint8), "y_test": np.array([1], np.uint8)}
    np.savez(tmp_path / "datasets" / "mnist-1.npz", **arrays)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    namespace = {}
    tree = ast.parse(out)
    loader = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_mnist_npz")
    exec(compile(ast.Module([loader], []), "example", "exec"), namespace)
    (x, y), (xt, yt) = namespace["load_mnist_npz"](path="mnist-1.npz")
    for got, key in ((x, "x_train"), (y, "y_train"), (xt, "x_test"), (yt, "y_test")):
        np.testing.assert_array_equal(got, arrays[key])


@pytest.mark.parametrize("name", hx.EXAMPLES)
def test_every_example_transforms_to_valid_python(name):
    out = hx.transform(name, SNIPPETS[name])
    ast.parse(out)
    assert "import horovod_torus.tensorflow" in out and "opt.variables()" not in out


@pytest.mark.parametrize("change", [hx.swap_import, hx.optimizer_variables_property,
                                    hx.drop_experimental_run_tf_function, hx.offline_mnist_npz])
def test_a_change_that_finds_nothing_raises(change):
    with pytest.raises(hx.ChangeError, match=rf"{change.__name__}: .*v0\.28\.1"):
        change("print('not a Horovod example')\n")


def test_prepare_copies_the_three_examples(tmp_path):
    src = tmp_path / "horovod" / "examples" / "tensorflow2"
    src.mkdir(parents=True)
    for name, text in SNIPPETS.items():
        (src / name).write_text(text)
    paths = hx.prepare(str(tmp_path / "horovod"), str(tmp_path / "out"), epochs=1)
    assert [os.path.basename(p) for p in paths] == list(hx.EXAMPLES)
    assert "epochs=1," in (tmp_path / "out" / hx.KERAS_MNIST).read_text()
    (src / hx.SYNTHETIC).unlink()
    with pytest.raises(FileNotFoundError, match="tensorflow2_synthetic_benchmark.py not found.*v0.28.1"):
        hx.prepare(str(tmp_path / "horovod"), str(tmp_path / "out2"))


@pytest.mark.skipif(not os.environ.get("HOROVOD_CHECKOUT"),
                    reason="HOROVOD_CHECKOUT (a checkout of Horovod v0.28.1) is not set")
def test_horovods_own_examples_transform(tmp_path):
    for path in hx.prepare(os.environ["HOROVOD_CHECKOUT"], str(tmp_path)):
        ast.parse(open(path).read())


@needs_fashion
def test_npz_writer_makes_keras_mnist_files(tmp_path):
    paths = hx.write_mnist_npz(str(tmp_path / "datasets"), 3)
    assert [os.path.basename(p) for p in paths] == ["mnist-0.npz", "mnist-1.npz", "mnist-2.npz"]
    with np.load(paths[0], allow_pickle=False) as f:
        assert sorted(f.files) == ["x_test", "x_train", "y_test", "y_train"]
        shapes = {k: (f[k].shape, f[k].dtype) for k in f.files}
        assert shapes == {"x_train": ((60000, 28, 28), np.uint8), "y_train": ((60000,), np.uint8),
                          "x_test": ((10000, 28, 28), np.uint8), "y_test": ((10000,), np.uint8)}
        for k in ("y_train", "y_test"):
            assert set(np.unique(f[k])) == set(range(10))
        assert f["x_train"].max() == 255 and f["x_train"].min() == 0
    assert all(open(p, "rb").read() == open(paths[0], "rb").read() for p in paths[1:])
    with pytest.raises(ValueError, match="ranks=0"):
        hx.write_mnist_npz(str(tmp_path / "d2"), 0)


# ------------------------------------------------------------------------------------------ the log check
def _mpirun(rank, *pieces):
    """Lines as mpirun --tag-output writes them: every write tagged, a print's newline a write of its own."""
    return "".join(f"[1,{rank}]<stdout>:{p}" for p in pieces)


def _bar(done, total, loss):
    return (f"\r\x1b[1m{done}/{total}\x1b[0m \x1b[32m━━\x1b[0m \x1b[1m0s\x1b[0m 90ms/step - accuracy: 0.5 "
            f"- loss: {loss}")


def test_rank0_lines_join_pieces_and_drop_other_ranks():
    log = "\n".join([
        "mpirun: a launcher line",
        _mpirun(0, "Step #0\tLoss: 2.30") + "[1,0]<stderr>:WARNING: x",    # the print's newline comes later
        _mpirun(1, "noise"),
        _mpirun(0, ""),
        "[0]<stdout>:horovodrun line",
        "[1]<stdout>:Step #0\tLoss: 9.0", ""])
    assert hx.rank0_lines(log) == ["Step #0\tLoss: 2.30", "horovodrun line"]


def test_keras_check_reads_the_epoch_mean_losses_of_the_progress_bar():
    lines = []
    for epoch, losses in enumerate([("2.3015", "1.9"), ("1.1", "0.9"), ("0.8", "7.0000e-04")], 1):
        lines.append(_mpirun(0, f"Epoch {epoch}/3") + _mpirun(0, ""))
        lines.append(_mpirun(0, _bar(1, 2, losses[0])))
        lines.append(_mpirun(0, "\x08" * 40 + _bar(2, 2, losses[1])) + _mpirun(0, ""))
    ok, line = hx.check_log(hx.KERAS_MNIST, "mpirun", "\n".join(lines) + "\n", 4, epochs=3, steps_per_epoch=8)
    assert ok, line
    assert "3 epochs x 2 steps = 6 steps, epoch-mean loss: 1.9000 -> 0.0007" in line
    ok, line = hx.check_log(hx.KERAS_MNIST, "mpirun", "\n".join(lines) + "\n", 4, epochs=4, steps_per_epoch=8)
    assert not ok and "expected" in line


def _tape_log(losses, launcher_tag="[0]<stdout>:"):
    return "".join(f"{launcher_tag}Step #{10 * i}\tLoss: {v}\n" for i, v in enumerate(losses))


def test_tape_check_needs_every_logged_step_and_a_lower_last_loss():
    ok, line = hx.check_log(hx.TAPE_MNIST, "horovodrun", _tape_log([2.3, 0.9, 0.6, 0.5, 0.45]), 4)
    assert ok and line.endswith("OK, 50 steps, loss of steps 0, 10, 20, 30, 40: 2.3000 -> 0.4500")
    ok, line = hx.check_log(hx.TAPE_MNIST, "horovodrun", _tape_log([2.3, 0.9, 0.6, 0.5, 2.4]), 4)
    assert not ok and "not below the first" in line
    ok, line = hx.check_log(hx.TAPE_MNIST, "horovodrun", _tape_log([2.3, 0.9]), 4)
    assert not ok and "expected [0, 10, 20, 30, 40]" in line
    ok, line = hx.check_log(hx.TAPE_MNIST, "horovodrun", _tape_log([2.3]) + "[0]<stderr>:Traceback\n", 4, rc=1)
    assert not ok and "exit 1" in line


def test_synthetic_check_wants_the_throughput_lines():
    out = "".join(f"[0]<stdout>:{s}\n" for s in ("Model: MobileNetV3Small", "Iter #0: 6.4 img/sec per CPU",
                                                  "Iter #1: 6.0 img/sec per CPU", "Img/sec per CPU: 6.2 +-0.4",
                                                  "Total img/sec on 4 CPU(s): 24.8 +-1.4"))
    ok, line = hx.check_log(hx.SYNTHETIC, "horovodrun", out, 4)
    assert ok and "MobileNetV3Small: 2 iterations, 6.4, 6.0 img/sec per rank, total 24.8 +-1.4" in line
    ok, line = hx.check_log(hx.SYNTHETIC, "horovodrun", out.split("Total")[0], 4)
    assert not ok


def test_script_names_a_missing_checkout(tmp_path):
    out = subprocess.run(["bash", os.path.join(ROOT, "mpi_scripts", "horovod_examples.sh"), str(tmp_path),
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "tensorflow2_keras_mnist.py not found" in out.stderr and "v0.28.1" in out.stderr
