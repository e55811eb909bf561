"""A cluster in a box: emulated nodes (network namespaces, each with its own hostname), NICs (veth) and
switches (Linux bridges) on one machine, with ``htb`` bandwidth shaping per NIC in both directions.

Modules: :mod:`~tools.cluster.layout` (names, addresses, commands; pure),
:mod:`~tools.cluster.scripts` (agent, ssh shim, per-rank NIC binding; pure),
:mod:`~tools.cluster.launch` (mpirun / horovodrun command lines; pure),
:mod:`~tools.cluster.net` (up, down, launch; root), ``python -m tools.cluster`` (CLI),
``python -m tools.cluster.bench`` (the all-reduce sweep on emulated clusters, with predictions),
:mod:`~tools.cluster.results` (that sweep's launches, rows, predictions and tables; pure).
"""
from tools.cluster.layout import WIRINGS, ClusterSpec, parse_rate

__all__ = ["WIRINGS", "ClusterSpec", "parse_rate"]
