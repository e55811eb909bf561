"""The stall roll call outside Horovod: which ranks wait in a stalled call, and the verdict they share.

Used by the Horovod transport's deadline (:mod:`horovod_torus.tensorflow.guard`): when a torus call has
waited past its deadline inside a Horovod op, Horovod cannot be asked who is missing, so the waiting ranks
ask each other over a second channel:

* :class:`MPIChannel` (Horovod's MPI controller: mpirun, ``horovodrun --mpi``): a private duplicate
  communicator; non-blocking object sends, probed, never waited for;
* :class:`StoreChannel` (``horovodrun --gloo``, no MPI world): the runner's rendezvous key-value store
  (HTTP, ``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``), the channel :mod:`horovod_torus.agreement` uses.

Both offer the same steps: :meth:`announce` (this rank waits in call ``c``), :meth:`opened` (has another
rank announced ``c``: a rank that enters a call late joins a roll call already open instead of waiting for
its own deadline), :meth:`arrivals` (the ranks that announced ``c`` before the roll call's :class:`Tally`
was final: the others did not make the call), :meth:`publish_verdict` / :meth:`verdict` (the outcome one
waiting rank decided, for the ranks whose Horovod op ended before their own deadline, and for the rank that
left), :meth:`publish_note` / :meth:`note` (why a rank left the torus: the callback that stopped its
training) and :meth:`publish_exit` / :meth:`exited` (a rank with a stall has run its error handling and
exits: the ranks wait for each other before exiting, so that a launcher that ends the job at the first
non-zero exit, ``horovodrun``, does not kill a rank before it raised). Cost: nothing per normal call; only
after a deadline has passed (or a call waited :data:`LISTEN_AFTER_SECONDS`: one probe or store request per
watchdog tick), per waiting rank O(N) messages or requests (N ranks), nothing on the data path.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

__all__ = ["MPIChannel", "StoreChannel", "channel_for", "Tally", "ROLL_CALL_SECONDS", "ROLL_CALL_LIMIT_SECONDS",
           "LISTEN_AFTER_SECONDS"]

_POLL_SECONDS = 0.05

#: Seconds without a new arrival after which a roll call's verdict is final (counted from the moment this
#: rank joined the roll call, or from the last rank that announced itself since).
ROLL_CALL_SECONDS = 3.0

#: The most seconds a roll call collects after this rank joined it, however many ranks are still expected:
#: the verdict comes within the deadline + this + a poll.
ROLL_CALL_LIMIT_SECONDS = 8.0

#: Seconds a call waits before its rank looks for a roll call other ranks opened for it (calls that end
#: sooner cost nothing).
LISTEN_AFTER_SECONDS = 1.0


class Tally:
    """One rank's count of one roll call: who announced call ``call``, and when the verdict is final.

    Args:
        call: the call number; ``rank``, ``size``: this rank (counted as arrived) and the world size.
        now: ``time.monotonic()`` when this rank joined the roll call (seconds).
        quiet: seconds without news after which the verdict is final (:data:`ROLL_CALL_SECONDS`).
        limit: seconds after ``now`` after which it is final whatever is expected
            (:data:`ROLL_CALL_LIMIT_SECONDS`).

    A rank is *expected* while it said it still waits in an earlier call (:meth:`hear` with ``at < call``):
    it will reach this one, so the verdict waits for it, up to ``limit``. Pure bookkeeping (no I/O).
    """

    def __init__(self, call: int, rank: int, size: int, now: float, quiet: float = ROLL_CALL_SECONDS,
                 limit: float = ROLL_CALL_LIMIT_SECONDS):
        self.call, self.size, self.quiet = int(call), int(size), float(quiet)
        self.arrived: set[int] = {int(rank)}
        self.behind: dict[int, int] = {}  # rank -> the earlier call it still waits in
        self.news, self.until = float(now), float(now) + float(limit)

    def hear(self, src: int, at: int, now: float) -> None:
        """Rank ``src`` said (at ``now``) that it waits in call ``at``: ``at == call``: it arrived;
        ``at < call``: it is expected; a later call: ignored (it is not waiting in this one)."""
        src, at = int(src), int(at)
        if src in self.arrived:
            return
        if at == self.call:
            self.arrived.add(src)
            self.behind.pop(src, None)
            self.news = now
        elif at < self.call and self.behind.get(src) != at:
            self.behind[src] = at
            self.news = now

    def final(self, now: float) -> bool:
        """True once every rank arrived, the limit passed, or no rank is expected and ``quiet`` seconds
        passed without news."""
        if len(self.arrived) >= self.size or now >= self.until:
            return True
        return not self.behind and now >= self.news + self.quiet

    def missing(self) -> list[int]:
        """The ranks that did not arrive (ascending)."""
        return [r for r in range(self.size) if r not in self.arrived]


def _collect(channel, call: int, quiet: float, limit: float, poll: float) -> set[int]:
    """The ranks (this one included) that announced ``call`` on ``channel`` before its :class:`Tally` was
    final (waiting for at most ``limit`` seconds)."""
    tally = Tally(call, channel.rank, channel.size, time.monotonic(), quiet, limit)
    while True:
        now = time.monotonic()
        for src in channel.heard(call):
            tally.hear(src, call, now)
        if tally.final(now):
            return tally.arrived
        time.sleep(poll)


class MPIChannel:
    """The roll call over ``comm`` (a private duplicate communicator; its ranks are the torus ranks).

    Args:
        comm: mpi4py intra-communicator used for nothing else.
        tag: first of the four tags it uses (announce, verdict, note, exit).
    """

    def __init__(self, comm, tag: int = 75):
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self._tags = {"announce": tag, "verdict": tag + 1, "note": tag + 2, "exit": tag + 3}
        self._verdicts: list[dict] = []
        self._notes: dict[int, str] = {}
        self._heard: dict[int, set[int]] = {}  # call -> the ranks that announced it (kept across calls)
        self._exits: set[int] = set()

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

    def heard(self, call: int) -> set[int]:
        """The other ranks that have announced ``call`` so far (no wait)."""
        for src, c in self._drain("announce"):
            self._heard.setdefault(int(c), set()).add(src)
        return set(self._heard.get(int(call), ()))

    def opened(self, call: int) -> bool:
        """Whether another rank has announced ``call`` (a roll call for it is open)."""
        return bool(self.heard(call))

    def arrivals(self, call: int, quiet: float = ROLL_CALL_SECONDS,
                 limit: float = ROLL_CALL_LIMIT_SECONDS) -> set[int]:
        """The ranks (this one included) that announced ``call`` before the roll call's :class:`Tally` was
        final (``quiet`` seconds without a new one, at most ``limit`` seconds)."""
        return _collect(self, call, quiet, limit, _POLL_SECONDS)

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

    def publish_exit(self) -> None:
        """Tell every other rank that this one has run its error handling and exits."""
        self._send_all("exit", self.rank)

    def exited(self, ranks, seconds: float) -> set[int]:
        """The ranks of ``ranks`` that published their exit, waiting up to ``seconds`` for all of them."""
        want, until = set(ranks) - {self.rank}, time.monotonic() + seconds
        while True:
            self._exits.update(src for src, _ in self._drain("exit"))
            if want <= self._exits or time.monotonic() >= until:
                return want & self._exits
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
        self._put(f"open{int(call)}", self.rank)  # one key for opened(): the first and every later announcer

    def heard(self, call: int) -> set[int]:
        return {r for r in range(self.size) if r != self.rank and self._get(f"call{int(call)}_{r}") is not None}

    def opened(self, call: int) -> bool:
        """One request (asked before this rank announces ``call``, so any announcer is another rank)."""
        return self._get(f"open{int(call)}") is not None

    def arrivals(self, call: int, quiet: float = ROLL_CALL_SECONDS,
                 limit: float = ROLL_CALL_LIMIT_SECONDS) -> set[int]:
        return _collect(self, call, quiet, limit, max(_POLL_SECONDS, 0.25))

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

    def publish_exit(self) -> None:
        self._put(f"exit_{self.rank}", self.rank)

    def exited(self, ranks, seconds: float) -> set[int]:
        want, until, done = set(ranks) - {self.rank}, time.monotonic() + seconds, set()
        while True:
            done.update(r for r in want - done if self._get(f"exit_{r}") is not None)
            if want <= done or time.monotonic() >= until:
                return done
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
