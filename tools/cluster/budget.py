"""How long ``python -m tools.cluster.bench`` will take, from an earlier run's ``bench.json`` (pure).

A wiring's wall time is modelled as ``TensorFlow launches x overhead + sum over its launches and rows of
calls x seconds per call``: every row of a launch makes ``1 + warmup + iters`` calls (the benchmark's
untimed first call of every size, the warm-up, the timed iterations), and the overhead per launch that
starts TensorFlow (the ranks' start-up, TensorFlow, Horovod, tracing; the cluster's set-up is shared out
over them) is what the earlier run's wall time per wiring (its ``load`` timestamps, one before the first
wiring and one after each) leaves after its calls, or, when the earlier run recorded every launch's
seconds (``launch_log``, runs with repeats), what each TensorFlow launch took beyond its calls, averaged
apart for launches of the whole sweep and of the repeated sizes. Launches of MPI strategies only (the one-node run, a
forced algorithm's flat call) take seconds and count as no overhead. The overhead is taken as the same
for a launch of the whole sweep and of the repeated sizes only when only the timestamps are known
(tracing per size makes the latter cheaper: an upper bound).
Sizes the earlier run lacks are scaled linearly in bytes from the nearest size it has. Not modelled: the
crossover calibration of the first launch of each key (``min_torus_bytes`` ``auto``; later launches read
the cache).
"""
from __future__ import annotations

import datetime

__all__ = ["calls_per_row", "heavy_groups", "wall_per_wiring", "launch_counts", "per_call_seconds", "group_of",
           "overhead_per_launch", "estimate_seconds"]


def calls_per_row(warmup: int, iters: int) -> int:
    """All-reduce calls one benchmark row makes: the untimed first call, ``warmup``, ``iters``."""
    return 1 + int(warmup) + int(iters)


def heavy_groups(groups) -> int:
    """Launch groups (:class:`tools.cluster.results.Launch`) that start TensorFlow: a strategy that is not
    an MPI one (``mpi``, ``mpi-torus``, ``mpi-<algorithm>``)."""
    return sum(1 for g in groups if any(not s.startswith("mpi") for s in g.strategies))


