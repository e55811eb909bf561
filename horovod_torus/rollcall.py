"""The stall roll call outside Horovod: which ranks wait in a stalled call, and the verdict they share.

Used by the Horovod transport's deadline (:mod:`horovod_torus.tensorflow.guard`): when a torus call has
waited past its deadline inside a Horovod op, Horovod cannot be asked who is missing, so the waiting ranks
ask each other over a second channel:

* :class:`MPIChannel` (Horovod's MPI controller: mpirun, ``horovodrun --mpi``): a private duplicate
  communicator; non-blocking object sends, probed, never waited for;
* :class:`StoreChannel` (``horovodrun --gloo``, no MPI world): the runner's rendezvous key-value store
  (HTTP, ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``), the channel :mod:`horovod_torus.agreement` uses.

Both offer the same three steps: :meth:`announce` (this rank waits in call ``c``), :meth:`arrivals` (the
ranks that announced ``c`` within some seconds: the others did not make the call) and
:meth:`publish_verdict` / :meth:`verdict` (the outcome one waiting rank decided, for the ranks whose
Horovod op ended before their own deadline, and for the rank that left); and :meth:`publish_note` /
:meth:`note`: why a rank left the torus (the callback that stopped its training). Cost: only after a deadline
has passed; per waiting rank O(N) messages or requests (N ranks), nothing on the data path.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

__all__ = ["MPIChannel", "StoreChannel", "channel_for"]

_POLL_SECONDS = 0.05


class MPIChannel:
    """The roll call over ``comm`` (a private duplicate communicator; its ranks are the torus ranks).

    Args:
        comm: mpi4py intra-communicator used for nothing else.
        tag: first of the two tags it uses (announce, verdict).
    """

    def __init__(self, comm, tag: int = 75):
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self._tags = {"announce": tag, "verdict": tag + 1, "note": tag + 2}
        self._verdicts: list[dict] = []
        self._notes: dict[int, str] = {}

    def _send_all(self, kind: str, obj, to=None) -> None:
        for r in (range(self.size) if to is None else to):
            if r != self.rank:
                self.comm.isend(obj, dest=r, tag=self._tags[kind])  # never waited for: buffered by MPI

    def _drain(self, kind: str) -> list:
        from mpi4py import MPI

        got, status = [], MPI.Status()
        while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=self._tags[kind], status=status):
            got.append((status.Get_source(), self.comm.recv(source=status.Get_source(), tag=self._tags[kind])))
        return got

    def announce(self, call: int) -> None:
        """Tell every other rank that this one waits in ``call``."""
        self._send_all("announce", int(call))

    def arrivals(self, call: int, seconds: float) -> set[int]:
        """The ranks (this one included) that announced ``call`` within ``seconds``."""
        arrived, until = {self.rank}, time.monotonic() + seconds
        while len(arrived) < self.size and time.monotonic() < until:
            arrived.update(src for src, c in self._drain("announce") if c == call)
            time.sleep(_POLL_SECONDS)
        return arrived

    def publish_verdict(self, verdict: dict) -> None:
        """Send ``verdict`` (a small dict) to every other rank."""
        self._verdicts.append(verdict)
        self._send_all("verdict", verdict)

    def verdict(self, seconds: float = 0.0) -> dict | None:
        """The latest verdict any rank published, waiting up to ``seconds`` for one; None if none came."""
        until = time.monotonic() + seconds
        while True:
            self._verdicts.extend(v for _, v in self._drain("verdict"))
            if self._verdicts or time.monotonic() >= until:
                return self._verdicts[-1] if self._verdicts else None
            time.sleep(_POLL_SECONDS)

    def close(self) -> None:
        """Free the communicator (``shutdown()``, on every rank)."""
        from mpi4py import MPI

        if self.comm != MPI.COMM_NULL:
            self.comm.Free()

    def publish_note(self, text: str, to) -> None:
        """Tell ranks ``to`` why this rank left the torus (e.g. the callback that stopped its training)."""
        self._send_all("note", text, to)

    def note(self, rank: int, seconds: float) -> str | None:
        """Rank ``rank``'s note, waiting up to ``seconds``; None if none came."""
        until = time.monotonic() + seconds
        while True:
            self._notes.update(self._drain("note"))
            if rank in self._notes or time.monotonic() >= until:
                return self._notes.get(rank)
            time.sleep(_POLL_SECONDS)


class StoreChannel:
    """The roll call over the rendezvous store of ``horovodrun --gloo`` (keys under one scope per init).

    Args:
        base: ``http://ADDR:PORT/SCOPE``. ``rank``, ``size``: this rank and the world size.
    """

    def __init__(self, base: str, rank: int, size: int):
        self.base, self.rank, self.size = base, rank, size

    def _put(self, key: str, obj) -> None:
        body = json.dumps(obj).encode()
        urllib.request.urlopen(urllib.request.Request(f"{self.base}/{key}", data=body, method="PUT"),
                               timeout=10).read()

    def _get(self, key: str):
        try:
            with urllib.request.urlopen(f"{self.base}/{key}", timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def announce(self, call: int) -> None:
        self._put(f"call{int(call)}_{self.rank}", int(call))

    def arrivals(self, call: int, seconds: float) -> set[int]:
        arrived, until = {self.rank}, time.monotonic() + seconds
        while len(arrived) < self.size and time.monotonic() < until:
            arrived.update(r for r in range(self.size)
                           if r not in arrived and self._get(f"call{int(call)}_{r}") is not None)
            time.sleep(max(_POLL_SECONDS, 0.25))
        return arrived

    def publish_verdict(self, verdict: dict) -> None:
        self._put("verdict", verdict)

    def verdict(self, seconds: float = 0.0) -> dict | None:
        until = time.monotonic() + seconds
        while True:
            found = self._get("verdict")
            if found is not None or time.monotonic() >= until:
                return found
            time.sleep(max(_POLL_SECONDS, 0.25))


    def close(self) -> None:
        """Nothing to free (the store belongs to the runner)."""

    def publish_note(self, text: str, to) -> None:
        self._put(f"note_{self.rank}", text)

    def note(self, rank: int, seconds: float) -> str | None:
        until = time.monotonic() + seconds
        while True:
            found = self._get(f"note_{rank}")
            if found is not None or time.monotonic() >= until:
                return found
            time.sleep(max(_POLL_SECONDS, 0.25))


def channel_for(torus_comm, environ, rank: int, size: int, scope: str):
    """The roll-call channel of this process: an :class:`MPIChannel` on a duplicate of the torus
    communicator when there is one, else a :class:`StoreChannel` on the Gloo rendezvous store, else None
    (one rank, or no channel: the deadline then ends the wait without naming the missing ranks)."""
    if size <= 1:
        return None
    if torus_comm is not None:
        return MPIChannel(torus_comm.comm.Dup())
    addr, port = environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    if addr and port:
        return StoreChannel(f"http://{addr}:{port}/{scope}", rank, size)
    return None
