"""A cluster in a box: emulated nodes (network namespaces, each with its own hostname), NICs (veth) and
switches (Linux bridges) on one machine, with ``htb`` bandwidth shaping per NIC in both directions.

Modules: :mod:`~horovod_torus.cluster.layout` (names, addresses, commands; pure),
:mod:`~horovod_torus.cluster.scripts` (agent, ssh shim, per-rank NIC binding; pure),
:mod:`~horovod_torus.cluster.launch` (mpirun / horovodrun command lines; pure),
:mod:`~horovod_torus.cluster.net` (up, down, launch; root), ``python -m horovod_torus.cluster`` (CLI),
``python -m horovod_torus.cluster.bench`` (the all-reduce sweep on emulated clusters, with predictions).
"""
from horovod_torus.cluster.layout import WIRINGS, ClusterSpec, parse_rate

__all__ = ["WIRINGS", "ClusterSpec", "parse_rate"]
