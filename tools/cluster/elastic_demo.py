"""``python -m tools.cluster.elastic_demo``: the elastic torus on an emulated 2-node cluster (root).

2 nodes x 2 ranks (``node0``, ``node1``, one NIC each) run ``keras_app.train --elastic true`` (the tiny
model on Fashion-MNIST) under ``horovodrun --gloo --min-np 2 --max-np 4 --host-discovery-script``, on a
2x2 grid. Mid-epoch the node without rank 0 is removed (the discovery script stops listing it, its two
ranks are SIGKILLed); the job continues on the other node's 2 ranks (grid 2x1); then it is listed again and, after
Horovod's blacklist cooldown, the job grows back to 4 ranks (2x2). Output in ``--out``: the run
(``summary.json`` with its ``world_changes``, ``elastic/progress.jsonl``), ``launcher.log`` and
``elastic.png`` (the loss and the world size over time). ``make elastic-demo`` runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from horovod_torus.atomic import write_text_atomic
from horovod_torus.launchers import horovodrun_command
from keras_app.elastic import records
from tools.cluster import net
from tools.cluster.layout import ClusterSpec

__all__ = ["main", "plot_elastic"]


def _log(msg):
    print(f"[elastic-demo] {msg}", file=sys.stderr, flush=True)


def _progress(out):
    lines = records(out, "progress")
    return lines[-1] if lines else {"step": -1, "changes": -1}


def _write_hosts(path, hosts, slots):
    write_text_atomic(path, "".join(f"{h}:{slots}\n" for h in hosts))   # the driver polls it


def plot_elastic(out: str, path: str) -> None:
    """Two panels from ``out/elastic/progress.jsonl``: the running training loss and the world size, both
    over seconds since the start, with the world changes of ``out/summary.json`` marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from horovod_torus.atomic import save_figure_atomic

    rows = records(out, "progress")
    with open(os.path.join(out, "summary.json")) as fh:
        changes = json.load(fh)["world_changes"]
    t = [r["time"] for r in rows]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    a.plot(t, [r["loss"] for r in rows], ".-")
    a.set(ylabel="training loss (epoch's running mean)",
          title="elastic torus: 2 nodes x 2 ranks, one node removed and back")
    b.step(t, [r["size"] for r in rows], where="post")
    b.set(xlabel="seconds since start", ylabel="ranks", yticks=[0, 1, 2, 3, 4], ylim=(0, 4.5))
    for c in changes:
        for ax in (a, b):
            ax.axvline(c["time"], color="tab:red", ls="--", lw=0.8)
        b.annotate(f"{c['old_grid']} -> {c['new_grid']}", (c["time"], 0.3), rotation=90, fontsize=8)
    save_figure_atomic(fig, path)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.cluster.elastic_demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/elastic_demo", help="output folder (runs/elastic_demo)")
    p.add_argument("--name", default="htel", help="cluster name (htel)")
    p.add_argument("--train-examples", type=int, default=16384, help="images per epoch (16384)")
    p.add_argument("--epochs", type=int, default=3, help="epochs (3)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds for the whole job (1200)")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    spec = ClusterSpec(nodes=2, ranks_per_node=2, wiring="node", rate_mbit=None, name=args.name)
    hosts = os.path.join(out, "hosts.txt")
    script = os.path.join(out, "discover.sh")
    _write_hosts(hosts, spec.hostnames, spec.ranks_per_node)
    with open(script, "w") as fh:
        fh.write(f"#!/bin/sh\ncat {hosts}\n")
    os.chmod(script, 0o755)
    steps_per_epoch = args.train_examples // 128
    app = [sys.executable, "-m", "keras_app.train", "--elastic", "true", "--preset", "fashion_mnist_quick",
           "--train-examples", str(args.train_examples), "--batch-schedule", "0:128", "--epochs", str(args.epochs),
           "--commit-every", "4", "--output-dir", os.path.join(out, "run"), "--verbose", "0"]
    run_out = os.path.join(out, "run")
    for stale in ("progress.jsonl", "ranks.jsonl"):
        if os.path.exists(os.path.join(run_out, "elastic", stale)):
            os.remove(os.path.join(run_out, "elastic", stale))
    rc = {}
    with net.cluster(spec, log=_log) as files:
        argv = horovodrun_command(4, [files.bindnic, *app], min_np=2, max_np=4, host_discovery_script=script,
                                  network_interfaces=spec.nic_name(0), start_timeout=120,
                                  extra=["--blacklist-cooldown-range", "1", "3"])
        log = open(os.path.join(out, "launcher.log"), "w")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONWARNINGS="ignore")
        env.pop("HOROVOD_TORUS_GRID", None)
        runner = threading.Thread(target=lambda: rc.update(
            code=net.launch(spec, files, argv, timeout=args.timeout, env=env, log=_log, stdout=log)), daemon=True)
        runner.start()

        def wait(until, what):
            deadline = time.monotonic() + args.timeout
            while not until():
                if not runner.is_alive():
                    raise SystemExit(f"elastic-demo: the job ended (exit {rc.get('code')}) before {what}; "
                                     f"see {out}/launcher.log")
                if time.monotonic() > deadline:
                    raise SystemExit(f"elastic-demo: no {what} within {args.timeout:.0f} s")
                time.sleep(0.5)

        wait(lambda: _progress(run_out)["step"] >= steps_per_epoch // 3, "a third of epoch 1 on 4 ranks")
        # the node that does not hold rank 0 (Horovod may put rank 0 on either node; losing rank 0's node
        # is not what this demonstrates: docs/guide/elastic.md, what is not supported)
        first = records(run_out, "ranks")[:4]
        kept = next(r["host"] for r in first if r["rank"] == 0)
        lost = next(h for h in spec.hostnames if h != kept)
        victims = [r["pid"] for r in first if r["host"] == lost]
        _log(f"removing {lost}: discovery lists {kept} only; SIGKILL ranks {victims}")
        _write_hosts(hosts, [kept], spec.ranks_per_node)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        wait(lambda: _progress(run_out)["changes"] == 1 and _progress(run_out)["step"] >= steps_per_epoch * 4 // 3,
             "a third of an epoch on 2 ranks")
        _log(f"{lost} is back in the discovery script")
        _write_hosts(hosts, spec.hostnames, spec.ranks_per_node)
        runner.join()
        log.close()
    if rc.get("code") != 0:
        _log(f"horovodrun exit {rc.get('code')}: see {out}/launcher.log")
        return 1
    plot_elastic(run_out, os.path.join(out, "elastic.png"))
    with open(os.path.join(run_out, "summary.json")) as fh:
        s = json.load(fh)
    for c in s["world_changes"]:
        print(f"elastic-demo: at {c['time']:.0f} s, step {c['step']}: {c['old_size']} ranks ({c['old_grid']}) -> "
              f"{c['new_size']} ranks ({c['new_grid']})")
    print(f"elastic-demo: final val top-1 {s['final']['val_top1']:.4f} on {s['world_size']} ranks ({s['grid']}); "
          f"plot {out}/elastic.png, summary {run_out}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
