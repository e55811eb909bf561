"""The cluster benchmark's arithmetic (pure): its launches, rows, calibration, predictions and target ratios.

Every (wiring, launch group) runs ``python -m horovod_torus.bench`` once, and again at the repeated sizes
(``--repeats``); each launch's JSON rows become per-launch rows (:func:`rows_from_doc`), merged over the
launches by :func:`tools.cluster.aggregate.aggregate_launches` into the rows of ``bench.json``::

    {"wiring": "rails", "strategy": "mpi-ring", "launcher": "mpirun", "ompi_allreduce": "ring",
     "size_bytes": 8388608, "time_s": 0.61, "time_min_s": 0.59, "time_max_s": 0.70, "launches": 3,
     "algorithm": "flat", "column": None, "wrong": 0, "per_launch": [...],
     "model": "ring", "predicted_s": 0.59, "calibration": false, "planner_ratio": 0.97, "planner_ok": true}

``time_s``: per-iteration time averaged over the timed iterations, slowest rank (``time_us.max``), the
median over the launches (``time_min_s``/``time_max_s``: the fastest and slowest launch); files written
before repeated launches have one launch per row and ``time_avg_s``/``time_min_s`` over the ranks.
``strategy``: ``torus`` (our TF path; under mpirun with ``--torus-backend horovod``, i.e. Horovod's ops on
the MPI controller, and under horovodrun on Gloo: the ``launcher`` key tells them apart), ``ring``
(``hvd.allreduce``: Gloo's ring under horovodrun, ``MPI_Allreduce`` under mpirun), ``mpi-torus``, ``mpi``
(``MPI_Allreduce`` with Open MPI's default choice), ``mpi-<algorithm>`` (``MPI_Allreduce`` with the
algorithm forced through ``coll_tuned_allreduce_algorithm``).

Predictions: the planner's cost model (:mod:`horovod_torus.costmodel`) on a :class:`Cluster` of the same
shape (nodes, ranks per node, NICs per node), with the inter-node link (alpha, bandwidth per NIC) fitted by
:func:`horovod_torus.costmodel.fit_alpha_beta` on ONE reference (by default the node wiring's ``mpi-ring``
rows: a textbook ring) and the intra-node link fitted on a one-node run; the pairwise-exchange efficiency
(:attr:`horovod_torus.costmodel.Cluster.exchange_efficiency`) is fitted on a second reference, the node
wiring's ``mpi`` rows (Open MPI's default: Rabenseifner's exchanges; :func:`fit_exchange_efficiency`);
every other row is predicted out of sample. Each strategy is mapped to the algorithm it runs
(:data:`MODEL_OF`; the torus' column algorithm: :data:`MPI_COLUMN`).
"""
from __future__ import annotations

import dataclasses

from tools.cluster.aggregate import PLANNER_RANGE, ratio_range
from horovod_torus.columns import column_bytes
from horovod_torus.ompi_rules import RING_FROM_BYTES
from horovod_torus.topology import TorusTopology
from horovod_torus.costmodel import (
    Cluster, Link, cluster_halving_doubling_time, cluster_ring_time, cluster_torus_time, fit_alpha_beta,
    model_coefficients,
)

__all__ = ["Launch", "OMPI_ALGORITHMS", "MODEL_OF", "MPI_COLUMN", "fit_exchange_efficiency", "launches",
           "rows_from_doc", "ran_column_rules", "fit_link", "make_cluster",
           "predict_row", "add_predictions", "fit_or_origin", "label", "forced_algorithm", "target_ratios", "format_rows_table", "format_targets",
           "format_train_table", "print_train_comparison", "TARGET_SIZES", "GLOO_TARGET", "MPIRUN_TARGET",
           "MPI_TORUS_TARGET", "PLANNER_LO", "PLANNER_HI", "SERIAL_COLUMNS"]

#: Open MPI 4.1 coll_tuned_allreduce_algorithm numbers (ompi_info --param coll tuned --level 9).
OMPI_ALGORITHMS = {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                   "segmented_ring": 5, "rabenseifner": 6}

