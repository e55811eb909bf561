"""The elastic torus on an emulated cluster: node1 lost mid-epoch and added back (root).

Two emulated nodes of 2 ranks each (network namespaces, one NIC per node, unshaped; ``tools.cluster``),
4 ranks on a 2x2 grid, ``horovodrun --gloo`` elastic, launched inside node0. The scenario and its
assertions are ``tests/elastic_scenario.py``'s, the same as the one-host test's
(``tests/parallel/test_elastic.py``): the lost node's two ranks are SIGKILLed and it leaves the discovery
script, the job goes on on 2 ranks (2x1), the node comes back and the job grows to 4 ranks (2x2); identical
variables after every reset, iterations = committed steps, surviving PIDs kept, top-1 within 0.02 of the
uninterrupted run on the same cluster.

Run by ``tests/cluster/run.sh`` (``make test``); needs root (skipped otherwise):
``.venv/bin/python -m pytest -q tests/cluster/test_elastic_cluster.py``.
"""
import os

import pytest

import elastic_scenario as scenario

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (network namespaces)")
_results = {}


@pytest.fixture(scope="module")
def site():
    from tools.cluster import net
    from tools.cluster.layout import ClusterSpec

    spec = ClusterSpec(nodes=2, ranks_per_node=2, wiring="node", rate_mbit=None,
                       name=os.environ.get("CLUSTER_ELASTIC_NAME", "htelt"), subnet="10.215.0.0/16")
    net.down(spec.name)   # a leftover of an interrupted run
    with net.cluster(spec) as files:
        yield scenario.ClusterSite(spec, files)


def test_uninterrupted_reference(site, tmp_path):
    _results["reference_top1"] = scenario.reference(site, tmp_path)


def test_lost_and_added_back(site, tmp_path):
    if "reference_top1" not in _results:
        pytest.skip("needs test_uninterrupted_reference first (same session)")
    scenario.lost_and_added_back(site, tmp_path, _results["reference_top1"])
