"""``python -m tools.cluster``: a cluster in a box (emulated nodes and rails on one machine; root).

Examples::

    python -m tools.cluster up --nodes 4 --ranks-per-node 2 --wiring rails --rate 200mbit
    python -m tools.cluster run -- python -m horovod_torus.bench -b 1M -e 64M --grid 2x4
    python -m tools.cluster run --launcher horovodrun -- python -m horovod_torus.bench --strategies torus ring
    python -m tools.cluster exec node1 -- ip -br addr    # any command on one emulated node
    python -m tools.cluster down
    # one shot: up, run, down (also on failure or Ctrl-C)
    python -m tools.cluster run --nodes 2 --ranks-per-node 2 --wiring rails -- python my_job.py

See :mod:`tools.cluster` for the layout.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

from tools.cluster.launch import LAUNCHERS, horovodrun_argv, mpirun_argv
from tools.cluster.layout import WIRINGS, ClusterSpec, parse_rate
from tools.cluster import net

__all__ = ["main", "build_parser", "spec_from_args", "launcher_argv"]


def _log(msg):
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


def _add_spec_args(p, required):
    p.add_argument("--nodes", type=int, required=required, help="emulated nodes N")
    p.add_argument("--ranks-per-node", type=int, default=2, help="ranks (slots) per node L (2)")
    p.add_argument("--wiring", choices=WIRINGS, default="node",
                   help="node: one NIC per node; rails: one NIC per rank, NIC k of every node on rail k (node)")
    p.add_argument("--rate", default="none", help="every NIC's rate per direction: 200mbit, 1gbit, none (none)")
    p.add_argument("--subnet", default="10.213.0.0/16", help="private /16 of the cluster (10.213.0.0/16)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.cluster",
                                description="Emulate a cluster on this machine with network namespaces (root).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--name", default="htc", help="cluster name, prefixes its namespaces (htc)")
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", parents=[common], help="create the nodes, NICs, bridges and shaping")
    _add_spec_args(u, required=True)
    r = sub.add_parser("run", parents=[common], help="launch a command on every rank (mpirun or horovodrun --gloo)")
    _add_spec_args(r, required=False)
    r.add_argument("--launcher", choices=LAUNCHERS, default="mpirun", help="mpirun (default) or horovodrun (Gloo)")
    r.add_argument("-np", "--np", type=int, default=None, help="ranks (default: all slots; node0 fills first)")
    r.add_argument("--mca", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="an Open MPI MCA parameter for mpirun (repeatable)")
    r.add_argument("-x", dest="env", action="append", default=[], metavar="VAR",
                   help="forward one more environment variable through mpirun (repeatable)")
    r.add_argument("--timeout", type=float, default=None, help="seconds before the launch is ended")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- command and its arguments")
    e = sub.add_parser("exec", parents=[common], help="run a plain command inside one node (its namespace and hostname)")
    e.add_argument("node", help="node0, node1, ...")
    e.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("down", parents=[common], help="remove the cluster: processes, namespaces, links, files")
    sub.add_parser("status", parents=[common], help="say whether the cluster is up, and its layout")
    return p


def spec_from_args(args) -> ClusterSpec:
    """The ClusterSpec of the up/run flags. Raises ValueError naming the bad value."""
    return ClusterSpec(nodes=args.nodes, ranks_per_node=args.ranks_per_node, wiring=args.wiring,
                       rate_mbit=parse_rate(args.rate), name=args.name, subnet=args.subnet)


def _command(words):
    return words[1:] if words and words[0] == "--" else words


def launcher_argv(spec, files, args) -> list[str]:
    command = _command(args.command)
    if args.launcher == "mpirun":
        return mpirun_argv(spec, files, command, np=args.np, mca=args.mca, env_names=args.env)
    if args.mca or args.env:
        raise ValueError("--mca and -x are mpirun options: horovodrun forwards the whole environment")
    return horovodrun_argv(spec, files, command, np=args.np)


def _run(args) -> int:
    if args.nodes is not None:  # one shot: a cluster for this command only
        spec = spec_from_args(args)
        with net.cluster(spec, log=_log) as files:
            return net.launch(spec, files, launcher_argv(spec, files, args), timeout=args.timeout, log=_log)
    spec, files = net.load(args.name)
    return net.launch(spec, files, launcher_argv(spec, files, args), timeout=args.timeout, log=_log)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    net.interrupt_on_sigterm()
    try:
        if args.cmd == "up":
            spec = spec_from_args(args)
            files = net.up(spec, log=_log)
            print(f"cluster {spec.name} is up: hosts {' '.join(spec.hostnames)}; planner description "
                  f"{files.description}; run `python -m tools.cluster down --name {spec.name}` to remove it")
            return 0
        if args.cmd == "run":
            return _run(args)
        if args.cmd == "exec":
            spec, files = net.load(args.name)
            if args.node not in spec.hostnames:
                raise ValueError(f"node {args.node!r} is not one of {', '.join(spec.hostnames)}")
            node = spec.hostnames.index(args.node)
            command = _command(args.command)
            if len(command) == 1:  # one word: a shell command line, as ssh takes it
                command = ["bash", "-c", command[0]]
            return net.launch(spec, files, command or ["bash", "-i"], node=node, log=_log)
        if args.cmd == "down":
            removed = net.down(args.name, log=_log)
            print(f"cluster {args.name}: " + (f"removed {' '.join(removed)}" if removed else "nothing to remove"))
            return 0
        if args.cmd == "status":
            if not net.is_up(args.name):
                print(f"cluster {args.name}: down")
                return 1
            with contextlib.suppress(net.ClusterError):
                spec, files = net.load(args.name)
                print(f"cluster {args.name}: up, {spec.nodes} nodes x {spec.ranks_per_node} ranks, {spec.wiring} "
                      f"wiring, " + (f"{spec.rate_mbit:g} Mbit/s" if spec.rate_mbit else "unshaped")
                      + f"; files {files.dir}")
                return 0
            print(f"cluster {args.name}: namespaces {' '.join(net.namespaces_of(args.name))} exist but its files are "
                  f"gone: run down")
            return 1
    except (ValueError, net.ClusterError) as e:
        print(f"tools.cluster: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tools.cluster: interrupted", file=sys.stderr)
        return 130
    raise AssertionError(args.cmd)


if __name__ == "__main__":
    sys.exit(main())
