"""Every command-line tool answers --version, the console scripts of setup.py point at real functions, and
the app's --help lists the allowed values of its named options."""
import ast
import importlib
import os
import subprocess
import sys

import pytest

from horovod_torus import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIS = ["keras_app.train", "keras_app.data", "keras_app.expect", "horovod_torus.plan", "horovod_torus.doctor",
        "horovod_torus.bench", "horovod_torus.bench.train", "horovod_torus.bench.report", "horovod_torus.launchers",
        "horovod_torus.bench.targets", "horovod_torus.calibrate"]


@pytest.mark.parametrize("module", CLIS)
def test_version(module):
    out = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0 and out.stdout.strip() == f"python -m {module} {__version__}", out.stderr


def _setup_kwargs():
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return {k.arg: k.value for k in call.keywords}


def test_console_scripts_and_extras():
    kw = _setup_kwargs()
    scripts = dict(s.split("=") for s in ast.literal_eval(kw["entry_points"])["console_scripts"])
    assert {"horovod-torus-train", "horovod-torus-bench", "horovod-torus-plan", "horovod-torus-doctor"} <= set(scripts)
    assert scripts["horovod-torus-train"] == "keras_app.train:main"
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func))
    extras = ast.literal_eval(kw["extras_require"])
    assert "tensorflow-datasets==4.9.7" in extras["app"] and any(e.startswith("matplotlib") for e in extras["app"])
    assert ast.literal_eval(kw["license"]) == "Apache-2.0"
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    notice = open(os.path.join(ROOT, "NOTICE")).read()
    assert "examples/keras_fashion_mnist.py" in notice and "Uber Technologies" in notice
    assert "Licensed under the Apache License" in open(os.path.join(ROOT, "examples", "keras_fashion_mnist.py")).read()


def test_tools_are_not_installed():
    from setuptools import find_packages

    include = ast.literal_eval(_setup_kwargs()["packages"].keywords[0].value)
    installed = find_packages(ROOT, include=include)
    assert "horovod_torus.bench" in installed and "keras_app.callbacks" in installed
    assert not [p for p in installed if p.split(".")[0] == "tools"]


def test_app_help_lists_allowed_values():
    from keras_app.config import CHOICES, build_parser
    text = build_parser().format_help()
    for (_, name), allowed in CHOICES.items():
        assert "{" + ",".join(map(str, allowed)) + "}" in text, name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--optimizer", "rmsprop"])
    assert build_parser().parse_args(["--strategy", "mine"])  # any registered name: checked by validate()
