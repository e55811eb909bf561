"""The elastic torus on one host: a node lost mid-epoch and added back, under ``horovodrun --gloo``.

Two host names of this machine (``localhost:2`` and ``127.0.0.1:2``) form 4 ranks on a 2x2 grid; the
scenario and what it asserts are in ``tests/elastic_scenario.py`` (the emulated-cluster version of the same
test: ``tests/cluster/test_elastic_cluster.py``). :func:`test_uninterrupted_reference` runs first and gives
the top-1 that :func:`test_lost_and_added_back` must stay within 0.02 of.

Run directly (not under mpirun): ``.venv/bin/python -m pytest -q tests/parallel/test_elastic.py``
(``tests/parallel/run_elastic.sh``; ``make test`` runs it only where the emulated-cluster version cannot
run). Each launch runs in its own session, killed whole on failure.
"""
import pytest

import elastic_scenario as scenario

_results = {}


def test_uninterrupted_reference(tmp_path):
    _results["reference_top1"] = scenario.reference(scenario.LocalSite(), tmp_path)


def test_lost_and_added_back(tmp_path):
    if "reference_top1" not in _results:
        pytest.skip("needs test_uninterrupted_reference first (same session)")
    scenario.lost_and_added_back(scenario.LocalSite(), tmp_path, _results["reference_top1"])
