"""One GPU per rank, Horovod's convention: the rank with local rank ``i`` sees only GPU ``i`` of its node,
with memory growth on, so that ranks of a node never share (or pre-allocate all of) a GPU.

Call :func:`pin_gpu` right after ``hvd.init()`` and before the first TensorFlow op (which initialises the
GPUs): the app (``keras_app.train``) and both benchmarks (``horovod_torus.bench``,
``horovod_torus.bench.train``) do. :func:`select_gpu` is the pure rule, testable without GPUs::

    >>> select_gpu(["GPU:0", "GPU:1", "GPU:2", "GPU:3"], local_rank=2, local_size=4)
    'GPU:2'
    >>> select_gpu([], local_rank=0, local_size=4) is None     # a CPU host: nothing to pin
    True

When the launcher already isolated one GPU per rank (``CUDA_VISIBLE_DEVICES`` holding one device, e.g.
Slurm's ``--gpus-per-task=1`` or a wrapper script), every rank sees exactly that GPU and uses it.
"""
from __future__ import annotations

import os
from typing import Sequence, TypeVar

__all__ = ["select_gpu", "pin_gpu", "launcher_pinned"]

D = TypeVar("D")


def launcher_pinned(gpus: Sequence, environ=None) -> bool:
    """True when the launcher gave this process one GPU of its own: ``CUDA_VISIBLE_DEVICES`` names exactly
    one device and TensorFlow sees exactly one GPU."""
    environ = os.environ if environ is None else environ
    visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return len(visible) == 1 and len(gpus) == 1


def select_gpu(gpus: Sequence[D], local_rank: int, local_size: int, *, pinned: bool = False) -> D | None:
    """The GPU this rank uses: ``gpus[local_rank]`` (Horovod's convention), or None when there is none.

    Args:
        gpus: the GPUs this process sees, in device order (``tf.config.list_physical_devices("GPU")``;
            any objects in the tests).
        local_rank: this rank's index among the ranks of its node, 0 <= local_rank < local_size.
        local_size: ranks on this node.
        pinned: the launcher already gave each rank its own single GPU (:func:`launcher_pinned`): use
            ``gpus[0]`` whatever the local rank.

    Returns:
        One element of ``gpus``, or None when ``gpus`` is empty (a CPU host: nothing to pin).

    Raises:
        ValueError: local_rank outside [0, local_size).
        RuntimeError: more ranks on the node (local_size) than GPUs: two ranks would share a GPU. The
            message names both counts and the fix (fewer ranks per node, ``NPERNODE``/``-npernode``).
    """
    if not 0 <= local_rank < local_size:
        raise ValueError(f"local rank {local_rank} is not in [0, local size {local_size})")
    if not gpus:
        return None
    if pinned and len(gpus) == 1:
        return gpus[0]
    if local_size > len(gpus):
        raise RuntimeError(
            f"{local_size} ranks on this node but only {len(gpus)} GPU(s) visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): one rank per GPU "
            f"needs at most {len(gpus)} ranks per node; launch with {len(gpus)} ranks per node "
            f"(mpirun --map-by ppr:{len(gpus)}:node, NPERNODE={len(gpus)}) or give each rank its own GPU "
            f"through CUDA_VISIBLE_DEVICES")
    return gpus[local_rank]


def pin_gpu(local_rank: int | None = None, local_size: int | None = None) -> str | None:
    """Make only this rank's GPU visible to TensorFlow, with memory growth; call after ``hvd.init()`` and
    before the first TensorFlow op.

    Args:
        local_rank, local_size: default ``horovod.tensorflow.local_rank()`` / ``local_size()``.

    Returns:
        The pinned GPU's name (``"/physical_device:GPU:2"``), or None on a host without GPUs.

    Raises:
        RuntimeError: more ranks per node than GPUs (see :func:`select_gpu`), or TensorFlow already
            initialised its GPUs with another visible set (the message says to call this earlier).
    """
    import tensorflow as tf

    if local_rank is None or local_size is None:
        import horovod.tensorflow as _hvd

        local_rank, local_size = _hvd.local_rank(), _hvd.local_size()
    gpus = tf.config.list_physical_devices("GPU")
    gpu = select_gpu(gpus, local_rank, local_size, pinned=launcher_pinned(gpus))
    if gpu is None:
        return None
    try:
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
        tf.config.set_visible_devices(gpu, "GPU")
    except RuntimeError as err:   # "Visible devices cannot be modified after being initialized"
        if tf.config.get_visible_devices("GPU") != [gpu]:
            raise RuntimeError(
                f"local rank {local_rank}: TensorFlow already initialised its GPUs "
                f"({tf.config.get_visible_devices('GPU')}) before horovod_torus.devices.pin_gpu could select "
                f"{gpu.name}: call pin_gpu() right after hvd.init(), before any TensorFlow op ({err})") from err
    return gpu.name
