"""Horovod 0.28.1's own TensorFlow test files, made to run on this stack (TensorFlow 2.18, Keras 3).

``mpi_scripts/horovod_suite.sh`` runs ``test/parallel/test_tensorflow2_keras.py`` (the Keras layer,
``SUITE=test_tensorflow2_keras.py``) and ``test/parallel/test_tensorflow.py`` (the TensorFlow API, the
default) after::

    python -m tools.horovod_tests FILE [--stock]

which rewrites FILE (a copy, named as in Horovod) in place: :func:`tools.horovod_examples.swap_import` (the
migration itself; not with ``--stock``, which keeps ``horovod.tensorflow[.keras]`` so that stock Horovod runs
the same file), then its changes, one function each, from source text to source text, each raising
:class:`tools.horovod_examples.ChangeError` when the lines it edits are missing (another Horovod version),
so none is skipped silently. The Keras file: the Keras 3 changes of :data:`CHANGES`; the tests listed in
:data:`KERAS2_ONLY` drive Keras 2 internals that Keras 3 does not have (not a Horovod API) and each gets a
``pytest.mark.skip`` naming why. The TensorFlow file: the tests of :data:`KNOWN_FAILURES` get
``pytest.mark.xfail(strict=True)`` with their reason. Every assertion is Horovod's own, unchanged.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from tools.horovod_examples import ChangeError, substitute, swap_import

__all__ = ["CHANGES", "KERAS2_ONLY", "KERAS_FILE", "KNOWN_FAILURES", "TF_FILE", "mark_known_failures", "learning_rate_argument", "learning_rate_attribute",
           "mse_loss_name", "drop_experimental_run_tf_function", "variable_identity", "skip_keras2_only",
           "transform", "main"]

#: Test -> why it cannot run on Keras 3 whatever the Horovod (skipped, with this reason).
KERAS2_ONLY = {
    "test_legacy_optimizer": "keras.optimizers.legacy does not exist in Keras 3",
    "test_grad_aggregation_with_inf_grad": "calls the Keras 2 optimizer method _compute_gradients",
    "test_gradient_aggregation": "subclasses the Keras 2 OptimizerV2 (_resource_apply_dense, no learning_rate) "
                                 "and calls _compute_gradients",
    "test_gradient_aggregation_with_local_vars": "subclasses the Keras 2 OptimizerV2 and calls _compute_gradients",
    "test_partial_distributed_optimizer": "tests horovod.keras (stock Horovod's standalone-Keras module, not the "
                                          "drop-in) through the Keras 2 method _compute_gradients",
}


def learning_rate_argument(src: str) -> str:
    """Keras 3 optimizers take ``learning_rate=``, not the Keras 1 alias ``lr=`` (*ValueError: Argument(s)
    not recognized: {'lr': 0.0001}*)."""
    return substitute(src, r"\((lr)=", "(learning_rate=", "learning_rate_argument")


def learning_rate_attribute(src: str) -> str:
    """Keras 3 optimizers have ``.learning_rate``, not the Keras 2 alias ``.lr`` (*AttributeError*)."""
    return substitute(src, r"\.optimizer\.lr\.numpy\(\)", ".optimizer.learning_rate.numpy()", "learning_rate_attribute")


def mse_loss_name(src: str) -> str:
    """``tf.keras.losses`` of Keras 3 has ``MSE`` (as the file's later tests use), not
    ``mean_squared_error`` (*AttributeError: module 'keras._tf_keras.keras.losses' has no attribute*)."""
    return substitute(src, r"keras\.losses\.mean_squared_error\b", "keras.losses.MSE", "mse_loss_name")


def drop_experimental_run_tf_function(src: str) -> str:
    """Keras 3's ``Model.compile`` has no ``experimental_run_tf_function`` (*TypeError: Trainer.compile() got
    an unexpected keyword argument*); its ``fit`` always calls the optimizer it is given."""
    return substitute(src, r",\s*experimental_run_tf_function=False", "", "drop_experimental_run_tf_function")


def variable_identity(src: str) -> str:
    """Keras 3 variables have no ``.ref()`` (a ``tf.Variable`` method): the file's sets of local variables
    compare them by ``id()`` instead, the same identity."""
    return substitute(src, r"\b(var)\.ref\(\)", r"id(\1)", "variable_identity")


def skip_keras2_only(src: str) -> str:
    """A ``@pytest.mark.skip(reason=...)`` line right above each :data:`KERAS2_ONLY` test's ``def``."""
    for name, why in KERAS2_ONLY.items():
        src = substitute(src, rf"^( +)(def {name}\(self)",
                         lambda m, why=why: f"{m.group(1)}@pytest.mark.skip(reason={'Keras 2 only: ' + why!r})\n"
                                            f"{m.group(1)}{m.group(2)}", f"skip_keras2_only({name})")
    return src


