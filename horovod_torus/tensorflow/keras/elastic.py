"""``horovod_torus.tensorflow.keras.elastic``: the elastic torus for Keras 3 scripts (the same objects as
:mod:`horovod_torus.tensorflow.elastic`: ``run``, ``KerasState``, ``CommitEvery``, ``reset``)."""
from horovod_torus.tensorflow.elastic import (  # noqa: F401
    RANK_LOST_MARKERS, CommitEvery, KerasState, check_elastic_launch, is_rank_lost, last_world_change, reset, run,
)
