"""The rounds of ``python -m tools.cluster.bench``: which launches run in which order, and where each
launch's benchmark JSON lies in ``OUT/raw`` (``<wiring>-<group>-r<repeat>.json``; ``<wiring>-<group>.json``
in folders of runs before repeats)."""
from __future__ import annotations

import dataclasses
import os
import re
import shutil

from tools.cluster.layout import WIRINGS
from tools.cluster.results import Launch

__all__ = ["launch_plan", "raw_name", "raw_launch_files", "clear_raw"]

_RAW = re.compile(r"(?P<wiring>[a-z]+)-(?P<label>[a-z0-9_-]+?)(-r(?P<repeat>[0-9]+))?\.json\Z")


def launch_plan(groups, repeats: int, repeat_sizes) -> list[tuple[int, Launch]]:
    """(repeat index, launch) in the order one wiring runs them: every group over the whole sweep
    (repeat 0), then ``repeats - 1`` more rounds when there are repeated sizes; in odd rounds the groups'
    order and each group's strategy order are reversed (the first launch after the cluster comes up, and
    the first strategy of a launch, are not always the same one)."""
    plan = [(0, g) for g in groups]
    for k in range(1, repeats if repeat_sizes else 1):
        order = groups if k % 2 == 0 else [dataclasses.replace(g, strategies=tuple(reversed(g.strategies)))
                                           for g in reversed(groups)]
        plan += [(k, g) for g in order]
    return plan


def raw_name(wiring, group_label, repeat) -> str:
    """``<wiring>-<group>-r<repeat>.json``: the file name of one launch's benchmark JSON."""
    return f"{wiring}-{group_label}-r{repeat}.json"


def _launch_json(raw):
    """(wiring, group label, repeat, is the old name, path) of every launch JSON in ``raw``."""
    for name in sorted(os.listdir(raw)) if os.path.isdir(raw) else []:
        m = _RAW.match(name)
        if m and m["wiring"] in WIRINGS:
            yield m["wiring"], m["label"], int(m["repeat"] or 0), m["repeat"] is None, os.path.join(raw, name)


def raw_launch_files(raw) -> dict:
    """{(wiring, group label, repeat): path} of the launch JSONs in ``raw`` (``<wiring>-<group>-r<k>.json``;
    ``<wiring>-<group>.json``, of runs before repeats, is repeat 0 unless a ``-r0`` file is there too)."""
    out = {}
    for wiring, group, repeat, old, path in _launch_json(raw):
        if not old or (wiring, group, repeat) not in out:
            out[wiring, group, repeat] = path
    return out


def clear_raw(raw, cache, wirings, labels=None):
    """Remove an earlier run's launch JSONs and crossover caches of ``wirings`` (and of the launch groups
    ``labels`` only, when given): the other wiring's results stay for the analysis."""
    for wiring, group, _, _, path in list(_launch_json(raw)):
        if wiring in wirings and (labels is None or group in labels):
            os.remove(path)
    for name in os.listdir(cache) if os.path.isdir(cache) else []:
        wiring, _, group = name.partition("-")
        if wiring in wirings and (labels is None or group in labels):
            shutil.rmtree(os.path.join(cache, name))
