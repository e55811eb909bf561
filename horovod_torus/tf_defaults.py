"""TensorFlow defaults of this project, set in one place, before TensorFlow is imported.

TensorFlow 2.18 turns its oneDNN CPU kernels on by default only on x86 CPUs with AVX-512-VNNI-class
features (``tensorflow/core/util/util.cc``, ``IsMKLEnabled``); on other x86 CPUs (e.g. AVX2-only AMD EPYC)
ResNet-50 runs several times slower without them (figures in ``docs/notes/onednn.md``). TensorFlow reads
``TF_ENABLE_ONEDNN_OPTS`` once, when it loads, so the default must be set before ``import tensorflow``:
:func:`apply` (called when ``horovod_torus`` is imported) sets ``TF_ENABLE_ONEDNN_OPTS=1`` on x86 CPUs
unless the variable is already set (a user's explicit value, ``0`` included, wins) or TensorFlow is
already loaded (then nothing changes it: :func:`onednn_enabled` and :func:`warn_if_onednn_off` tell).

:func:`skip_autograph` (called when ``horovod_torus.tensorflow`` is imported) keeps AutoGraph from
rewriting this package's functions when a user's ``tf.function`` (or Keras' train step) calls them, as
TensorFlow and Keras keep it from rewriting theirs.
"""
from __future__ import annotations

import os
import platform
import sys
import warnings

__all__ = ["apply", "skip_autograph", "PACKAGE", "quiet_logs", "onednn_enabled", "warn_if_onednn_off", "ONEDNN_VAR",
           "X86"]

ONEDNN_VAR = "TF_ENABLE_ONEDNN_OPTS"

#: ``platform.machine()`` values of the CPUs TensorFlow's oneDNN kernels are built for.
X86 = ("x86_64", "AMD64", "i386", "i686")


def apply(environ=None, machine: str | None = None, modules=None) -> bool:
    """Set ``TF_ENABLE_ONEDNN_OPTS=1`` when it is unset, the CPU is x86 and TensorFlow is not loaded yet.

    Args:
        environ: the environment to change (``os.environ``).
        machine: ``platform.machine()`` by default.
        modules: ``sys.modules`` by default (to tell whether TensorFlow is loaded).

    Returns:
        True when this call set the variable.
    """
    environ = os.environ if environ is None else environ
    machine = platform.machine() if machine is None else machine
    modules = sys.modules if modules is None else modules
    if ONEDNN_VAR in environ or machine not in X86 or "tensorflow" in modules:
        return False
    environ[ONEDNN_VAR] = "1"
    return True


#: The package whose functions AutoGraph leaves as they are (:func:`skip_autograph`).
PACKAGE = "horovod_torus"


def skip_autograph() -> bool:
    """Add ``DoNotConvert("horovod_torus")`` to AutoGraph's conversion rules (once), the rule TensorFlow
    2.18 applies to ``tensorflow``, ``keras`` and ``numpy`` (``tensorflow/python/autograph/core/config.py``,
    ``CONVERSION_RULES``; read by ``conversion.is_allowlisted``).

    Why: the package's code branches only on Python values (shapes, dtypes, settings), never on tensors,
    so AutoGraph's rewrite changes nothing in the graph, but it re-parsed about 100 of its functions the
    first time a ``tf.function`` called a torus all-reduce: about 10 s of tracing per process on a 2-core
    Intel Xeon (4 ranks under mpirun; 0.2 s once the rule is in, see docs/notes/performance_work.md).

    Returns:
        True when the rule is in place (False: this TensorFlow has no such table; nothing changed).
    """
    try:
        from tensorflow.python.autograph.core import config
    except ImportError:
        return False
    rules = getattr(config, "CONVERSION_RULES", None)
    if rules is None:
        return False
    if not any(isinstance(r, config.DoNotConvert) and r.matches(PACKAGE) for r in rules):
        config.CONVERSION_RULES = (config.DoNotConvert(PACKAGE),) + tuple(rules)
    return True


def quiet_logs(environ=None) -> None:
    """``TF_CPP_MIN_LOG_LEVEL=2`` unless set (the command-line tools' output: no TensorFlow info lines)."""
    environ = os.environ if environ is None else environ
    environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def onednn_enabled() -> bool | None:
    """Whether the loaded TensorFlow runs its oneDNN kernels (None: TensorFlow not loaded, or no answer)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def warn_if_onednn_off(machine: str | None = None) -> str | None:
    """Warn (``RuntimeWarning``) when TensorFlow was loaded with oneDNN off on an x86 CPU; returns the
    message, or None when there is nothing to say."""
    machine = platform.machine() if machine is None else machine
    if machine not in X86 or onednn_enabled() is not False:
        return None
    set_to = os.environ.get(ONEDNN_VAR)
    why = (f"{ONEDNN_VAR}={set_to!r} was set" if set_to is not None else
           "TensorFlow was imported before horovod_torus on a CPU where it keeps oneDNN off by default")
    message = (f"TensorFlow's oneDNN CPU kernels are off ({why}); ResNet-50 runs several times slower on "
               f"such CPUs: import horovod_torus before tensorflow, or export {ONEDNN_VAR}=1 before "
               f"starting Python")
    if set_to != "0":  # an explicit 0 is the user's choice: report it, do not nag
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return message
