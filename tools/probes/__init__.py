"""One-off measurement scripts for the emulated cluster (not tests): each is run on every rank of a
``python -m tools.cluster run`` launch, from the repository root (docs/cluster_probes.md).

- ``nic_bytes.py``: bytes each NIC sends per all-reduce, flat ``MPI_Allreduce`` against the torus;
- ``gloo_reducescatter_race.py``: reproduces the wrong sums of Horovod's Gloo reduce-scatter (README);
- ``probe_pairs.py``, ``pair_loop.py``, ``duplex.py``: pairwise exchanges and raw TCP on one rail;
- ``probe_phases.py``: the torus' phases on the mpi4py transport; ``probe_gloo.py``: Horovod's ops on the
  torus process sets.
"""
