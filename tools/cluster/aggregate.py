"""Rows over repeated launches (pure): the median with its min-max, the algorithm that ran, paired ratios,
and the planner's pass counts of ``python -m tools.cluster.bench``.

At the repeated sizes (``--repeat-sizes``, 8 and 32 MiB by default) every launch group runs ``--repeats``
times (single launches swing up to 2x on the emulator); a per-launch row (:func:`tools.cluster.results.
rows_from_doc`, with its ``repeat`` index) becomes one row per (wiring, strategy, launcher, Open MPI
algorithm, size)::

    {"wiring": "rails", "strategy": "torus", "launcher": "horovodrun", "ompi_allreduce": None,
     "size_bytes": 8388608, "time_s": 0.61, "time_min_s": 0.58, "time_max_s": 0.70, "launches": 3,
     "algorithm": "torus", "column": "hvd.allreduce", "column_rules": False, "wrong": 0,
     "per_launch": [{"repeat": 0, "time_s": 0.61, "rank_avg_s": 0.60, "rank_min_s": 0.59,
                     "algorithm": "torus", "column": "hvd.allreduce", "wrong": 0}, ...]}

``time_s``: the median over the launches of the slowest rank's time per all-reduce (seconds);
``time_min_s``/``time_max_s``: the fastest and slowest launch; ``algorithm``/``column``: what ran (the
benchmark's ``algorithm``: ``torus`` or ``flat``; ``column``: the torus' column algorithm), the common value
of every launch or ``mixed`` when the launches differ (``per_launch`` has each), ``None`` in files that
predate the field; ``column_rules``: whether the launches ran under the package's Open MPI rules file
(:func:`tools.cluster.results.ran_column_rules`; ``mixed`` likewise).
"""
from __future__ import annotations

import statistics

__all__ = ["KEY", "MIXED", "PLANNER_RANGE", "aggregate_launches", "common", "paired_ratios", "ratio_range",
           "planner_check", "planner_counts", "format_planner_counts"]

#: The fields that name one row across launches.
KEY = ("wiring", "strategy", "launcher", "ompi_allreduce", "size_bytes")
#: ``algorithm``/``column`` of a row whose launches ran different ones.
MIXED = "mixed"
#: The planner's prediction / the measurement that counts as a pass (issue 23).
PLANNER_RANGE = (0.75, 1.33)

_LAUNCH_FIELDS = ("repeat", "time_s", "rank_avg_s", "rank_min_s", "algorithm", "column", "wrong")


def common(values):
    """The one value of ``values`` (None when empty or all None), else :data:`MIXED`."""
    kinds = set(values)
    if len(kinds) > 1:
        return MIXED
    return next(iter(kinds), None)


def aggregate_launches(launch_rows) -> list[dict]:
    """One row per :data:`KEY` from per-launch rows (each with ``repeat``, ``time_s`` and the rank times),
    in the order each key first appears; ``per_launch`` sorted by repeat.

    Raises:
        ValueError: two per-launch rows with the same key and repeat index (a launch read twice).
    """
    groups: dict = {}
    for r in launch_rows:
        groups.setdefault(tuple(r.get(k) for k in KEY), []).append(r)
    out = []
    for key, group in groups.items():
        group = sorted(group, key=lambda r: r.get("repeat", 0))
        repeats = [r.get("repeat", 0) for r in group]
        if len(set(repeats)) != len(repeats):
            raise ValueError(f"row {dict(zip(KEY, key))} appears twice in repeat {repeats}: each launch's "
                             f"JSON must be read once")
        times = [r["time_s"] for r in group]
        wrong = [r.get("wrong") for r in group]
        out.append({**dict(zip(KEY, key)), "time_s": statistics.median(times), "time_min_s": min(times),
                    "time_max_s": max(times), "launches": len(group),
                    "algorithm": common(r.get("algorithm") for r in group),
                    "column": common(r.get("column") for r in group),
                    "column_rules": common(r.get("column_rules") for r in group),
                    "wrong": None if all(w is None for w in wrong) else sum(w or 0 for w in wrong),
                    "per_launch": [{f: r.get(f, 0 if f == "repeat" else None) for f in _LAUNCH_FIELDS}
                                   for r in group]})
    return out


def paired_ratios(numerator: dict, denominator: dict) -> list[float]:
    """numerator / denominator time per repeat index that both rows ran in (the same repeat: the same
    round of launch groups), in repeat order; [] when the rows carry no ``per_launch``."""
    den = {p["repeat"]: p["time_s"] for p in denominator.get("per_launch", ())}
    return [p["time_s"] / den[p["repeat"]] for p in numerator.get("per_launch", ()) if p["repeat"] in den]


def ratio_range(numerator: dict, denominator: dict) -> tuple[float, float] | None:
    """(min, max) of :func:`paired_ratios` when at least two repeats pair up, else None."""
    values = paired_ratios(numerator, denominator)
    return (min(values), max(values)) if len(values) >= 2 else None


def planner_check(rows) -> list[dict]:
    """Rows with ``planner_ratio`` (predicted_s / time_s, the median) and ``planner_ok`` (inside
    :data:`PLANNER_RANGE`); None for both where a row has no prediction."""
    lo, hi = PLANNER_RANGE
    out = []
    for r in rows:
        ratio = r["predicted_s"] / r["time_s"] if r.get("predicted_s") and r.get("time_s") else None
        out.append({**r, "planner_ratio": ratio, "planner_ok": None if ratio is None else lo <= ratio <= hi})
    return out


def planner_counts(rows, sizes=None) -> dict:
    """Per wiring: {"passed", "rows", "calibration_passed", "calibration_rows"} of :func:`planner_check`'s
    rows (at ``sizes`` only, when given); rows the link was fitted on (``calibration``) are counted apart."""
    out: dict = {}
    for r in rows:
        if r.get("planner_ok") is None or (sizes is not None and r["size_bytes"] not in sizes):
            continue
        c = out.setdefault(r["wiring"], {"passed": 0, "rows": 0, "calibration_passed": 0, "calibration_rows": 0})
        prefix = "calibration_" if r.get("calibration") else ""
        c[prefix + "rows"] += 1
        c[prefix + "passed"] += bool(r["planner_ok"])
    return out


def format_planner_counts(counts: dict, what: str) -> str:
    """One line per wiring: ``node: 30 of 52 rows within 0.75-1.33 (out of sample); calibration 10 of 13``."""
    lo, hi = PLANNER_RANGE
    return "\n".join(f"{w}: planner / measured within {lo}-{hi} for {c['passed']} of {c['rows']} rows "
                     f"out of sample ({what}); "
                     + (f"{c['calibration_passed']} of {c['calibration_rows']} fitted rows" if c["calibration_rows"]
                        else "no fitted rows on this wiring (the links were fitted on the other)")
                     for w, c in counts.items())
