"""Plot of a benchmark JSON: busbw (GB/s) and time (us) against message size, one line per strategy."""
from __future__ import annotations

from horovod_torus.atomic import save_figure_atomic

__all__ = ["plot_allreduce_rows"]


def plot_allreduce_rows(document: dict, path: str, title: str | None = None) -> None:
    """Write a two-panel PNG (busbw, avg time; log-log axes) from :func:`report.bench_document` output,
    atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_strategy: dict = {}
    for row in document["rows"]:
        by_strategy.setdefault(row["strategy"], []).append(row)
    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rows in by_strategy.items():
        rows = sorted(rows, key=lambda r: r["size_bytes"])
        sizes = [r["size_bytes"] for r in rows]
        ax_bw.plot(sizes, [r["busbw_gbps"] for r in rows], marker="o", ms=3, label=name)
        ax_t.plot(sizes, [r["time_us"]["avg"] for r in rows], marker="o", ms=3, label=name)
    for ax, label in ((ax_bw, "busbw (GB/s)"), (ax_t, "time per all-reduce (us, avg over ranks)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes per rank)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    host = document.get("host", {})
    fig.suptitle(title or f"all-reduce, {document['world_size']} ranks, grid {document['grid']}, "
                          f"{host.get('nodes', '?')} host(s), {host.get('cpu_count', '?')} CPUs/host")
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)
