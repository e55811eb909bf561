"""tf_defaults: oneDNN on by default on x86 before TensorFlow loads; a user's value wins; the state is read
back from the loaded TensorFlow."""
import subprocess
import sys

import pytest

from horovod_torus import tf_defaults


@pytest.mark.parametrize("environ, machine, modules, set_it", [
    ({}, "x86_64", {}, True),
    ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "x86_64", {}, False),     # the user's explicit value wins
    ({"TF_ENABLE_ONEDNN_OPTS": "1"}, "x86_64", {}, False),
    ({}, "aarch64", {}, False),                                 # oneDNN's x86 kernels only
    ({}, "x86_64", {"tensorflow": object()}, False),            # too late: TensorFlow read it already
])
def test_apply(environ, machine, modules, set_it):
    before = dict(environ)
    assert tf_defaults.apply(environ, machine, modules) is set_it
    assert environ == ({**before, "TF_ENABLE_ONEDNN_OPTS": "1"} if set_it else before)


def _child(code, **env):
    import os

    full = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    full.update(env, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="always")
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)


def test_importing_horovod_torus_first_turns_onednn_on_in_tensorflow():
    out = _child("import horovod_torus, tensorflow; from horovod_torus import tf_defaults as d; "
                 "print(d.onednn_enabled(), d.warn_if_onednn_off())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "None"]


def test_tensorflow_loaded_with_onednn_off_is_reported():
    out = _child("import tensorflow, horovod_torus; from horovod_torus import tf_defaults as d; "
                 "print(d.onednn_enabled()); print(d.warn_if_onednn_off())", TF_ENABLE_ONEDNN_OPTS="0")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "False"
    assert "TF_ENABLE_ONEDNN_OPTS='0' was set" in lines[1]
    assert "RuntimeWarning" not in out.stderr   # an explicit 0 is reported, not warned about


def test_autograph_leaves_the_package_as_written_and_other_code_converted(tmp_path):
    """Importing horovod_torus.tensorflow adds AutoGraph's DoNotConvert rule for the package once: its
    functions are called unconverted inside tf.function (their graph is the same), a user's are still
    converted (a Python ``if`` on a tensor becomes a tf.cond)."""
    code = """
import horovod_torus.tensorflow as hvd, tensorflow as tf
from tensorflow.python.autograph.core import config
from tensorflow.python.autograph.impl import conversion
from horovod_torus import tf_defaults
from horovod_torus.tensorflow.torus import TorusAllreduce, check_tensors
assert tf_defaults.skip_autograph() and tf_defaults.skip_autograph()
print(sum(isinstance(r, config.DoNotConvert) and r.matches("horovod_torus") for r in config.CONVERSION_RULES))
print(conversion.is_allowlisted(TorusAllreduce.__call__), conversion.is_allowlisted(check_tensors))
def users(x):
    if x > 0:
        return x
    return -x
print(conversion.is_allowlisted(users), tf.function(users)(tf.constant(-3.0)).numpy())
print(tf.function(lambda: check_tensors([[1.0, 2.0]])[0])().numpy().tolist())
"""
    script = tmp_path / "user.py"  # AutoGraph converts code whose source it can read
    script.write_text(code)
    out = _child(f"import runpy; runpy.run_path({str(script)!r})")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "True", "True", "False", "3.0", "[1.0,", "2.0]"], out.stdout