def _utc(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")


def wall_per_wiring(doc: dict) -> dict:
    """{wiring: seconds} from ``doc["load"]``: entry i+1 minus entry i for the i-th wiring.

    Raises:
        ValueError: fewer load entries than wirings + 1 (a file without the timestamps).
    """
    load, wirings = doc.get("load", []), doc["wirings"]
    if len(load) < len(wirings) + 1:
        raise ValueError(f"{len(load)} load timestamps for {len(wirings)} wirings: need one before the first "
                         f"wiring and one after each (an earlier bench.json of a full run)")
    return {w: (_utc(load[i + 1]["utc"]) - _utc(load[i]["utc"])).total_seconds() for i, w in enumerate(wirings)}


def _repeat_launches(groups: int, repeats: int, repeat_sizes) -> int:
    return groups * (int(repeats) - 1) if repeat_sizes and repeats > 1 else 0


def launch_counts(groups: int, wirings, repeats: int, repeat_sizes) -> dict:
    """{wiring: launches}: ``groups`` launch groups once, and again ``repeats - 1`` times when there are
    repeated sizes."""
    return {w: groups + _repeat_launches(groups, repeats, repeat_sizes) for w in wirings}


def _launch_calls(config: dict, repeat: int) -> int:
    if repeat == 0:
        return calls_per_row(config["warmup"], config["iters"])
    return calls_per_row(config["warmup"], config.get("repeat_iters", config["iters"]))


def per_call_seconds(doc: dict) -> dict:
    """{wiring: {size_bytes: seconds}}: one call of every row of the wiring at that size (sum of the
    rows' median ``time_s``)."""
    out: dict = {}
    for r in doc["rows"]:
        sizes = out.setdefault(r["wiring"], {})
        sizes[r["size_bytes"]] = sizes.get(r["size_bytes"], 0.0) + r["time_s"]
    return out


def group_of(row: dict) -> str:
    """The label of the launch group a bench.json row came from: ``gloo``, ``mpirun``, ``mpi-<algorithm>``."""
    if row["launcher"] == "horovodrun":
        return "gloo"
    alg = row.get("ompi_allreduce")
    return "mpirun" if alg in (None, "default") else f"mpi-{alg}"


def _calls_of(doc: dict, wiring: str, group: str, repeat: int) -> float:
    """Seconds of calls one launch made: its rows' per-launch times x the calls per row."""
    return sum(p["time_s"] * _launch_calls(doc["config"], repeat) for r in doc["rows"]
               if r["wiring"] == wiring and group_of(r) == group
               for p in r.get("per_launch", ()) if p["repeat"] == repeat)


def _mean(values, default):
    return sum(values) / len(values) if values else default


def overhead_per_launch(doc: dict, groups: int, heavy_labels=()) -> dict:
    """{wiring: (seconds per launch of the whole sweep, seconds per launch of a repeat)} of the TensorFlow
    launches: from ``doc["launch_log"]`` (every launch of a group in ``heavy_labels``: its seconds minus its
    calls) when the file has one, else the wall time per wiring minus its calls over its launches
    (``groups`` TensorFlow launch groups per repeat, as the earlier run had: :func:`heavy_groups`), the
    same for both."""
    config = doc["config"]
    log = [x for x in doc.get("launch_log", []) if x["group"] in heavy_labels]
    if log:
        out = {}
        for w in dict.fromkeys(x["wiring"] for x in log):
            rest = [(x["repeat"] > 0, x["seconds"] - _calls_of(doc, w, x["group"], x["repeat"]))
                    for x in log if x["wiring"] == w]
            main = _mean([s for again, s in rest if not again], 0.0)
            out[w] = (main, _mean([s for again, s in rest if again], main))
        return out
    counts = launch_counts(groups, doc["wirings"], config.get("repeats", 1), config.get("repeat_sizes"))
    out = {}
    for w, wall in wall_per_wiring(doc).items():
        calls = sum(p["time_s"] * _launch_calls(config, p["repeat"]) for r in doc["rows"] if r["wiring"] == w
                    for p in r.get("per_launch") or [{"repeat": 0, "time_s": r["time_s"]}])
        out[w] = (max(wall - calls, 0.0) / counts[w],) * 2
    return out


def _scaled(table: dict, n: int) -> float:
    nearest = min(table, key=lambda m: abs(m - n))
    return table[nearest] * n / nearest


def estimate_seconds(previous: dict, *, previous_groups: int, groups: int, wirings, sizes, repeat_sizes,
                     repeats: int, iters: int, warmup: int, repeat_iters: int, heavy_labels=()) -> dict:
    """{wiring: seconds, "total": seconds} of a run with these settings, from ``previous`` (a bench.json
    with ``load`` timestamps) run with ``previous_groups`` TensorFlow launch groups (:func:`heavy_groups`);
    a wiring the earlier run lacks takes the mean of the others'. ``heavy_labels``: those groups' labels
    (with a ``launch_log`` in ``previous``, its per-launch seconds give the overheads).

    Args:
        sizes: the main sweep's sizes (bytes); repeat_sizes: the repeated ones (a subset, bytes).
        repeats: launches per row at the repeated sizes (the main sweep's included).

    Raises:
        ValueError: ``previous`` has no load timestamps for its wirings (see :func:`wall_per_wiring`).
    """
    overhead = overhead_per_launch(previous, previous_groups, heavy_labels)
    per_call = per_call_seconds(previous)
    extra = _repeat_launches(groups, repeats, repeat_sizes)
    main_calls, repeat_calls = calls_per_row(warmup, iters), calls_per_row(warmup, repeat_iters)
    out = {}
    for w in wirings:
        o_main, o_repeat = overhead.get(w) or tuple(_mean([o[i] for o in overhead.values()], 0.0) for i in (0, 1))
        table = per_call.get(w) or {n: sum(t[n] for t in per_call.values() if n in t) / len(per_call)
                                    for n in set().union(*per_call.values())}
        timed = sum(_scaled(table, n) for n in sizes) * main_calls
        if repeats > 1:
            timed += (repeats - 1) * sum(_scaled(table, n) for n in repeat_sizes) * repeat_calls
        out[w] = groups * o_main + extra * o_repeat + timed
    out["total"] = sum(out.values())
    return out
