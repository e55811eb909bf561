"""Before Horovod starts: make every rank agree on the torus settings, or fail on every rank.

``hvd.init`` registers the torus process sets, and Horovod requires every rank to register the same sets in
the same order: a grid (or a user's process set list) that differs across ranks, e.g. because a launcher
forwarded ``HOROVOD_TORUS_GRID`` to some ranks only, leaves ranks blocked inside ``hvd.init`` or aborts
the process. So :func:`agree` exchanges each rank's settings first, without Horovod:

* under an MPI launcher (mpirun, ``horovodrun --mpi``, or a given mpi4py communicator): one
  ``allgather`` of a small dict on that communicator;
* under ``horovodrun --gloo``: the runner's rendezvous key-value store (HTTP, the address and port in
  ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``), each rank writing its settings under its rank and reading
  the others', within ``timeout`` seconds.

and raises :class:`SettingsMismatchError` on every rank, naming each rank's value of each setting that
differs. :func:`agree_on` wraps the local checks too: a rank whose own input is bad still takes part in
the exchange (it sends its error), so every rank raises and none waits for it.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

__all__ = ["agree", "agree_on", "SettingsMismatchError", "describe_mismatch"]

_attempts = {"n": 0}


class SettingsMismatchError(ValueError):
    """The ranks passed different torus settings to ``init`` (raised on every rank, before Horovod starts)."""


def describe_mismatch(per_rank: list[dict]) -> str | None:
    """None when every rank's dict is equal; else one line per differing key with every rank's value."""
    keys = sorted({k for d in per_rank for k in d})
    lines = []
    for k in keys:
        values = [d.get(k) for d in per_rank]
        if any(v != values[0] for v in values):
            lines.append(f"  {k}: " + ", ".join(f"rank {r} {v!r}" for r, v in enumerate(values)))
    return "\n".join(lines) or None


def agree(settings: dict, *, rank: int, size: int, comm=None, environ=None, timeout: float = 120.0,
          scope: str | None = None, what: str = "horovod_torus.init") -> list[dict]:
    """Exchange ``settings`` (a JSON-able dict) among all ranks; raise on every rank when they differ.

    Args:
        settings: this rank's values (e.g. grid, transport, world size, a hash of the process sets).
        rank, size: this rank and the world size as the launcher announced them.
        comm: an mpi4py communicator to exchange on (None: ``MPI.COMM_WORLD`` under an MPI launcher).
        environ: the environment (``os.environ``), for the Gloo rendezvous address.
        timeout: seconds to wait for the other ranks on the rendezvous store.
        scope: the rendezvous store's scope (under Gloo), the same on every rank; None:
            ``horovod_torus_init_<n>``, n counting this process's calls (the same on every rank of a job
            whose processes all started together; an elastic job passes its own, see
            :func:`horovod_torus.tensorflow.runtime.init`).
        what: the call named in the error message (``"horovod_torus.init"``,
            ``"horovod_torus.mpi.TorusComm.create"``).

    Returns:
        Every rank's settings, in rank order.

    Raises:
        SettingsMismatchError: the ranks differ (message: each differing setting, every rank's value).
        TimeoutError: under Gloo, some ranks did not publish their settings within ``timeout`` (named).
    """
    environ = os.environ if environ is None else environ
    _attempts["n"] += 1
    if size == 1:
        per_rank = [settings]
    elif comm is None and "HOROVOD_GLOO_RENDEZVOUS_ADDR" in environ:
        per_rank = _exchange_rendezvous(settings, rank, size, environ, timeout,
                                        scope or f"horovod_torus_init_{_attempts['n']}")
    else:
        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        per_rank = comm.allgather(settings)
    failed = {r: d["error"] for r, d in enumerate(per_rank) if isinstance(d, dict) and "error" in d}
    if failed and len(failed) < size:  # some ranks' own input is bad: say theirs, not a diff of empty settings
        errors = "\n".join(f"  rank {r}: {e}" for r, e in failed.items())
        raise SettingsMismatchError(
            f"{what}: the ranks were started with different torus settings: rank(s) {sorted(failed)} rejected "
            f"theirs, the other ranks did not:\n{errors}\n"
            f"fix the value on those ranks (a variable set on some ranks only, e.g. an MPMD launch or a "
            f"per-host environment: export the same HOROVOD_TORUS_* to every rank, e.g. mpirun -x NAME, or to "
            f"none)")
    problem = describe_mismatch(per_rank)
    if problem:
        raise SettingsMismatchError(
            f"{what}: the ranks were started with different torus settings:\n{problem}\n"
            f"pass the same grid, transport and process sets on every rank (export HOROVOD_TORUS_GRID / "
            f"HOROVOD_TORUS_TRANSPORT / HOROVOD_TORUS_* to all ranks, e.g. mpirun -x NAME, or to none)")
    return per_rank


def agree_on(build, *, rank: int, size: int, comm=None, environ=None, timeout: float = 120.0,
             scope: str | None = None, what: str = "horovod_torus.init"):
    """Run this rank's local checks, then :func:`agree`: the same outcome on every rank.

    Args:
        build: a function of no arguments returning ``(value, settings)``: the checked value to return and
            the JSON-able dict the ranks compare. A ValueError or TypeError it raises is sent to the other
            ranks in place of the dict (so they do not wait for this rank) and raised here after the
            exchange.
        rank, size, comm, environ, timeout, scope, what: as for :func:`agree`.

    Returns:
        ``value``, when every rank's checks passed with equal settings.

    Raises:
        SettingsMismatchError: the ranks' settings (or errors) differ; on every rank.
        ValueError, TypeError: ``build``'s own error, when every rank raised the same one.
    """
    local_error, value = None, None
    try:
        value, settings = build()
    except (ValueError, TypeError) as exc:
        local_error, settings = exc, {"error": f"{type(exc).__name__}: {exc}"}
    agree(settings, rank=rank, size=size, comm=comm, environ=environ, timeout=timeout, scope=scope, what=what)
    if local_error is not None:
        raise local_error
    return value


def _exchange_rendezvous(settings, rank, size, environ, timeout, scope):
    port = environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    if not port:
        raise ValueError(f"HOROVOD_GLOO_RENDEZVOUS_ADDR={environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']!r} is set but "
                         f"HOROVOD_GLOO_RENDEZVOUS_PORT is not: start the job with horovodrun (it exports both)")
    base = f"http://{environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{port}/{scope}"
    body = json.dumps(settings, sort_keys=True).encode()
    request = urllib.request.Request(f"{base}/{rank}", data=body, method="PUT")
    urllib.request.urlopen(request, timeout=10).read()
    per_rank: list = [None] * size
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        for r in range(size):
            if per_rank[r] is None:
                try:
                    with urllib.request.urlopen(f"{base}/{r}", timeout=10) as resp:
                        per_rank[r] = json.loads(resp.read())
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:
                        raise
        missing = [r for r, v in enumerate(per_rank) if v is None]
        if not missing:
            return per_rank
        if time.monotonic() > deadline:
            raise TimeoutError(f"horovod_torus.init: ranks {missing} did not start within {timeout:.0f} s "
                               f"(rendezvous {base})")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
