"""The launch command lines: one builder per launcher and one rule for the environment a launch forwards.

A pure module (no MPI, TensorFlow or Horovod import; nothing is run): every place of the project that
starts ranks (the job scripts in ``mpi_scripts/``, the multi-rank test runners, the scaling driver, the
cluster emulator, the fault tests) takes its command line from here, the shell scripts through the
command-line form ``python -m horovod_torus.launchers``.

* :func:`mpirun_command`: Open MPI's ``mpirun`` (4.1): ranks, hosts, binding, mapping, MCA parameters
  and ``-x`` for every variable of the forwarding rule that is set;
* :func:`horovodrun_command`: Horovod 0.28.1's ``horovodrun``, static or elastic (``--min-np``,
  ``--max-np``, ``--host-discovery-script``, ...); it forwards its whole environment itself, so
  variables to set go in front as ``env NAME=VALUE``;
* :func:`launcher_command`: either of them by name, with ``local=True`` for every rank on this machine;
* :func:`forwarded_env`: the forwarding rule (:data:`FORWARDED_NAMES` and :data:`FORWARDED_PREFIXES`).

Example::

    >>> mpirun_command(4, ["python", "-m", "keras_app.train"], hosts="n1:2,n2:2", allow_run_as_root=False,
    ...                environ={"PATH": "/bin", "HOROVOD_TORUS_GRID": "2x2", "HOME": "/root"})
    ['mpirun', '--bind-to', 'none', '-np', '4', '-H', 'n1:2,n2:2', '-x', 'PATH', '-x', 'HOROVOD_TORUS_GRID', \
'python', '-m', 'keras_app.train']
    >>> horovodrun_command(4, ["python", "train.py"], min_np=2, max_np=8, host_discovery_script="./hosts.sh")
    ['horovodrun', '--gloo', '--disable-cache', '-np', '4', '--host-discovery-script', './hosts.sh', \
'--min-np', '2', '--max-np', '8', 'python', 'train.py']

Command line (prints the command, shell-quoted on one line, or NUL-separated with ``--print0``)::

    python -m horovod_torus.launchers mpirun --np 4 --local -x HOROVOD_TORUS_GRID=2x2 -- python -m x
    python -m horovod_torus.launchers horovodrun --np 4 --hosts n1:2,n2:2 -- python train.py

See ``docs/launchers.md``.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex
import sys
from collections.abc import Iterable, Mapping

__all__ = ["LAUNCHERS", "FORWARDED_NAMES", "FORWARDED_PREFIXES", "forwarded_env", "mpirun_command",
           "horovodrun_command", "launcher_command", "main"]

#: The launchers this module builds command lines for.
LAUNCHERS = ("mpirun", "horovodrun")

#: Variables every ``mpirun`` launch forwards with ``-x`` when they are set (even to an empty value: an
#: empty ``CUDA_VISIBLE_DEVICES`` means no GPU): the search paths, the interpreter and Python's own
#: switches, the GPUs a rank may see.
FORWARDED_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHON", "VIRTUAL_ENV", "PYTHONWARNINGS",
                   "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES")

#: ... and every set variable whose name starts with one of these: Horovod's and this package's
#: (``HOROVOD_TORUS_*``), TensorFlow's, NCCL's, UCX's and OpenMP's. Open MPI's own ``OMPI_*`` variables
#: (``OMPI_MCA_*`` included) are not listed: ``mpirun`` reads them and passes them to every rank itself.
FORWARDED_PREFIXES = ("HOROVOD_", "TF_", "NCCL_", "UCX_", "OMP_")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HOST = re.compile(r"[\w.-]+:([0-9]+)\Z")   # Horovod's HOST:SLOTS (horovod/runner/common/util/hosts.py)


def forwarded_env(environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> list[str]:
    """The names of the variables a launch forwards: those of :data:`FORWARDED_NAMES`, then those with a
    prefix of :data:`FORWARDED_PREFIXES` (sorted), then ``extra``, each once and only when set in
    ``environ``.

    Args:
        environ: the environment the launcher will run in (default ``os.environ``).
        extra: more variable names to forward when set (e.g. a test harness' own).

    Raises:
        ValueError: a name of ``extra`` that is not a variable name (``NAME=VALUE`` goes in ``env``).
    """
    environ = os.environ if environ is None else environ
    extra = list(extra)
    for name in extra:
        _check_name(name, "env_names")
    names = [*FORWARDED_NAMES, *sorted(k for k in environ if k.startswith(FORWARDED_PREFIXES)), *extra]
    return [n for n in dict.fromkeys(names) if n in environ]


def mpirun_command(np: int, program: list[str], *, hosts: str | os.PathLike | None = None,
                   env_names: Iterable[str] = (), env: Mapping[str, str] | Iterable[str] | None = None,
                   oversubscribe: bool = False, bind_to: str | None = "none", map_by: str | None = None,
                   mca: Iterable[tuple[object, object]] = (), allow_run_as_root: bool | None = None,
                   environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> list[str]:
    """``mpirun [--allow-run-as-root] [--oversubscribe] [--bind-to B] -np N [-H H | --hostfile F]
    [--map-by M] [--mca K V]... [-x NAME=VALUE]... [-x NAME]... [EXTRA...] PROGRAM...`` as a list.

    Args:
        np: ranks to start (``-np``), >= 1.
        program: the command every rank runs (argv list, e.g. ``["python", "-m", "keras_app.train"]``).
        hosts: None (the scheduler's allocation, else this machine); a host list ``"h1:4,h2:4"`` (``-H``,
            every host with its slots); or a hostfile path (``--hostfile``: any ``os.PathLike``, or a string
            without ``:``).
        env_names: more variables to forward (``-x NAME``) when set in ``environ``, besides
            :func:`forwarded_env`'s rule.
        env: variables to set on every rank (``-x NAME=VALUE``): a mapping or ``"NAME=VALUE"`` strings; a
            name set here is not forwarded from ``environ`` as well.
        oversubscribe: ``--oversubscribe`` (more ranks than slots or cores, e.g. every rank on this machine).
        bind_to: ``--bind-to`` (``"none"``, ``"core"``, ...); None or ``""``: no flag (Open MPI's default).
        map_by: ``--map-by`` (e.g. ``"ppr:4:node:PE=8"``), or None.
        mca: ``(name, value)`` pairs, each ``--mca name value``.
        allow_run_as_root: ``--allow-run-as-root``; None: when this process runs as root (euid 0).
        environ: the environment ``mpirun`` will run in, where the forwarded names are looked up
            (default ``os.environ``).
        extra: more ``mpirun`` options, placed before the program (e.g. ``["--report-bindings"]``).

    Raises:
        ValueError: ``np`` < 1 or not an integer; a bad ``hosts`` string; a bad name in ``env`` or
            ``env_names``; an empty ``program``.
        TypeError: ``program`` is one string instead of a list of words.
    """
    np = _check_np(np)
    program = _check_program(program)
    pairs = _env_pairs(env)
    if allow_run_as_root is None:
        allow_run_as_root = getattr(os, "geteuid", lambda: -1)() == 0
    argv = ["mpirun"]
    if allow_run_as_root:
        argv.append("--allow-run-as-root")
    if oversubscribe:
        argv.append("--oversubscribe")
    if bind_to:
        argv += ["--bind-to", str(bind_to)]
    argv += ["-np", str(np)]
    kind, where = _hosts(hosts)
    if kind:
        argv += ["-H" if kind == "list" else "--hostfile", where]
    if map_by:
        argv += ["--map-by", str(map_by)]
    for name, value in mca:
        argv += ["--mca", str(name), str(value)]
    for name, value in pairs:
        argv += ["-x", f"{name}={value}"]
    set_here = {name for name, _ in pairs}
    for name in forwarded_env(environ, env_names):
        if name not in set_here:
            argv += ["-x", name]
    return argv + [str(e) for e in extra] + program


def horovodrun_command(np: int, program: list[str], *, hosts: str | os.PathLike | None = None,
                       gloo: bool | None = True, disable_cache: bool = True, min_np: int | None = None,
                       max_np: int | None = None, slots_per_host: int | None = None,
                       host_discovery_script: str | None = None, elastic_timeout: int | None = None,
                       reset_limit: int | None = None, start_timeout: int | None = None,
                       network_interfaces: str | Iterable[str] | None = None,
                       env: Mapping[str, str] | Iterable[str] | None = None,
                       extra: Iterable[str] = ()) -> list[str]:
    """``[env NAME=VALUE...] horovodrun [--gloo | --mpi] [--disable-cache] -np N [-H H | --hostfile F |
    --host-discovery-script S] [--slots-per-host K] [--min-np A] [--max-np B] [--elastic-timeout T]
    [--reset-limit R] [--network-interfaces I] [--start-timeout T] [EXTRA...] PROGRAM...`` as a list.

    ``horovodrun`` passes its whole environment on to the ranks (there is no ``-x``). A launch is elastic
    (Horovod's rule) when ``min_np`` or ``host_discovery_script`` is given.

    Args:
        np: ranks to start (``-np``), >= 1; in an elastic launch within ``min_np`` .. ``max_np``.
        program: the command every rank runs (argv list).
        hosts: None (Horovod's default: ``localhost:NP``, or the hosts the discovery script prints); a host
            list ``"h1:4,h2:4"`` (``-H``); or a hostfile path (``--hostfile``, as for :func:`mpirun_command`).
        gloo: True ``--gloo`` (Horovod's Gloo controller), False ``--mpi`` (Horovod runs ``mpirun``), None
            no flag (Horovod picks: MPI when it was built with it).
        disable_cache: ``--disable-cache`` (run horovodrun's start-up checks every time).
        min_np: ``--min-np``: elastic; the fewest ranks the job continues with (>= 1).
        max_np: ``--max-np``: the most ranks an elastic job grows to (>= ``min_np``).
        slots_per_host: ``--slots-per-host``: slots of a discovered host that prints none.
        host_discovery_script: ``--host-discovery-script``: elastic; an executable printing ``host[:slots]``
            lines (instead of ``hosts``).
        elastic_timeout: ``--elastic-timeout`` seconds (> 0) to wait for ``min_np`` ranks after a change.
        reset_limit: ``--reset-limit``: how often (>= 0) an elastic job may change size before it fails.
        start_timeout: ``--start-timeout`` seconds (> 0) for horovodrun's checks and the ranks' start.
        network_interfaces: ``--network-interfaces``: a NIC name, ``"eth0,eth1"`` or a list of names.
        env: variables to set for horovodrun and so for every rank (``env NAME=VALUE`` in front): a mapping
            or ``"NAME=VALUE"`` strings.
        extra: more ``horovodrun`` options, placed before the program.

    Raises:
        ValueError: ``np`` < 1 or not an integer; ``min_np`` > ``max_np``, or ``np`` outside them; a count
            or timeout out of range; ``max_np``, ``slots_per_host``, ``elastic_timeout`` or
            ``reset_limit`` without an elastic launch; an elastic launch with ``gloo=False`` (Horovod runs
            elastic jobs on Gloo only) or on one fixed host; ``hosts`` together with
            ``host_discovery_script``; a bad ``hosts`` string; a bad name in ``env``; an empty ``program``.
        TypeError: ``program`` is one string instead of a list of words.
    """
    np = _check_np(np)
    program = _check_program(program)
    pairs = _env_pairs(env)
    kind, where = _hosts(hosts)
    elastic = min_np is not None or host_discovery_script is not None
    _check_elastic(np, kind, where, elastic, gloo, min_np, max_np, slots_per_host, host_discovery_script,
                   elastic_timeout, reset_limit)
    if start_timeout is not None:
        _check_count(start_timeout, "start_timeout", 1, "seconds")
    argv = ["env", *(f"{name}={value}" for name, value in pairs)] if pairs else []
    argv.append("horovodrun")
    if gloo is not None:
        argv.append("--gloo" if gloo else "--mpi")
    if disable_cache:
        argv.append("--disable-cache")
    argv += ["-np", str(np)]
    if kind:
        argv += ["-H" if kind == "list" else "--hostfile", where]
    for flag, value in (("--host-discovery-script", host_discovery_script), ("--slots-per-host", slots_per_host),
                        ("--min-np", min_np), ("--max-np", max_np), ("--elastic-timeout", elastic_timeout),
                        ("--reset-limit", reset_limit), ("--network-interfaces", _nics(network_interfaces)),
                        ("--start-timeout", start_timeout)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + [str(e) for e in extra] + program


def launcher_command(launcher: str, np: int, program: list[str], *, local: bool = False,
                     env: Mapping[str, str] | Iterable[str] | None = None, env_names: Iterable[str] = (),
                     environ: Mapping[str, str] | None = None, **options) -> list[str]:
    """The command line of ``launcher`` (``"mpirun"`` or ``"horovodrun"``): :func:`mpirun_command` or
    :func:`horovodrun_command` with ``options`` (their keyword arguments).

    Args:
        launcher: one of :data:`LAUNCHERS`.
        np, program, env: as for both builders.
        local: every rank on this machine: ``mpirun --oversubscribe`` (more ranks than cores may run),
            ``horovodrun -H localhost:NP``; ``options`` given explicitly win.
        env_names, environ: as for :func:`mpirun_command`; nothing to do for horovodrun, which forwards its
            whole environment.

    Raises:
        ValueError: an unknown ``launcher``; and whatever the builder raises.
    """
    if launcher == "mpirun":
        if local:
            options.setdefault("oversubscribe", True)
        return mpirun_command(np, program, env=env, env_names=env_names, environ=environ, **options)
    if launcher == "horovodrun":
        if local:
            options.setdefault("hosts", f"localhost:{_check_np(np)}")
        return horovodrun_command(np, program, env=env, **options)
    raise ValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")


# ---------------------------------------------------------------------------------------------- checks
def _check_count(value, what: str, least: int, unit: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{what}={value!r} must be an integer >= {least}{' ' + unit if unit else ''}")
    return value


def _check_np(np) -> int:
    if isinstance(np, bool) or not isinstance(np, int) or np < 1:
        raise ValueError(f"np={np!r}: the number of ranks to start must be an integer >= 1 (e.g. np=4)")
    return np


def _check_program(program) -> list[str]:
    if isinstance(program, (str, bytes)):
        raise TypeError(f"program {program!r} must be a list of words (argv), not one string: "
                        f"shlex.split() it first")
    program = [str(w) for w in program]
    if not program:
        raise ValueError("no program to launch: give the command every rank runs, e.g. "
                         "['python', '-m', 'keras_app.train']")
    return program


def _check_name(name, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what}: {name!r} is not an environment variable name (letters, digits, _; "
                         f"to set a value use env={{'NAME': 'VALUE'}} or 'NAME=VALUE')")
    return name


def _env_pairs(env) -> list[tuple[str, str]]:
    """[(name, value)] of a mapping or of ``"NAME=VALUE"`` strings (None: none)."""
    if env is None:
        return []
    if isinstance(env, Mapping):
        return [(_check_name(name, "env"), str(value)) for name, value in env.items()]
    pairs = []
    for pair in [env] if isinstance(env, str) else env:
        if not isinstance(pair, str) or "=" not in pair:
            raise ValueError(f"env: {pair!r} is not NAME=VALUE (e.g. 'HOROVOD_TORUS_GRID=2x2')")
        name, value = pair.split("=", 1)
        pairs.append((_check_name(name, "env"), value))
    return pairs


def _hosts(hosts) -> tuple[str | None, str | None]:
    """("list", "h1:4,h2:4") for a host list, ("file", path) for a hostfile, (None, None) for None."""
    if hosts is None:
        return None, None
    if isinstance(hosts, os.PathLike):
        return "file", os.fspath(hosts)
    if not isinstance(hosts, str) or not hosts.strip():
        raise ValueError(f"hosts={hosts!r}: give a host list such as 'h1:4,h2:4', a hostfile path, or None")
    if ":" not in hosts:
        return "file", hosts
    for item in hosts.split(","):
        m = _HOST.match(item)
        if not m or int(m.group(1)) < 1:
            raise ValueError(f"hosts={hosts!r}: {item!r} is not HOST:SLOTS with SLOTS >= 1 (e.g. 'h1:4,h2:4'; "
                             f"a hostfile whose path has a ':' goes in as a pathlib.Path)")
    return "list", hosts


def _nics(network_interfaces) -> str | None:
    if network_interfaces is None or isinstance(network_interfaces, str):
        return network_interfaces or None
    return ",".join(network_interfaces) or None


def _check_elastic(np, kind, where, elastic, gloo, min_np, max_np, slots_per_host, script, elastic_timeout,
                   reset_limit) -> None:
    for what, value, least in (("min_np", min_np, 1), ("max_np", max_np, 1), ("slots_per_host", slots_per_host, 1),
                               ("elastic_timeout", elastic_timeout, 1), ("reset_limit", reset_limit, 0)):
        if value is not None:
            _check_count(value, what, least)
    if kind and script is not None:
        raise ValueError(f"hosts={where!r} and host_discovery_script={script!r}: give one of them (the script "
                         f"names the hosts of an elastic job)")
    if not elastic:
        given = [f"{what}={value!r}" for what, value in (("max_np", max_np), ("slots_per_host", slots_per_host),
                                                         ("elastic_timeout", elastic_timeout),
                                                         ("reset_limit", reset_limit)) if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: elastic options, but the launch is not elastic: give min_np "
                             f"or host_discovery_script too")
        return
    if slots_per_host is not None and script is None:
        raise ValueError(f"slots_per_host={slots_per_host!r} applies to discovered hosts: give "
                         f"host_discovery_script, or the slots in hosts ('h1:4,h2:4')")
    if gloo is False:
        raise ValueError("an elastic launch (min_np or host_discovery_script) runs on Gloo only: use gloo=True "
                         "(or None)")
    if min_np is not None and max_np is not None and min_np > max_np:
        raise ValueError(f"min_np={min_np} > max_np={max_np}: the fewest ranks must not exceed the most")
    if min_np is not None and np < min_np or max_np is not None and np > max_np:
        raise ValueError(f"np={np} is outside min_np={min_np} .. max_np={max_np}: start within them")
    if script is None and kind != "file" and (where is None or len(where.split(",")) < 2):
        raise ValueError(f"an elastic launch on fixed hosts needs at least 2 of them (Horovod's rule), got "
                         f"hosts={where!r}: list them ('h1:4,h2:4') or give host_discovery_script")


# ------------------------------------------------------------------------------------------ command line
def _launching_environ() -> dict[str, str]:
    """The environment of whoever ran this command: ``os.environ`` without the third-party defaults that
    importing ``horovod_torus`` set in this process (``-x NAME`` of a variable ``mpirun`` does not see
    would make it warn)."""
    import horovod_torus

    return {k: v for k, v in os.environ.items() if k not in getattr(horovod_torus, "_SET_AT_IMPORT", ())}


def build_parser() -> argparse.ArgumentParser:
    from horovod_torus import __version__

    p = argparse.ArgumentParser(
        prog="python -m horovod_torus.launchers",
        description="Print the mpirun / horovodrun command line that horovod_torus.launchers builds "
                    "(shell-quoted on one line, or NUL-separated with --print0). Usage: "
                    "python -m horovod_torus.launchers mpirun|horovodrun [options] -- PROGRAM [ARGS...]")
    p.add_argument("--version", action="version", version=f"python -m horovod_torus.launchers {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--np", type=int, required=True, help="ranks to start")
    common.add_argument("--local", action="store_true",
                        help="every rank on this machine (mpirun: --oversubscribe; horovodrun: -H localhost:NP)")
    where = common.add_mutually_exclusive_group()
    where.add_argument("--hosts", default=None, help="host list h1:4,h2:4 (-H), or a hostfile path")
    where.add_argument("--hostfile", type=pathlib.Path, default=None, help="Open MPI / Horovod hostfile")
    common.add_argument("-x", dest="x", action="append", default=[], metavar="NAME[=VALUE]",
                        help="NAME=VALUE: set it on every rank; NAME: forward it when set (mpirun; horovodrun "
                             "forwards its whole environment) (repeatable)")
    common.add_argument("--extra", action="append", default=[], metavar="WORDS",
                        help="more launcher options, one shell-quoted string (--extra=\"$MPI_EXTRA\"; repeatable)")
    common.add_argument("--print0", action="store_true", help="NUL-separated words (for mapfile -d '')")
    sub = p.add_subparsers(dest="launcher", required=True)
    m = sub.add_parser("mpirun", parents=[common], help="Open MPI's mpirun")
    m.add_argument("--oversubscribe", action="store_true", default=None, help="--oversubscribe")
    m.add_argument("--bind-to", default="none", help="--bind-to (none); empty: no flag")
    m.add_argument("--map-by", default=None, help="--map-by, e.g. ppr:4:node:PE=8")
    m.add_argument("--mca", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="an MCA parameter (repeatable)")
    m.add_argument("--allow-run-as-root", action=argparse.BooleanOptionalAction, default=None,
                   help="--allow-run-as-root (default: when running as root)")
    h = sub.add_parser("horovodrun", parents=[common], help="Horovod's horovodrun")
    h.add_argument("--mpi", dest="gloo", action="store_false", default=True,
                   help="Horovod's MPI controller (default: --gloo)")
    h.add_argument("--disable-cache", action=argparse.BooleanOptionalAction, default=True,
                   help="--disable-cache (default: on)")
    for flag in ("--min-np", "--max-np", "--slots-per-host", "--elastic-timeout", "--reset-limit"):
        h.add_argument(flag, type=int, default=None, help="elastic (with --min-np or --host-discovery-script)")
    h.add_argument("--start-timeout", type=int, default=None, help="seconds for horovodrun's checks and start")
    h.add_argument("--host-discovery-script", default=None, help="elastic: a script printing host[:slots] lines")
    h.add_argument("--network-interfaces", default=None, help="NICs for horovodrun, e.g. eth0,eth1")
    return p


def command_from_args(args, program: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The command line of parsed CLI options ``args`` (see :func:`build_parser`) and ``program``."""
    env = [x for x in args.x if "=" in x]
    options = {"hosts": args.hostfile if args.hostfile is not None else args.hosts,
               "extra": [w for words in args.extra for w in shlex.split(words)]}
    if args.launcher == "mpirun":
        options.update(bind_to=args.bind_to, map_by=args.map_by, mca=[tuple(kv) for kv in args.mca],
                       allow_run_as_root=args.allow_run_as_root)
        if args.oversubscribe is not None:
            options["oversubscribe"] = args.oversubscribe
    else:
        options.update({k: getattr(args, k) for k in (
            "gloo", "disable_cache", "min_np", "max_np", "slots_per_host", "elastic_timeout", "reset_limit",
            "start_timeout", "host_discovery_script", "network_interfaces")})
    if options["hosts"] is None:
        del options["hosts"]  # --local may set it
    return launcher_command(args.launcher, args.np, program, local=args.local, env=env,
                            env_names=[x for x in args.x if "=" not in x], environ=environ, **options)


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """``python -m horovod_torus.launchers LAUNCHER [options] -- PROGRAM [ARGS...]``: print the command.

    ``environ``: where forwarded names are looked up (default: this process's environment as its parent
    passed it). Exits 2 with a message on bad options."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if "--" not in argv:
        _, rest = parser.parse_known_args(argv)  # --help / --version first
        got = f" (not {shlex.join(rest)})" if rest else ""
        parser.error(f"give the program after --: ... -- PROGRAM [ARGS...]{got}")
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    try:
        words = command_from_args(args, argv[cut + 1:], _launching_environ() if environ is None else environ)
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    sys.stdout.write("".join(w + "\0" for w in words) if args.print0 else shlex.join(words) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
