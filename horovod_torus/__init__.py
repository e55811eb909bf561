"""horovod-torus: 2D-Torus all-reduce for Horovod (Mikami et al., arXiv 1811.05233).

Subpackages: ``horovod_torus.tensorflow`` (drop-in for ``horovod.tensorflow``), ``horovod_torus.mpi``
(mpi4py/numpy path), ``horovod_torus.topology`` (the grid), ``horovod_torus.costmodel`` (alpha-beta model).
"""
from horovod_torus import tf_defaults as _tf_defaults

__version__ = "0.1.0"

# TensorFlow's oneDNN kernels on x86 unless the user chose (see tf_defaults). _SET_AT_IMPORT: what this
# import set in this process, not inherited (horovod_torus.launchers' command line forwards neither)
_SET_AT_IMPORT = (_tf_defaults.ONEDNN_VAR,) if _tf_defaults.apply() else ()