#: The Keras 3 changes of test_tensorflow2_keras.py, in order (the import swap is separate: ``--stock`` leaves
#: it out).
CHANGES = (learning_rate_argument, learning_rate_attribute, mse_loss_name, drop_experimental_run_tf_function,
           variable_identity, skip_keras2_only)

KERAS_FILE, TF_FILE = "test_tensorflow2_keras.py", "test_tensorflow.py"

#: test_tensorflow.py's tests that fail on this stack (TensorFlow 2.18, Keras 3) -> (why, whether stock
#: Horovod fails them too). Marked ``xfail(strict=True)``: each must still fail, so the list stays true and any
#: other failure fails the run. The last two are the documented difference (docs/guide/migrating.md).
KNOWN_FAILURES = {
    "test_horovod_allreduce_product_cpu": ("Horovod's own product all-reduce misses the test's float16 "
                                           "tolerance on TF 2.18 (stock Horovod fails it the same way)", True),
    "test_horovod_grouped_allreduce_product_cpu": ("Horovod's own grouped product all-reduce misses the test's "
                                                   "float16 tolerance on TF 2.18 (stock Horovod too)", True),
    "test_horovod_syncbn_cpu": ("Keras 3's BatchNormalization has no fused= argument (stock Horovod too)", True),
    "test_partial_distributed_gradient_tape": ("Keras 3 variables have no .ref() (stock Horovod too)", True),
    "test_horovod_allreduce_error": ("declared difference: shapes that differ across ranks in a TF1 graph raise "
                                     "tf.errors.InvalidArgumentError (the code of an error inside a py-function) "
                                     "on every rank, where Horovod raises FailedPreconditionError", False),
    "test_horovod_allreduce_type_error": ("declared difference: dtypes that differ across ranks in a TF1 graph "
                                          "raise tf.errors.InvalidArgumentError on every rank, where Horovod "
                                          "raises FailedPreconditionError", False),
}


def mark_known_failures(src: str, stock: bool = False) -> str:
    """A ``@pytest.mark.xfail(strict=True, reason=...)`` line right above each :data:`KNOWN_FAILURES` test's
    ``def`` (with ``stock``, those stock Horovod fails too)."""
    for name, (why, stock_too) in KNOWN_FAILURES.items():
        if stock and not stock_too:
            continue
        src = substitute(src, rf"^( +)(def {name}\(self)",
                         lambda m, why=why: f"{m.group(1)}@pytest.mark.xfail(strict=True, reason={why!r})\n"
                                            f"{m.group(1)}{m.group(2)}", f"mark_known_failures({name})")
    return src


def transform(src: str, stock: bool = False, name: str = KERAS_FILE) -> str:
    """``src``, the Horovod 0.28.1 test file ``name`` (:data:`KERAS_FILE` or :data:`TF_FILE`), with its changes
    (:data:`CHANGES`; :func:`mark_known_failures`) applied, and the import swapped unless ``stock``."""
    if name not in (KERAS_FILE, TF_FILE):
        raise ValueError(f"{name}: not a test file this tool rewrites; use {KERAS_FILE} or {TF_FILE}")
    changes = CHANGES if name == KERAS_FILE else (lambda text: mark_known_failures(text, stock),)
    for change in changes if stock else (swap_import, *changes):
        src = change(src)
    return src


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.horovod_tests", description=__doc__.split("\n")[0])
    p.add_argument("file", help=f"a copy of Horovod 0.28.1's test/parallel/{KERAS_FILE} or {TF_FILE} (rewritten)")
    p.add_argument("--stock", action="store_true", help="keep `import horovod.tensorflow[.keras] as hvd`")
    args = p.parse_args(argv)
    name = os.path.basename(args.file)
    if name not in (KERAS_FILE, TF_FILE):
        print(f"tools.horovod_tests: {args.file}: not a test file this tool rewrites; pass a copy named {KERAS_FILE} "
              f"or {TF_FILE}", file=sys.stderr)
        return 2
    try:
        with open(args.file) as f:
            src = f.read()
        out = transform(src, stock=args.stock, name=name)
    except OSError as exc:
        print(f"tools.horovod_tests: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ChangeError as exc:
        print(f"tools.horovod_tests: {args.file}: the change {exc.change} found none of the lines it "
              f"edits: pass an unmodified copy of Horovod v0.28.1's test/parallel/{name} (a file "
              "this tool rewrote already cannot be rewritten again)", file=sys.stderr)
        return 2
    with open(args.file, "w") as f:
        f.write(out)
    done = (f"+ {len(CHANGES)} Keras 3 changes; {len(KERAS2_ONLY)} Keras 2-only tests skipped" if name == KERAS_FILE
            else f"+ {sum(args.stock <= stock_too for _, stock_too in KNOWN_FAILURES.values())} known failures "
                 "marked xfail(strict)")
    print(re.search(r"^import horovod\.?\S* as hvd$|^import horovod_torus\S* as hvd$", out, re.M).group(0), done,
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
