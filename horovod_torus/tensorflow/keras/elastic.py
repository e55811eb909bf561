"""``horovod_torus.tensorflow.keras.elastic``: the elastic torus for Keras 3 scripts (the same objects as
:mod:`horovod_torus.tensorflow.elastic`: ``run``, ``KerasState``, ``CommitEvery``, ``reset``), and the
callbacks of ``horovod.tensorflow.keras.elastic`` (Horovod's own classes: they only call ``state.commit()``
and set ``state.batch`` / ``state.epoch``, which :class:`KerasState` keeps): ``CommitStateCallback(state,
batches_per_commit=1)``, ``UpdateBatchStateCallback(state)``, ``UpdateEpochStateCallback(state)``."""
from horovod.tensorflow.keras.elastic import (  # noqa: F401
    CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback,
)

from horovod_torus.tensorflow.elastic import (  # noqa: F401
    RANK_LOST_MARKERS, CommitEvery, KerasState, check_elastic_launch, is_rank_lost, last_world_change, reset, run,
)
