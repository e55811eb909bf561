"""Waiting on MPI requests against a deadline: a stall raises instead of blocking forever.

MPI calls made outside Horovod never time out, so a rank that skipped a torus call, stopped early (a Keras
``EarlyStopping`` or ``TerminateOnNaN`` that fired on one rank only) or died would leave the others
blocked. The MPI transport therefore issues every collective and point-to-point step of a call as a
non-blocking request and waits through :meth:`CallClock.wait`, which tests the requests
(``MPI_Testall``) until they complete or the call's deadline passes. Then, on every rank that is waiting:

1. a *roll call* on a private communicator: a rank whose wait passed the deadline sends the number of its
   call to every other rank; a rank waiting in the same call that sees it (it looks every
   :data:`_LOOK_SECONDS` while it waits, so a rank that entered the call late looks as soon as it enters)
   sends its own at once, a rank still waiting in an earlier call answers that it is behind (it is
   *expected*); each rank collects the numbers until its :class:`horovod_torus.rollcall.Tally` is final
   (:data:`ROLL_CALL_SECONDS` without a new arrival and nobody expected, at most
   :data:`ROLL_CALL_LIMIT_SECONDS`): the ranks that sent the same call number arrived, the others did not;
2. :class:`TorusStallError` is raised, naming the call number, its name, the deadline and the ranks that
   did not arrive, so ``fit``'s ``on_train_end``, a ``BackupAndRestore`` and the user's ``finally`` run;
3. the pending requests cannot be cancelled (MPI has no cancel for collectives), so the communicators are
   unusable: when the process exits after the error, an ``atexit`` hook tells the other waiting ranks and
   waits (up to :data:`EXIT_GRACE_SECONDS`) until they are exiting too, so that every one has run its own
   error handling, then ends the job with ``MPI_Abort`` (every rank, including one that left early, exits
   non-zero) instead of hanging in ``MPI_Finalize``.

Cost when nothing stalls: no message; a call still waiting after :data:`TESTS_PER_CHECK` tests reads the
clock (every that many tests: on an oversubscribed node Open MPI yields the CPU in every test, so a test
can take milliseconds) and probes the roll-call communicator (``MPI_Iprobe``, local) at most every
:data:`_LOOK_SECONDS`.

A skipped call or a one-rank stop is a :class:`TorusStallError` (not Horovod's ``HorovodInternalError``,
which Horovod's elastic mode treats as a lost rank and resets).

Importing this module does not import mpi4py (which would initialise MPI): the TensorFlow layer imports
:class:`TorusStallError` under every launcher, Gloo included.
"""
from __future__ import annotations

import atexit
import sys
import time

import numpy as np

from horovod_torus.rollcall import ROLL_CALL_LIMIT_SECONDS, ROLL_CALL_SECONDS, Tally

__all__ = ["TorusStallError", "CallClock", "stall_error", "left_error", "note_stop", "last_stop", "ROLL_CALL_SECONDS",
           "ROLL_CALL_LIMIT_SECONDS", "EXIT_GRACE_SECONDS", "TESTS_PER_CHECK", "exit_check_mpi", "job_ending",
           "left_stall", "uncaught_error", "end_on_uncaught"]

#: Seconds between two looks of a waiting call for roll-call messages (after its first tests).
_LOOK_SECONDS = 0.05

#: Tests of a call's requests between two readings of the clock. Measured on 2 cores oversubscribed (4 ranks
#: and 3 busy loops on one core): 1024 tests took 7 s (Open MPI yields in each test), which put the deadline
#: and the roll call 7 s late.
TESTS_PER_CHECK = 16

#: Seconds a stalled process waits at exit for the other stalled ranks to be exiting before MPI_Abort.
EXIT_GRACE_SECONDS = 10.0

_ROLL_CALL_TAG, _EXIT_TAG = 73, 74
_abort_registered = {"done": False}


class TorusStallError(RuntimeError):
    """A torus call waited past its deadline for ranks that did not make the same call.

    Attributes:
        call: the call number (1-based, per TorusComm). ``name``: the call's name or "".
        missing: the ranks (of the torus communicator) that did not report waiting in this call.
        deadline: the deadline in seconds.
        by: the rank whose wait passed the deadline and opened the roll call, or decided the verdict
            (None: none, e.g. a rank left the torus); another rank's number means this rank raised before
            its own deadline because that rank's verdict was final.
    """

    def __init__(self, message: str = "", call: int = 0, name: str = "", missing=(), deadline: float = 0.0,
                 by: int | None = None):
        super().__init__(message)
        self.call, self.name, self.missing, self.deadline, self.by = call, name, tuple(missing), deadline, by