#: (strategy, launcher) -> the cost model's algorithm. Open MPI 4.1's default all-reduce for 8 ranks and
#: 1-64 MiB behaves as Rabenseifner's (recursive halving-doubling); Horovod's ring under mpirun is that
#: same MPI_Allreduce; under Gloo it is Gloo's ring.
MODEL_OF = {("torus", "mpirun"): "torus", ("torus:mpi", "mpirun"): "torus", ("torus", "horovodrun"): "torus",
            ("mpi-torus", "mpirun"): "torus",
            ("ring", "horovodrun"): "ring", ("ring", "mpirun"): "halving-doubling",
            ("mpi", "mpirun"): "halving-doubling", ("mpi-ring", "mpirun"): "ring",
            ("mpi-segmented_ring", "mpirun"): "ring", ("mpi-rabenseifner", "mpirun"): "halving-doubling"}

#: (strategy, launcher) whose torus column all-reduce is the MPI library's MPI_Allreduce on the column
#: communicator: the Horovod-ops torus under mpirun. Modelled like the flat call under the same Open MPI
#: choice (its default for 4 ranks measured as fast as Rabenseifner's), except where the launch ran under
#: the package's rules file (:mod:`horovod_torus.ompi_rules`, the row's ``column_rules``): there a column of
#: 2 .. N-1 ranks runs the ring from :data:`horovod_torus.ompi_rules.RING_FROM_BYTES` per shard. The MPI
#: transport, Gloo and NCCL run rings.
MPI_COLUMN = {("torus", "mpirun")}

#: (strategy, launcher) whose torus columns run one after another
#: (:func:`horovod_torus.costmodel.cluster_torus_time`'s ``serial_columns``): the Horovod-ops torus under
#: mpirun, where Horovod's single background thread blocks in each column's CPU ``MPI_Allreduce``
#: (docs/cluster_bench.json, rails wiring, 5 launches a size: 3 of 5 took the serialised time or more at
#: 8 MiB and at 32 MiB, the others 1.2-1.9x the concurrent one; docs/notes/cluster_in_a_box.md). Under Gloo
#: the same torus ran concurrently (0.35-0.42 s at 8 MiB against 0.31 s predicted concurrent, 0.62 s
#: serialised), and the MPI transport's columns are requests of the calling thread.
SERIAL_COLUMNS = {("torus", "mpirun")}

