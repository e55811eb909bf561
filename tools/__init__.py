"""Research tooling of horovod-torus, run from the repository root and not installed with the package.

- :mod:`tools.cluster`: the network-namespace cluster emulator (``python -m tools.cluster``, root) and its
  all-reduce sweep (``python -m tools.cluster.bench``, ``make cluster-bench``);
- :mod:`tools.probes`: one-off measurement scripts for the emulated cluster (docs/cluster_probes.md);
- :mod:`tools.ablation`: the batch-size control / label smoothing ablation (``make ablation``);
- :mod:`tools.scaling`: training throughput and scaling efficiency over rank counts;
- :mod:`tools.horovod_examples`: Horovod 0.28.1's own TF2 examples on Keras 3, their edits, offline data and
  loss check (``mpi_scripts/horovod_examples.sh``).

A training job imports none of this: the library is ``horovod_torus`` and ``keras_app``.
"""