def stall_error(call: int, name: str, grid, deadline: float, missing, ending: str,
                by: int | None = None) -> TorusStallError:
    """The :class:`TorusStallError` of call number ``call`` (``name``) on ``grid`` that waited ``deadline``
    seconds for ``missing`` (ranks; None: unknown); ``ending`` says what happens next (transport-specific);
    ``by``: :attr:`TorusStallError.by`."""
    label = f" {name!r}" if name else ""
    who = list(missing) if missing is not None else "unknown to this rank (no roll-call channel)"
    stop = last_stop()
    here = f"; this rank stopped training: {stop}" if stop else ""
    return TorusStallError(
        f"horovod_torus: torus all-reduce call {call}{label} on grid {grid} waited {deadline:g} s for the other "
        f"ranks; rank(s) {who} did not make this call (a rank skipped it, stopped early, e.g. a Keras callback "
        f"that stopped training on one rank only, or died){here}. {ending}. Stop every rank together "
        f"(horovod_torus.tensorflow.keras.callbacks.StopTogetherCallback) or make the same torus calls on every "
        f"rank", call, name, missing or (), deadline, by)


def left_error(rows, left, rank: int, grid, why: str = "") -> TorusStallError:
    """The error of a signature exchange in which ranks ``left`` sent
    :data:`horovod_torus.signature.EXIT_SIGNATURE` (they reached ``shutdown()`` or their exit) while the
    others made a torus call. ``rows``: the gathered words ([N, len(FIELDS)]); ``why``: what the leaving
    ranks said (e.g. ``"; rank 0: it stopped training: ..."``)."""
    from horovod_torus.signature import FIELDS

    at = FIELDS.index("call")
    staying = [r for r in range(len(rows)) if r not in left]
    call = min(int(rows[r][at]) for r in staying)
    advice = "Stop every rank together (horovod_torus.tensorflow.keras.callbacks.StopTogetherCallback)"
    if rank in left:
        stop = last_stop()
        return TorusStallError(
            f"horovod_torus: this rank (rank {rank}) left the torus (shutdown() or the end of the process) after "
            f"{int(rows[rank][at]) - 1} torus calls while rank(s) {staying} made torus call {call}"
            f"{f'; it stopped training: {stop}' if stop else ''}. {advice}", call, "<exit>", staying, 0.0)
    return TorusStallError(
        f"horovod_torus: torus all-reduce call {call} on grid {grid}: rank(s) {list(left)} did not make this call: "
        f"they left the torus (shutdown() or the end of the process){why} (a rank skipped the call or stopped "
        f"early, e.g. a Keras callback that stopped training on one rank only). {advice} or make the same torus "
        f"calls on every rank", call, "", left, 0.0)


_stops: list[str] = []


def note_stop(text: str) -> None:
    """Record why this process stopped training (e.g. the Keras callback that set ``model.stop_training``),
    for the messages of a later stall; see :func:`last_stop`."""
    _stops.append(text)


def last_stop() -> str:
    """The last stop recorded with :func:`note_stop`, or ``""``."""
    return _stops[-1] if _stops else ""