TARGET_SIZES = (8 * 1024 ** 2, 32 * 1024 ** 2)
#: Issue 23 item 4's targets (rails 4 x 2, 200 Mbit/s, 8 and 32 MiB, medians of >= 3 launches): torus / ring
#: under Gloo; torus and torus:mpi / ring under mpirun (the torus must be what ran); mpi-torus / the fastest
#: flat MPI_Allreduce; the planner's prediction / the measurement (PLANNER_LO-PLANNER_HI).
GLOO_TARGET, MPIRUN_TARGET, MPI_TORUS_TARGET = 0.6, 1.0, 1.0
PLANNER_LO, PLANNER_HI = PLANNER_RANGE


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of ``python -m horovod_torus.bench`` on an emulated cluster.

    Attributes:
        label: file-name-safe name (``mpirun``, ``mpi-ring``, ``gloo``).
        launcher: ``mpirun`` or ``horovodrun``.
        strategies: the bench CLI's --strategies.
        rename: bench strategy -> row strategy (e.g. ``{"mpi": "mpi-ring"}``).
        mca: (name, value) pairs for mpirun.
        bench_args: more bench CLI flags (e.g. ``--torus-backend horovod``).
    """

    label: str
    launcher: str
    strategies: tuple
    rename: dict = dataclasses.field(default_factory=dict)
    mca: tuple = ()
    bench_args: tuple = ()


def launches(algorithms=("ring", "rabenseifner"), everything_under=("ring",)) -> list[Launch]:
    """The launches of one wiring: every strategy under mpirun, each forced Open MPI algorithm, Gloo.

    ``torus`` runs on Horovod's ops (``--torus-backend horovod``), ``torus:mpi`` is the same TF path on the
    MPI transport (the default under mpirun on CPU). A forced algorithm in ``everything_under`` also reruns
    torus, torus:mpi, ring and mpi-torus with it (their
    MPI_Allreduce calls then use it: the flat ring, the Horovod-ops torus' column phase; the MPI transport's
    column is its own Sendrecv ring when the column spans nodes); the others run the flat call only.

    Raises:
        ValueError: an algorithm name outside OMPI_ALGORITHMS.
    """
    everything = ("torus", "torus:mpi", "ring", "mpi-torus", "mpi")
    out = [Launch("mpirun", "mpirun", everything, bench_args=("--torus-backend", "horovod"))]
    for alg in algorithms:
        if alg not in OMPI_ALGORITHMS:
            raise ValueError(f"Open MPI all-reduce algorithm {alg!r} is unknown: choose among "
                             f"{', '.join(OMPI_ALGORITHMS)}")
        strategies = everything if alg in everything_under else ("mpi",)
        out.append(Launch(f"mpi-{alg}", "mpirun", strategies, rename={"mpi": f"mpi-{alg}"},
                          mca=(("coll_tuned_use_dynamic_rules", "1"),
                               ("coll_tuned_allreduce_algorithm", str(OMPI_ALGORITHMS[alg]))),
                          bench_args=("--torus-backend", "horovod") if "torus" in strategies else ()))
    out.append(Launch("gloo", "horovodrun", ("torus", "ring")))
    return out


def forced_algorithm(launch: Launch) -> str | None:
    """The Open MPI all-reduce algorithm a launch forces (None: Open MPI's default, or not MPI)."""
    for name, value in launch.mca:
        if name == "coll_tuned_allreduce_algorithm":
            return {str(v): k for k, v in OMPI_ALGORITHMS.items()}[str(value)]
    return None


def rows_from_doc(doc: dict, wiring: str, launch: Launch, repeat: int = 0) -> list[dict]:
    """Per-launch rows from one launch's benchmark JSON (``python -m horovod_torus.bench --json``):
    ``time_s`` = the slowest rank's time per all-reduce, ``rank_avg_s``/``rank_min_s`` = the average and
    fastest rank's, ``algorithm``/``column`` = what ran (None in files that predate them), ``repeat`` = the
    launch's repeat index; :func:`tools.cluster.aggregate.aggregate_launches` merges the launches."""
    rows = []
    alg = forced_algorithm(launch)
    rules = ran_column_rules(doc, launch)
    for r in doc["rows"]:
        t = r["time_us"]
        rows.append({"wiring": wiring, "strategy": launch.rename.get(r["strategy"], r["strategy"]),
                     "launcher": launch.launcher,
                     "ompi_allreduce": None if launch.launcher != "mpirun" else (alg or "default"),
                     "size_bytes": int(r["size_bytes"]), "repeat": int(repeat),
                     "time_s": t["max"] * 1e-6, "rank_avg_s": t["avg"] * 1e-6, "rank_min_s": t["min"] * 1e-6,
                     "algorithm": r.get("algorithm") or None, "column": r.get("column") or None,
                     "wrong": r.get("wrong"), "column_rules": rules})
    return rows


def ran_column_rules(doc: dict, launch: Launch) -> bool:
    """Whether a launch's MPI_Allreduce calls ran under the package's Open MPI rules file: an mpirun launch
    whose benchmark recorded the file it wrote (``host.ompi_rules``, a path; ``none: why`` otherwise; absent
    in files that predate it)."""
    recorded = str(doc.get("host", {}).get("ompi_rules") or "")
    return launch.launcher == "mpirun" and bool(recorded) and not recorded.startswith("none")


def fit_link(rows, world_size: int, min_bytes: int = 0) -> tuple[Link, float]:
    """(Link, rms relative residual) of a flat ring's rows (time_s against size_bytes) on ``world_size``
    ranks: t = 2(p-1) alpha + 2(p-1)/p n / B (costmodel.fit_alpha_beta with the ``ring`` coefficients).

    Raises:
        ValueError: fewer than 2 sizes (see fit_alpha_beta).
    """
    use = [r for r in rows if r["size_bytes"] >= min_bytes]
    a, b = model_coefficients("ring", world_size)
    return fit_alpha_beta([r["size_bytes"] for r in use], [r["time_s"] for r in use], a, b)


def fit_or_origin(sizes, seconds, a_coef: float, b_coef: float) -> tuple[Link, float]:
    """fit_alpha_beta, or when that fit is unphysical (beta <= 0: noise larger than the size trend) the
    bandwidth-only fit through the origin (alpha = 0, beta = sum(B n t) / sum((B n)^2) over the sizes)."""
    try:
        return fit_alpha_beta(sizes, seconds, a_coef, b_coef)
    except ValueError:
        xs = [b_coef * n for n in sizes]
        beta = sum(x * t for x, t in zip(xs, seconds)) / sum(x * x for x in xs)
        rms = (sum(((x * beta - t) / t) ** 2 for x, t in zip(xs, seconds)) / len(xs)) ** 0.5
        return Link(alpha=0.0, bandwidth=1.0 / beta), rms


def make_cluster(nodes: int, ranks_per_node: int, nics: int, intra: Link, nic_link: Link, name: str,
                 exchange_efficiency: float = 1.0) -> Cluster:
    """The cost model's cluster: inter bandwidth per node = nics x the per-NIC bandwidth ``nic_link``."""
    return Cluster(nodes=nodes, ranks_per_node=ranks_per_node, intra=intra,
                   inter=Link(nic_link.alpha, nic_link.bandwidth * nics), nics=nics, name=name,
                   exchange_efficiency=exchange_efficiency)


def fit_exchange_efficiency(rows, cluster: Cluster) -> tuple[float, float]:
    """(efficiency, rms relative residual): the ``exchange_efficiency`` in [0.05, 1] whose halving-doubling
    prediction on ``cluster`` best fits ``rows`` (time_s against size_bytes; least squares of the relative
    error over a 0.005 grid), e.g. Open MPI's default MPI_Allreduce rows with the link already fitted.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no rows to fit the exchange efficiency on")

    def rms(e):
        c = dataclasses.replace(cluster, exchange_efficiency=e)
        return (sum(((cluster_halving_doubling_time(c, r["size_bytes"]) - r["time_s"]) / r["time_s"]) ** 2
                    for r in rows) / len(rows)) ** 0.5

    best = min((k / 200 for k in range(10, 201)), key=rms)
    return best, rms(best)


def predict_row(cluster: Cluster, strategy: str, launcher: str, nbytes: int, grid: str,
                ompi_allreduce: str | None = None, column_rules: bool = False) -> tuple[str, float]:
    """(model label, predicted seconds) of one row. Raises ValueError for an unmapped (strategy, launcher).

    ``ompi_allreduce``: the Open MPI algorithm forced for the row's MPI_Allreduce calls; Horovod's ring
    under mpirun then runs that algorithm (MODEL_OF of ``mpi-<algorithm>``). ``column_rules``: the launch
    ran under the package's rules file (:func:`ran_column_rules`): a :data:`MPI_COLUMN` torus' column of
    2 .. N-1 ranks then runs the ring from :data:`horovod_torus.ompi_rules.RING_FROM_BYTES` per shard
    (:func:`horovod_torus.columns.column_bytes`), labelled ``ring column (Open MPI rule)``.
    """
    flat_call = "mpi" if ompi_allreduce in (None, "default") else f"mpi-{ompi_allreduce}"
    if strategy == "ring" and launcher == "mpirun":
        strategy = flat_call
    try:
        alg = MODEL_OF[strategy, launcher]
    except KeyError:
        raise ValueError(f"no model for strategy {strategy!r} under {launcher}: add it to MODEL_OF") from None
    if alg == "torus":
        column, suffix = "ring", ""
        if (strategy, launcher) in MPI_COLUMN:
            column = MODEL_OF[flat_call, "mpirun"]
            suffix = f", {column} column"
            g = TorusTopology.parse(grid)
            if (column_rules and flat_call == "mpi" and 2 <= g.y < g.size
                    and column_bytes(nbytes, g.x) >= RING_FROM_BYTES):
                column, suffix = "ring", ", ring column (Open MPI rule)"
        serial = (strategy, launcher) in SERIAL_COLUMNS
        if serial:
            suffix = ", columns in turn" + suffix
        return f"torus {grid}{suffix}", cluster_torus_time(cluster, grid, nbytes, column=column,
                                                           serial_columns=serial)
    if alg == "ring":
        return "ring", cluster_ring_time(cluster, nbytes)
    return "halving-doubling", cluster_halving_doubling_time(cluster, nbytes)


def add_predictions(rows, clusters: dict, grid: str, reference: tuple, *more_references) -> list[dict]:
    """Rows with ``model``, ``predicted_s`` and ``calibration`` (True for the reference rows).

    clusters: wiring -> Cluster; reference (and more_references): (wiring, strategy, launcher) whose rows
    a parameter was fitted on. A torus row whose every launch ran the flat call (``algorithm`` ``flat``:
    below its crossover) is predicted as that flat call, its model labelled ``... (flat call)``: the
    launcher's Horovod all-reduce (the ``ring`` row's model), except for the numpy API's (``mpi-torus``)
    from :data:`horovod_torus.mpi.FLAT_NONBLOCKING_MIN_BYTES`, an ``MPI_Iallreduce``: Open MPI's libnbc, which
    for 4 or more ranks, 64 KiB or more, a commutative op and separate buffers runs Rabenseifner's
    reduce-scatter + all-gather whatever algorithm the tuned component is forced to (``nbc_iallreduce.c``),
    predicted as halving-doubling with the textbook exchanges (``exchange_efficiency`` 1: the fitted
    efficiency describes the tuned component's default ``MPI_Allreduce``, not libnbc).
    """
    from horovod_torus.mpi import FLAT_NONBLOCKING_MIN_BYTES  # here: mpi4py starts MPI when imported

    fitted = {tuple(reference), *(tuple(x) for x in more_references)}
    out = []
    for r in rows:
        flat = "torus" in r["strategy"] and r.get("algorithm") == "flat"
        if flat and r["strategy"] == "mpi-torus" and r["size_bytes"] >= FLAT_NONBLOCKING_MIN_BYTES:
            model, t = "halving-doubling, libnbc", cluster_halving_doubling_time(
                dataclasses.replace(clusters[r["wiring"]], exchange_efficiency=1.0), r["size_bytes"])
        else:
            model, t = predict_row(clusters[r["wiring"]], "ring" if flat else r["strategy"], r["launcher"],
                                   r["size_bytes"], grid, r.get("ompi_allreduce"), bool(r.get("column_rules")))
        out.append({**r, "model": model + (" (flat call)" if flat else ""), "predicted_s": t,
                    "calibration": (r["wiring"], r["strategy"], r["launcher"]) in fitted})
    return out


def label(r) -> str:
    """``strategy (launcher[, forced Open MPI algorithm])`` of a row, e.g. ``mpi-torus (mpirun, ring)``."""
    launcher = "gloo" if r["launcher"] == "horovodrun" else r["launcher"]
    alg = r.get("ompi_allreduce")
    forced = alg not in (None, "default") and not r["strategy"].startswith("mpi-" + alg)
    return f"{r['strategy']} ({launcher}{', ' + alg if forced else ''})"


def _find(rows, wiring, strategy, launcher, size, ompi=("default", None)):
    for r in rows:
        if (r["wiring"], r["strategy"], r["launcher"], r["size_bytes"]) == (wiring, strategy, launcher, size) \
                and r.get("ompi_allreduce") in ompi:
            return r
    return None


def _entry(comparison, size, num, den, ratio, hi, lo=None, *, torus_required=False, range_=None) -> dict:
    """One target entry: met when ``lo <= ratio <= hi`` (``lo`` None: no lower bound) and, with
    ``torus_required``, the numerator row ``num`` ran the torus; ``den``: the other row (None: the planner)."""
    target = f"<= {hi:g}" if lo is None else f"{lo:g}-{hi:g}"
    ok = ratio <= hi and (lo is None or ratio >= lo)
    if torus_required:
        target += ", torus ran"
        ok = ok and num.get("algorithm") == "torus"
    launches = min(r.get("launches", 1) for r in (num, den) if r is not None)
    return {"comparison": comparison, "size_bytes": size, "ratio": ratio, "range": range_, "launches": launches,
            "algorithm": num.get("algorithm"), "target": target, "ok": bool(ok)}


def target_ratios(rows, wiring: str = "rails", sizes=TARGET_SIZES) -> list[dict]:
    """The comparisons of issue 23 item 4 for one wiring, on the rows' medians over launches:
    {comparison, size_bytes, ratio (of the medians), range (min, max of the per-launch ratios of the
    repeats both sides ran in, None below two), launches (the fewer of the two rows'), algorithm (what the
    numerator ran), target, ok}.

    * torus / ring under horovodrun (Gloo) (target <= :data:`GLOO_TARGET`);
    * torus and torus:mpi / ring under mpirun, with Open MPI's default and each forced algorithm (target
      <= :data:`MPIRUN_TARGET`, and met only when the torus is the algorithm that ran);
    * mpi-torus (default, and each forced algorithm) / the fastest flat MPI_Allreduce row (default or
      forced algorithm) (target <= :data:`MPI_TORUS_TARGET`);
    * predicted / measured for every row (target :data:`PLANNER_LO`-:data:`PLANNER_HI`; the range: the
      prediction over the slowest and the fastest launch).
    Comparisons whose rows are missing are left out.
    """
    out = []
    forced = sorted({r["ompi_allreduce"] for r in rows if r.get("ompi_allreduce") not in (None, "default")})
    for n in sizes:
        pairs = [("mpirun", ("default",)), ("horovodrun", (None,))] + [("mpirun", (a,)) for a in forced]
        for (launcher, ompi), torus in [(p, t) for p in pairs for t in ("torus", "torus:mpi")]:
            t, r = _find(rows, wiring, torus, launcher, n, ompi), _find(rows, wiring, "ring", launcher, n, ompi)
            if t and r:
                gloo = launcher == "horovodrun"
                out.append(_entry(f"{label(t)} / {label(r)}", n, t, r, t["time_s"] / r["time_s"],
                                  GLOO_TARGET if gloo else MPIRUN_TARGET, torus_required=not gloo,
                                  range_=ratio_range(t, r)))
        flat = [r for r in rows if r["wiring"] == wiring and r["size_bytes"] == n
                and (r["strategy"] == "mpi" or r["strategy"].startswith("mpi-")) and r["strategy"] != "mpi-torus"]
        for alg in ["default"] + forced:
            mt = _find(rows, wiring, "mpi-torus", "mpirun", n, (alg,))
            if mt and flat:
                best = min(flat, key=lambda r: r["time_s"])
                out.append(_entry(f"{label(mt)} / MPI best ({label(best)})", n, mt, best,
                                  mt["time_s"] / best["time_s"], MPI_TORUS_TARGET, range_=ratio_range(mt, best)))
        for r in rows:
            if r["wiring"] == wiring and r["size_bytes"] == n and r.get("predicted_s"):
                spread = None
                if r.get("launches", 1) >= 2:
                    spread = (r["predicted_s"] / r["time_max_s"], r["predicted_s"] / r["time_min_s"])
                name = f"predicted / measured: {label(r)}" + (" [calibration]" if r.get("calibration") else "")
                out.append(_entry(name, n, r, None, r["predicted_s"] / r["time_s"], PLANNER_HI, PLANNER_LO,
                                  range_=spread))
    return out


def _mib(n):
    return f"{n / 1024 ** 2:g} MiB"


def format_targets(targets) -> str:
    """A markdown table: comparison | size | ratio, median [per-launch min-max] | launches | algorithm that
    ran | target | met; targets of files that predate repeated launches (no ``launches``) keep their
    layout: comparison | size | ratio | target | met."""
    if targets and not any("launches" in t for t in targets):
        lines = ["| comparison | size | ratio | target | met |", "|---|---|---|---|---|"]
        for t in targets:
            lines.append(f"| {t['comparison']} | {_mib(t['size_bytes'])} | {t['ratio']:.2f} | {t['target']} | "
                         f"{'yes' if t['ok'] else 'no'} |")
        return "\n".join(lines)
    lines = ["| comparison | size | ratio, median [per-launch min-max] | launches | algorithm that ran | target | met |",
             "|---|---|---|---|---|---|---|"]
    for t in targets:
        spread = f" [{t['range'][0]:.2f}-{t['range'][1]:.2f}]" if t.get("range") else ""
        lines.append(f"| {t['comparison']} | {_mib(t['size_bytes'])} | {t['ratio']:.2f}{spread} | {t['launches']} | "
                     f"{t.get('algorithm') or '-'} | {t['target']} | {'yes' if t['ok'] else 'no'} |")
    return "\n".join(lines)


def _cell(r) -> str:
    """``median [min-max] (predicted)``, with ``flat`` where a torus strategy ran the flat call."""
    text = f"{r['time_s']:.3f}"
    if r.get("launches", 1) >= 2:
        text += f" [{r['time_min_s']:.3f}-{r['time_max_s']:.3f}]"
    if r.get("predicted_s") is not None:
        text += f" ({r['predicted_s']:.3f})"
    if "torus" in r["strategy"] and r.get("algorithm") not in (None, "torus"):
        text += f" {r['algorithm']}"
    return text


def format_rows_table(rows, wiring: str) -> str:
    """A markdown table of one wiring: size down, row label across, measured s (predicted s); rows of
    several launches: median [min-max] (predicted); a torus row that ran the flat call says so."""
    sel = [r for r in rows if r["wiring"] == wiring]
    keys = list(dict.fromkeys(label(r) for r in sel))
    sizes = sorted({r["size_bytes"] for r in sel})
    lines = ["| size | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for n in sizes:
        cells = []
        for k in keys:
            r = next((r for r in sel if r["size_bytes"] == n and label(r) == k), None)
            cells.append("" if r is None else _cell(r))
        lines.append(f"| {_mib(n)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_train_table(results: dict) -> str:
    """A markdown table of training-benchmark JSONs (``python -m horovod_torus.bench.train --json``), one
    row per ``{label: document}``: label | strategy | step (s, avg) | gradient sync alone (s) | sync / step |
    images/s (global batch)."""
    lines = ["| run | strategy | step (s, avg) | gradient sync alone (s) | sync / step | images/s (global batch) |",
             "|---|---|---|---|---|---|"]
    for name, doc in results.items():
        r = doc.get("result", doc)
        lines.append(f"| {name} | {r['strategy']} | {r['step_time_s']['avg']:.2f} | {r['sync_time_s']['avg']:.2f} | "
                     f"{r['sync_share']:.0%} | {r['images_per_s']:.2f} ({r['global_batch']}) |")
    return "\n".join(lines)


def print_train_comparison(out_dir: str) -> None:
    """Print the table of ``OUT/torus.json`` and ``OUT/ring.json`` (those that exist) and, with both, the
    torus / ring ratios of images/s and of the gradient sync time (``mpi_scripts/cluster_train.sh``)."""
    import json
    import os

    res = {}
    for s in ("torus", "ring"):
        path = os.path.join(out_dir, f"{s}.json")
        if os.path.exists(path):
            with open(path) as f:
                res[s] = json.load(f)
    print(format_train_table(res))
    if len(res) == 2:
        t, g = (res[s].get("result", res[s]) for s in ("torus", "ring"))
        print(f"torus / ring: images/s {t['images_per_s'] / g['images_per_s']:.2f}x, sync time "
              f"{t['sync_time_s']['avg'] / g['sync_time_s']['avg']:.2f}")
