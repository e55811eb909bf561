"""``broadcast_variables`` that accepts Keras 3 variables as well as ``tf.Variable``.

Keras 3 variables are not ``tf.Variable`` (``keras.Variable`` wraps one in ``.value``), so Horovod
0.28.1's ``broadcast_variables(model.variables, 0)`` fails (inside its ``tf.function`` a Keras variable
becomes a tensor: ``'SymbolicTensor' object has no attribute 'assign'``). Here each Keras variable is
replaced by the ``tf.Variable`` it holds, and Horovod's own broadcast does the rest.
"""
from __future__ import annotations

import horovod.tensorflow as _hvd
import keras
import tensorflow as tf

__all__ = ["broadcast_variables", "as_tf_variables"]


def as_tf_variables(variables) -> list:
    """The ``tf.Variable`` behind each entry (Keras 3 variables unwrapped, tf.Variables kept).

    Raises:
        TypeError: an entry that is neither (the message names its position and type).
    """
    out = []
    for i, v in enumerate(variables):
        if isinstance(v, keras.Variable):
            v = v.value
        if not isinstance(v, tf.Variable):
            raise TypeError(f"variables[{i}] = {v!r} ({type(v).__name__}) is not a tf.Variable or a "
                            f"keras.Variable; broadcast tensors with hvd.broadcast(tensor, root_rank)")
        out.append(v)
    return out


def broadcast_variables(variables, root_rank, process_set=_hvd.global_process_set, inplace=False):
    """Assign rank ``root_rank``'s values to ``variables`` on every rank (Horovod's signature).

    Args:
        variables: ``tf.Variable`` and/or Keras 3 variables (e.g. ``model.variables +
            optimizer.variables``), in the same order on every rank.
        root_rank: the rank whose values are sent, 0 <= root_rank < size.
        process_set, inplace: as in ``horovod.tensorflow.broadcast_variables``.

    Raises:
        ValueError: root_rank out of range. TypeError: an entry that is not a variable.
    """
    if not isinstance(root_rank, int) or not 0 <= root_rank < process_set.size():
        raise ValueError(f"root_rank={root_rank!r} must be an int in [0, {process_set.size()})")
    tf_vars = as_tf_variables(variables)
    if not tf_vars:
        return None
    return _hvd.broadcast_variables(tf_vars, root_rank, process_set=process_set, inplace=inplace)