class CallClock:
    """The deadline of one torus call on ``comm`` (the torus' private duplicate communicator).

    Args:
        comm: the communicator of the call's ranks (its ranks are named in the error).
        alarm: a second private duplicate of it, for the roll call only.
        call: the call number; ``name``: the call's name; ``grid``: for the message.
        deadline: seconds the call may wait in total, or None (wait forever, ``MPI_Waitall``).
        heard: the roll-call messages this process received so far, ``{call: {rank: call it waits in}}``
            (one dict per TorusComm, kept across calls: a roll call may open while this rank is still in
            the call before).
        start: when the call began (``time.monotonic()`` seconds; None: now); the deadline counts from it.
    """

    def __init__(self, comm, alarm, call: int, name: str, grid, deadline: float | None, heard=None,
                 start: float | None = None):
        self.comm, self.alarm, self.call, self.name, self.grid = comm, alarm, call, name, grid
        self.deadline = deadline
        self.heard = {} if heard is None else heard
        self.start = time.monotonic() if start is None else start
        self._answered: set[tuple[int, int]] = set()  # (rank, call) told that this rank is behind
        self._sent: list = []  # (buffer, request) of the roll-call sends, alive until the process ends

    def wait(self, requests) -> None:
        """Complete ``requests`` (a list of ``MPI.Request``), or raise :class:`TorusStallError` (after the
        roll call) once the call has waited :attr:`deadline` seconds, or once another rank's roll call for
        this call is open (this rank then joins it)."""
        from mpi4py import MPI

        if not self.deadline:
            MPI.Request.Waitall(requests)
            return
        give_up = self.start + self.deadline
        spins, look = 0, 0.0
        # Busy testing, as MPI's own blocking waits do: MPI moves data only inside MPI calls (no progress
        # thread), so napping between tests would slow every large transfer.
        while not MPI.Request.Testall(requests):
            spins += 1
            if spins % TESTS_PER_CHECK:
                continue
            now = time.monotonic()
            if now > give_up:
                self._raise(self.alarm.Get_rank())
            if now >= look:
                look = now + _LOOK_SECONDS
                opener = self._listen()
                if opener is not None:
                    self._raise(opener)

    def _send(self, words, dest: int) -> None:
        buf = np.array(words, np.int64)
        self._sent.append((buf, self.alarm.Isend(buf, dest=dest, tag=_ROLL_CALL_TAG)))  # never waited for

    def _listen(self) -> int | None:
        """Receive the roll-call messages that came (``[call asked, call the sender waits in]``) into
        :attr:`heard`; tell a rank whose roll call is for a later call that this one is behind; return the
        first rank that opened a roll call for this call, or None."""
        from mpi4py import MPI

        status = MPI.Status()
        while self.alarm.Iprobe(source=MPI.ANY_SOURCE, tag=_ROLL_CALL_TAG, status=status):
            got, src = np.empty(2, np.int64), status.Get_source()
            self.alarm.Recv(got, source=src, tag=_ROLL_CALL_TAG)
            asked, at = int(got[0]), int(got[1])
            self.heard.setdefault(asked, {})[src] = at
            if asked > self.call and at == asked and (src, asked) not in self._answered:
                self._answered.add((src, asked))
                self._send([asked, self.call], src)
        return next((src for src, at in self.heard.get(self.call, {}).items() if at == self.call), None)

    def _raise(self, opener: int):
        missing = self._roll_call()
        _abort_at_exit(self.alarm, [r for r in range(self.alarm.Get_size())
                                    if r not in missing and r != self.alarm.Get_rank()])
        here = "" if opener == self.alarm.Get_rank() else (
            f" (this rank joined the roll call of rank {opener}, whose wait passed the deadline first)")
        raise stall_error(self.call, self.name, self.grid, self.deadline, missing,
                          "The torus communicators cannot be used again: the job ends with MPI_Abort when this "
                          f"process exits{here}", opener)

    def _roll_call(self) -> list[int]:
        """Ranks that did not report waiting in this call before this rank's Tally was final (collective
        only among the waiting ranks: every send is non-blocking and never waited for)."""
        me, size = self.alarm.Get_rank(), self.alarm.Get_size()
        for r in range(size):
            if r != me:
                self._send([self.call, self.call], r)
        tally = Tally(self.call, me, size, time.monotonic())
        while True:
            self._listen()
            now = time.monotonic()
            for src, at in self.heard.get(self.call, {}).items():
                tally.hear(src, at, now)
            if tally.final(now):
                return tally.missing()
            time.sleep(0.01)


def job_ending() -> bool:
    """Whether this process raised a stall (or a rank left a call of it): its torus communicators have
    requests that never complete, and the job ends with MPI_Abort when the process exits
    (:func:`_abort_when_peers_exit`). :meth:`horovod_torus.mpi.TorusComm.free` then frees nothing."""
    return _abort_registered["done"]


def _abort_at_exit(alarm, peers: list[int]) -> None:
    """At exit: :func:`_abort_when_peers_exit` (registered once per process)."""
    if _abort_registered["done"]:
        return
    _abort_registered["done"] = True
    atexit.register(_abort_when_peers_exit, alarm, peers)


