"""Horovod 0.28.1's own Keras test file, ``test/parallel/test_tensorflow2_keras.py``, made valid Keras 3.

``mpi_scripts/horovod_suite.sh`` runs it with ``SUITE=test_tensorflow2_keras.py``, after::

    python -m tools.horovod_tests FILE [--stock]

which rewrites FILE (a copy) in place: :func:`tools.horovod_examples.swap_import` (the migration itself; not with ``--stock``,
which keeps ``horovod.tensorflow.keras`` so that stock Horovod runs the same Keras 3 file), then every
change of :data:`CHANGES`, one function each, from source text to source text, each raising
:class:`tools.horovod_examples.ChangeError` when the lines it edits are missing (another Horovod version),
so none is skipped silently. The tests listed in :data:`KERAS2_ONLY` drive Keras 2 internals that Keras 3
does not have (not a Horovod API); each gets a ``pytest.mark.skip`` naming why, so the run's counts show
them. Every assertion of the other tests is Horovod's own, unchanged.
"""
from __future__ import annotations

import argparse
import re
import sys

from tools.horovod_examples import ChangeError, substitute, swap_import

__all__ = ["CHANGES", "KERAS2_ONLY", "learning_rate_argument", "learning_rate_attribute",
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


#: The Keras 3 changes, in order (the import swap is separate: ``--stock`` leaves it out).
CHANGES = (learning_rate_argument, learning_rate_attribute, mse_loss_name, drop_experimental_run_tf_function,
           variable_identity, skip_keras2_only)


def transform(src: str, stock: bool = False) -> str:
    """``src`` with :data:`CHANGES` applied, and the import swapped unless ``stock``."""
    for change in CHANGES if stock else (swap_import, *CHANGES):
        src = change(src)
    return src


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.horovod_tests", description=__doc__.split("\n")[0])
    p.add_argument("file", help="a copy of Horovod 0.28.1's test/parallel/test_tensorflow2_keras.py (rewritten)")
    p.add_argument("--stock", action="store_true", help="keep `import horovod.tensorflow.keras as hvd`")
    args = p.parse_args(argv)
    try:
        with open(args.file) as f:
            src = f.read()
        out = transform(src, stock=args.stock)
    except OSError as exc:
        print(f"tools.horovod_tests: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except ChangeError as exc:
        print(f"tools.horovod_tests: {args.file}: the change {exc.change} found none of the lines it "
              "edits: pass an unmodified copy of Horovod v0.28.1's test/parallel/test_tensorflow2_keras.py (a file "
              "this tool rewrote already cannot be rewritten again)", file=sys.stderr)
        return 2
    with open(args.file, "w") as f:
        f.write(out)
    print(re.search(r"^import horovod\.?\S* as hvd$|^import horovod_torus\S* as hvd$", out, re.M).group(0),
          f"+ {len(CHANGES)} Keras 3 changes; {len(KERAS2_ONLY)} Keras 2-only tests skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