def _abort_when_peers_exit(alarm, peers: list[int]) -> None:
    """Tell ``peers`` (the other ranks of a stalled call) that this one is exiting, wait up to
    EXIT_GRACE_SECONDS for the same from each, then MPI_Abort."""
    from mpi4py import MPI

    note = np.zeros(1, np.int64)
    for r in peers:
        alarm.Isend(note, dest=r, tag=_EXIT_TAG)
    waiting, until, status = set(peers), time.monotonic() + EXIT_GRACE_SECONDS, MPI.Status()
    while waiting and time.monotonic() < until:
        if alarm.Iprobe(source=MPI.ANY_SOURCE, tag=_EXIT_TAG, status=status):
            alarm.Recv(np.empty(1, np.int64), source=status.Get_source(), tag=_EXIT_TAG)
            waiting.discard(status.Get_source())
        else:
            time.sleep(0.01)
    print("horovod_torus: a torus call stalled in this process: ending the job with MPI_Abort",
          file=sys.stderr, flush=True)
    MPI.COMM_WORLD.Abort(1)


def left_stall(alarm, rows, left, grid) -> TorusStallError:
    """The mpi transport's :func:`left_error` for this rank, the job's end arranged: every rank of the
    exchange ends with MPI_Abort once all have exited (the leaving rank from its exit check, at once)."""
    me = alarm.Get_rank()
    _abort_at_exit(alarm, [r for r in range(alarm.Get_size()) if r != me])
    return left_error(rows, left, me, grid)


def uncaught_error() -> BaseException | None:
    """The uncaught exception this process is ending on (``sys.last_value``: Python sets it when it prints
    the traceback, before the ``atexit`` hooks run; not for ``sys.exit``), unless it is one of the torus' own
    errors (a call or settings mismatch, a stall: raised on every rank of the call at once, so the ranks'
    exit checks meet), else None."""
    from horovod_torus.agreement import SettingsMismatchError
    from horovod_torus.signature import TorusMismatchError

    exc = getattr(sys, "last_value", None)
    if exc is None or isinstance(exc, (TorusStallError, TorusMismatchError, SettingsMismatchError)) \
            or "horovod_torus" in str(exc):  # their TensorFlow forms inside tf.function keep the message only
        return None
    return exc


def end_on_uncaught(rank: int, exc: BaseException, mpi: bool) -> None:
    """At the exit of a rank that an uncaught error ends (:func:`uncaught_error`): end the job at once, as
    Horovod does, instead of the exit check, which waits for the other ranks (up to the stall deadline, for
    ever without one) and never meets them when they wait inside an operation of Horovod's own (a broadcast, a
    plain all-reduce) for this rank. Under Horovod's MPI controller (``mpi``): ``MPI_Abort`` (the convention of
    mpi4py's ``python -m mpi4py``: an unhandled exception aborts the job rather than deadlock it); under
    ``horovodrun --gloo``: nothing more, Horovod's own shutdown at exit then ends the others' pending
    operations and the launcher the job (this rank's status is 1)."""
    what = f"horovod_torus: rank {rank} ends on an uncaught {type(exc).__name__}"
    if not mpi:
        print(f"{what}: no exit check, Horovod's shutdown ends the job", file=sys.stderr, flush=True)
        return
    print(f"{what}: ending the job with MPI_Abort", file=sys.stderr, flush=True)
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(1)


def exit_check_mpi(tc) -> None:
    """At the process's exit (registered by ``init`` under Horovod's MPI controller, where the calls of both
    transports are checked on ``tc``): ``tc.leave()``; when it raises
    (this rank left while others still made torus calls) print why and end the job (status 1 everywhere).
    Skipped after a stall this process raised: its own exit hook ends the job. When the roll call found
    every rank at the exit check's call number, the others were waiting in a real call of that number
    while this rank was leaving: the line says how many calls this rank made (as the Horovod transport's
    :func:`horovod_torus.tensorflow.guard.exit_check` does)."""
    if _abort_registered["done"]:
        return
    try:
        tc.leave()
    except TorusStallError as exc:
        if exc.name == "<exit>" and not exc.missing:
            stop = f"; it had stopped training: {last_stop()}" if last_stop() else ""
            why = f"it made {exc.call - 1} torus calls while the other ranks waited in call {exc.call}{stop}"
        else:
            why = str(exc)
        print(f"horovod_torus: rank {tc.rank} exits with status 1: {why}", file=sys.stderr, flush=True)
        _abort_when_peers_exit(tc.alarm, [r for r in range(tc.alarm.Get_size()) if r != tc.rank])
